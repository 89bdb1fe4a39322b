"""Fixtures of the guide tests: ``load_snippet`` runs the guides' blocks (``seed_guides.py``)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the tests import seed_guides

from seed_guides import MODULE_PREFIX, SNIPPETS, run_blocks, unregister_guide_classes  # noqa: E402


@pytest.fixture
def load_snippet():
    """``load_snippet(name)`` runs the guide blocks of :data:`SNIPPETS` ``[name]``; undone after."""

    def _load(snippet: str) -> types.ModuleType:
        return run_blocks(*SNIPPETS[snippet], name=f"{MODULE_PREFIX}{snippet}")

    yield _load
    unregister_guide_classes()
