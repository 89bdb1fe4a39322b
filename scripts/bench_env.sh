#!/usr/bin/env bash
# TRL's environment for benchmarks/trl_compare.py: .venvs/benchmark, from the root's
# `benchmark` dependency group only (TRL + trinity-workflows for the shared reward; no verl,
# whose FSDP patch imports a TRL class that TRL 1.x removed, so the two cannot share one).
set -euo pipefail
source "$(dirname "$0")/env.sh"
sync_env "$ROOT/.venvs/benchmark" --only-group benchmark
echo "$ROOT/.venvs/benchmark/bin/python"
