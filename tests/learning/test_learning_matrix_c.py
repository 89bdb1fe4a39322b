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


def test_a_vlm_learns_to_count_squares(matrix):
    """Vision-language RL (issue 45): GRPO takes the ``vlm`` tiny preset from chance (0.2, the
    first 5 steps at most 0.3) to counting 1-5 squares in pictures right at least 0.7 of the
    time in 70 steps (last 5 steps' mean reward; the full matrix's 150 steps must reach 0.8),
    on the transformers engine and verl. One run measured 0.09 -> 0.91 in 90 steps, and the
    held-out pictures' greedy accuracy went from 0.0 to 0.96."""
    out, model, address = matrix
    result = lm.run_type("grpo-vlm-counting", out, model, ci=True, ray_address=address)
    lm.write_results(lm.load_results(out) + [result], out)
    assert not result.error, result.error
    assert result.passed, (
        f"the VLM stopped learning: {result.first:.2f} -> {result.last:.2f} in {result.steps} "
        f"steps (bar: {result.bar}); curve {result.curve}"
    )
