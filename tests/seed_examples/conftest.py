"""Load the guides' snippets as modules, one at a time (each registers 'example_workflow')."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from trinity.common.workflows import WORKFLOWS

SNIPPETS = Path(__file__).parent / "snippets"


@pytest.fixture
def load_snippet():
    loaded: list[str] = []

    def _load(name: str):
        module_name = f"seed_snippet_{name}"
        spec = importlib.util.spec_from_file_location(module_name, SNIPPETS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        loaded.append(module_name)
        return module

    yield _load
    WORKFLOWS.unregister("example_workflow")
    for name in loaded:
        sys.modules.pop(name, None)
