"""Plugin loader: every module under --plugin-dir / TRINITY_PLUGIN_DIRS is imported once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import pytest

from trinity.common.workflows import WORKFLOWS
from trinity.utils.plugin_loader import PLUGIN_DIRS_ENV, PluginLoadError, load_plugins


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv(PLUGIN_DIRS_ENV, raising=False)
    d = tmp_path / "plugins"
    d.mkdir()
    return d


def test_loads_every_module_once_and_registers(plugin_dir):
    tag = uuid.uuid4().hex[:8]
    helper, main, sub = f"helpers_{tag}", f"my_flow_{tag}", f"pkg_{tag}"
    (plugin_dir / f"{helper}.py").write_text("GREETING = 'hi'\n")
    (plugin_dir / f"{main}.py").write_text(
        textwrap.dedent(
            f"""
            from {helper} import GREETING  # plugins import each other by plain name
            from trinity.common.workflows import WORKFLOWS, Workflow

            @WORKFLOWS.register_module("plugin_flow_{tag}")
            class PluginFlow(Workflow):
                def run(self):
                    return []
            """
        )
    )
    (plugin_dir / sub).mkdir()
    (plugin_dir / sub / "__init__.py").write_text("")
    (plugin_dir / sub / "inner.py").write_text("LOADED = True\n")
    (plugin_dir / "__pycache__").mkdir()
    (plugin_dir / "__pycache__" / "junk.py").write_text("raise SystemExit('must not load')\n")

    loaded = load_plugins(str(plugin_dir))
    assert set(loaded) >= {helper, main, sub, f"{sub}.inner"}
    assert WORKFLOWS.get(f"plugin_flow_{tag}").__name__ == "PluginFlow"
    assert sys.modules[f"{sub}.inner"].LOADED
    # a second call (another component starting up) does not re-import or re-register
    load_plugins(str(plugin_dir))
    assert os.environ[PLUGIN_DIRS_ENV].split(os.pathsep) == [str(plugin_dir.resolve())]
    WORKFLOWS.unregister(f"plugin_flow_{tag}")


def test_env_variable_is_honoured(plugin_dir, monkeypatch):
    name = f"envplug_{uuid.uuid4().hex[:8]}"
    (plugin_dir / f"{name}.py").write_text("X = 1\n")
    monkeypatch.setenv(PLUGIN_DIRS_ENV, str(plugin_dir))
    assert name in load_plugins()


def test_missing_directory_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv(PLUGIN_DIRS_ENV, raising=False)
    with pytest.raises(PluginLoadError, match="does not exist"):
        load_plugins(str(tmp_path / "nope"))


def test_broken_plugin_names_file_and_shows_its_traceback(plugin_dir):
    name = f"broken_{uuid.uuid4().hex[:8]}"
    (plugin_dir / f"{name}.py").write_text("def f():\n    return 1 / 0\n\nf()\n")
    with pytest.raises(PluginLoadError) as info:
        load_plugins(str(plugin_dir))
    text = str(info.value)
    assert f"{name}.py" in text and "ZeroDivisionError" in text and "return 1 / 0" in text


def test_plugin_shadowing_an_imported_module_is_refused(plugin_dir):
    (plugin_dir / "json.py").write_text("X = 1\n")
    with pytest.raises(PluginLoadError, match="same name as the already imported module"):
        load_plugins(str(plugin_dir))


def test_child_process_inherits_plugin_dirs(plugin_dir):
    name = f"childplug_{uuid.uuid4().hex[:8]}"
    (plugin_dir / f"{name}.py").write_text("VALUE = 42\n")
    load_plugins(str(plugin_dir))
    code = (
        "from trinity.utils.plugin_loader import load_plugins\n"
        f"print(load_plugins())\nimport {name}; print({name}.VALUE)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        check=True,
    ).stdout
    assert name in out and "42" in out


def test_trinity_plugins_namespace_directory_is_loaded(tmp_path, monkeypatch):
    """The guides' `trinity/plugins` directory: any `trinity/plugins` on the path is loaded."""
    monkeypatch.delenv(PLUGIN_DIRS_ENV, raising=False)
    name = f"ns_plugin_{uuid.uuid4().hex[:8]}"
    plugins = tmp_path / "trinity" / "plugins"
    plugins.mkdir(parents=True)
    (plugins / f"{name}.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        loaded = load_plugins()
        assert f"trinity.plugins.{name}" in loaded
        assert sys.modules[f"trinity.plugins.{name}"].VALUE == 7
    finally:
        for mod in [m for m in sys.modules if m.startswith("trinity.plugins")]:
            del sys.modules[mod]


def test_a_plugin_module_in_the_trinity_namespace_is_refused(plugin_dir):
    """It would pass for a built-in, and built-ins do not replace each other."""
    (plugin_dir / "trinity" / "algorithm").mkdir(parents=True)
    (plugin_dir / "trinity" / "algorithm" / "my_algo.py").write_text("X = 1\n")
    with pytest.raises(
        PluginLoadError, match=r"'trinity\.algorithm\.my_algo'.*'trinity' namespace"
    ):
        load_plugins(str(plugin_dir))
    assert "trinity.algorithm.my_algo" not in sys.modules
