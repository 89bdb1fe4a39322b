# shellcheck shell=bash
# Shared by scripts/test.sh, scripts/quickstart.sh and .ci/run: build virtual
# environments from uv.lock.
#
# The lock pins torch 2.13.0 from PyPI (the CUDA build, portable everywhere).
# Where a CPU wheel of that same release lies in a local find-links directory
# (PIP_FIND_LINKS / UV_FIND_LINKS, as on our CI machines), it is installed in
# its place and the CUDA-only wheels (nvidia-*, cuda-*, triton) are skipped:
# same torch API, a few seconds instead of several GB.  No path of this machine
# is written into any committed file; it is only read from the environment.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export UV_COMPILE_BYTECODE=${UV_COMPILE_BYTECODE:-1}   # first imports of torch are slow without .pyc
export UV_LINK_MODE=${UV_LINK_MODE:-hardlink}

ensure_uv() {
  # `uv --version`, not `command -v uv`: a pyenv shim answers `command -v` for a uv that only
  # another Python version has, then fails when called ("pyenv: uv: command not found")
  if ! uv --version >/dev/null 2>&1; then
    echo "[env] uv not found: installing it with pip" >&2
    python3 -m pip install --quiet uv
  fi
}

# Print the path of a local torch 2.13.0 CPU wheel, if any.
cpu_torch_wheel() {
  local torch_version
  torch_version=$(sed -n '/^name = "torch"$/{n;s/^version = "\(.*\)"$/\1/p;}' "$ROOT/uv.lock")
  local dirs="${UV_FIND_LINKS:-} ${PIP_FIND_LINKS:-}" d
  for d in $dirs; do
    d=${d#file://}
    [ -d "$d" ] || continue
    for f in "$d"/torch-"$torch_version"+cpu-*.whl; do
      [ -f "$f" ] && { echo "$f"; return 0; }
    done
  done
  return 1
}

# Packages of the lock that only the CUDA build of torch needs.
cuda_only_packages() {
  sed -n 's/^name = "\(nvidia-[^"]*\|cuda-[^"]*\|triton\)"$/\1/p' "$ROOT/uv.lock" | sort -u
}

# sync_env ENV_DIR [uv sync selection args...]
#   e.g. sync_env .venvs/trinity-core --package trinity-core
#        sync_env .venv --all-packages
sync_env() {
  local env_dir=$1; shift
  ensure_uv
  local wheel skip=()
  if wheel=$(cpu_torch_wheel); then
    skip=(--no-install-package torch)
    local p
    for p in $(cuda_only_packages); do skip+=(--no-install-package "$p"); done
    # --inexact: a plain sync removes the CPU torch installed below (it is not "in" the
    # selection), so every run would reinstall it -- and an env in use would lose torch meanwhile
    UV_PROJECT_ENVIRONMENT="$env_dir" uv sync --frozen --inexact --quiet --directory "$ROOT" "$@" "${skip[@]}"
    if ! "$env_dir/bin/python" -c 'import torch, sys; sys.exit(0 if torch.__version__.endswith("+cpu") else 1)' 2>/dev/null; then
      # --no-config: the workspace's override-dependencies would swap the wheel back for PyPI's torch
      uv pip install --no-config --quiet --python "$env_dir/bin/python" --no-deps --reinstall-package torch "$wheel"
    fi
  else
    UV_PROJECT_ENVIRONMENT="$env_dir" uv sync --frozen --quiet --directory "$ROOT" "$@"
  fi
}
