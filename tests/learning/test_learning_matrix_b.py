"""The reduced learning matrix, one more share of the types (``learning_matrix.CI_SHARDS``;
see ``test_learning_matrix.py``): each type must clear the CI bar on its task."""

from __future__ import annotations

from pathlib import Path

import learning_matrix as lm  # loaded by conftest.py
import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("algorithm_type", lm.CI_SHARDS[Path(__file__).name])
def test_type_learns(algorithm_type, type_learns):
    type_learns(algorithm_type)


def test_lora_learns_the_quickstart(matrix):
    """LoRA (issue 42): the quickstart with ``model.lora_configs`` (rank 16, alpha 32, lr 4e-3)
    trains only an adapter, and still clears the CI bar in the same 45 steps (at full length
    it reaches 0.9: docs/learning.md)."""
    out, model, address = matrix
    run = lm.run_type("grpo-lora", out, model, ci=True, ray_address=address)
    lm.write_results(lm.load_results(out) + [run], out)
    assert not run.error, run.error
    assert run.passed, f"grpo-lora stopped learning: {run.first:.2f} -> {run.last:.2f}"
