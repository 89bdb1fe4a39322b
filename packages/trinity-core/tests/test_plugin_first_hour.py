"""A plugin author's first hour: test files beside a plugin are not loaded, and a name used
without its plugin directory says which option loads it."""

from __future__ import annotations

import os
import sys
import textwrap
import uuid

import pytest

from trinity.common.workflows import WORKFLOWS
from trinity.utils import plugin_loader
from trinity.utils.plugin_loader import (
    PLUGIN_DIRS_ENV,
    is_test_file,
    load_plugins,
    loaded_plugin_dirs,
)
from trinity.utils.registry import Registry, UnknownModuleError


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv(PLUGIN_DIRS_ENV, raising=False)
    monkeypatch.setattr(plugin_loader, "_loaded_dirs", [])
    d = tmp_path / "plugins"
    d.mkdir()
    return d


@pytest.mark.parametrize(
    ("name", "skipped"),
    [
        ("test_my_workflow.py", True),
        ("my_workflow_test.py", True),
        ("conftest.py", True),
        ("my_workflow.py", False),
        ("testing_helpers.py", False),  # not pytest's pattern: a plugin module
        ("contest.py", False),
        ("test.py", False),  # pytest does not collect it either
        ("__init__.py", False),
    ],
)
def test_the_test_file_rule(name, skipped):
    assert is_test_file(name) is skipped


def test_test_files_beside_a_plugin_are_not_imported(plugin_dir):
    tag = uuid.uuid4().hex[:8]
    (plugin_dir / f"flow_{tag}.py").write_text(
        textwrap.dedent(
            f"""
            from trinity.common.workflows import WORKFLOWS, Workflow

            @WORKFLOWS.register_module("first_hour_{tag}")
            class Flow(Workflow):
                def run(self):
                    return []
            """
        )
    )
    boom = "raise RuntimeError('a test file was imported by the plugin loader')\n"
    (plugin_dir / f"test_flow_{tag}.py").write_text(boom)
    (plugin_dir / f"flow_{tag}_test.py").write_text(boom)
    (plugin_dir / "conftest.py").write_text(boom)
    sub = plugin_dir / f"pkg_{tag}"
    sub.mkdir()
    (sub / "__init__.py").write_text("")
    (sub / "helper.py").write_text("VALUE = 1\n")
    (sub / "test_helper.py").write_text(boom)
    (sub / "conftest.py").write_text(boom)
    try:
        loaded = load_plugins(str(plugin_dir))
        assert sorted(loaded) == sorted([f"flow_{tag}", f"pkg_{tag}", f"pkg_{tag}.helper"])
        assert WORKFLOWS.get(f"first_hour_{tag}") is not None
        assert loaded_plugin_dirs() == [plugin_dir.resolve()]
    finally:
        WORKFLOWS.unregister(f"first_hour_{tag}")


def test_the_loader_documents_the_rule():
    doc = plugin_loader.__doc__ or ""
    assert "test_*.py" in doc and "*_test.py" in doc and "conftest.py" in doc


def _unknown(registry: Registry, name: str) -> str:
    with pytest.raises(UnknownModuleError) as caught:
        registry[name]
    return str(caught.value)


def test_an_unknown_name_says_how_to_load_a_plugin_directory(plugin_dir):
    reg = Registry(f"hint_{uuid.uuid4().hex[:8]}")
    reg.register_module("math_workflow", type("Math", (), {}))
    text = _unknown(reg, "my_workflow")
    # the existing text stays, the hint comes after it
    assert text.startswith(f"Unknown {reg.name} name 'my_workflow'.")
    assert "Known names: math_workflow." in text
    assert "--plugin-dir DIR" in text and "TRINITY_PLUGIN_DIRS" in text
    assert text.endswith("plugin directories loaded: none.")
    # a typo keeps its suggestion
    assert "Did you mean 'math_workflow'?" in _unknown(reg, "math_workflw")


def test_the_hint_lists_the_directories_loaded(plugin_dir):
    (plugin_dir / f"empty_{uuid.uuid4().hex[:8]}.py").write_text("X = 1\n")
    load_plugins(str(plugin_dir))
    text = _unknown(Registry(f"hint_{uuid.uuid4().hex[:8]}"), "my_workflow")
    assert f"plugin directories loaded: {plugin_dir.resolve()}." in text
    assert "no module of the loaded plugin directories registers it" in text
    assert "not loaded in this process" not in text  # load_plugins recorded it in the variable


def test_the_hint_names_a_variable_nobody_loaded(plugin_dir, monkeypatch):
    monkeypatch.setenv(PLUGIN_DIRS_ENV, str(plugin_dir))
    text = _unknown(Registry(f"hint_{uuid.uuid4().hex[:8]}"), "my_workflow")
    assert "plugin directories loaded: none." in text
    assert f"TRINITY_PLUGIN_DIRS names {os.path.realpath(plugin_dir)}, not loaded" in text
    assert "load_plugins()" in text
