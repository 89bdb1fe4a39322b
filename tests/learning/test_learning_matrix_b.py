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
