"""Plugin modules are ``trinity.plugins.<name>`` (Trinity-RFT 0.6), and keep their plain names.

(Our ``Workflow`` refuses ``task=None`` / ``model=None``, which Trinity-RFT's plugin test passes,
so these tests pass placeholder objects.)

Trinity-RFT 0.6's own plugin test checks that a plugin class's ``__module__`` starts with
``trinity.plugins`` and that the class reaches a Ray worker by that name; these tests check the
same without Ray (a fresh interpreter unpickles the class) and once with Ray (slow).
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import textwrap
import uuid

import pytest

from trinity.common.workflows import WORKFLOWS
from trinity.utils import plugin_loader
from trinity.utils.plugin_loader import PLUGIN_DIRS_ENV, PluginLoadError, load_plugins

WORKFLOW = """
from typing import List

from trinity.common.workflows import WORKFLOWS, Workflow


@WORKFLOWS.register_module("{name}")
class MyWorkflow(Workflow):
    def __init__(self, *, task, model, auxiliary_models=None):
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)

    def run(self) -> List:
        return ["Hello world", "Hi"]
"""


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv(PLUGIN_DIRS_ENV, raising=False)
    monkeypatch.setattr(plugin_loader, "_loaded_dirs", [])
    d = tmp_path / "plugins"
    d.mkdir()
    return d


def _workflow_plugin(plugin_dir, tag: str) -> tuple[str, str]:
    """A plugin file as Trinity-RFT's plugin test has it; (module file name, registry name)."""
    module, name = f"my_workflow_{tag}", f"my_workflow_{tag}"
    (plugin_dir / f"{module}.py").write_text(WORKFLOW.format(name=name))
    return module, name


def test_a_plugin_file_is_the_module_trinity_plugins_name(plugin_dir):
    tag = uuid.uuid4().hex[:8]
    module, name = _workflow_plugin(plugin_dir, tag)
    try:
        assert load_plugins(str(plugin_dir)) == [module]
        cls = WORKFLOWS.get(name)
        flow = cls(task=object(), model=object(), auxiliary_models=None)
        assert flow.__module__ == f"trinity.plugins.{module}"
        assert flow.run() == ["Hello world", "Hi"]
        # the plain name is the same module object, not a second copy
        assert sys.modules[module] is sys.modules[f"trinity.plugins.{module}"]
        assert sys.modules[module].__spec__.name == f"trinity.plugins.{module}"
        assert pickle.loads(pickle.dumps(cls)) is cls
    finally:
        WORKFLOWS.unregister(name)


def test_a_relative_and_an_absolute_path_load_the_directory_once(plugin_dir, monkeypatch):
    tag = uuid.uuid4().hex[:8]
    module, name = _workflow_plugin(plugin_dir, tag)
    monkeypatch.chdir(plugin_dir.parent)
    try:
        load_plugins(str(plugin_dir))
        monkeypatch.setenv(PLUGIN_DIRS_ENV, "plugins")  # Trinity-RFT's test sets a relative one
        load_plugins()  # no KeyError for the class registered already
        assert WORKFLOWS.get(name).__module__ == f"trinity.plugins.{module}"
    finally:
        WORKFLOWS.unregister(name)


def test_plugins_import_each_other_by_plain_name_once(plugin_dir):
    tag = uuid.uuid4().hex[:8]
    pkg = plugin_dir / f"shared_{tag}"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "counter.py").write_text("RUNS = []\nRUNS.append(1)\n")
    # loaded before its helper package (sorted order): the plain import goes through the alias
    (plugin_dir / f"a_user_{tag}.py").write_text(
        f"from shared_{tag}.counter import RUNS\nimport shared_{tag}.counter as plain\n"
    )
    load_plugins(str(plugin_dir))
    full = sys.modules[f"trinity.plugins.shared_{tag}.counter"]
    assert full is sys.modules[f"shared_{tag}.counter"]
    assert full.RUNS == [1]  # executed once
    assert sys.modules[f"trinity.plugins.a_user_{tag}"].plain is full


def test_plugins_import_each_other_as_trinity_plugins_and_relatively(plugin_dir):
    """Trinity-RFT's examples: ``from .bots_reward import ...`` inside a plugin file, and
    ``from trinity.plugins.bots_reward import ...`` inside a function of another."""
    tag = uuid.uuid4().hex[:8]
    (plugin_dir / f"scores_{tag}.py").write_text("def score():\n    return 0.5\n")
    (plugin_dir / f"relative_{tag}.py").write_text(f"from .scores_{tag} import score\n")
    (plugin_dir / f"absolute_{tag}.py").write_text(
        f"def late():\n    from trinity.plugins.scores_{tag} import score\n    return score\n"
    )
    load_plugins(str(plugin_dir))
    scores = sys.modules[f"trinity.plugins.scores_{tag}"]
    assert sys.modules[f"trinity.plugins.relative_{tag}"].score is scores.score
    assert sys.modules[f"trinity.plugins.absolute_{tag}"].late() is scores.score


def test_a_plugin_imported_by_plain_name_first_is_not_executed_again(plugin_dir):
    """pytest's ``from my_workflow import MyWorkflow`` in a plugin's own test, then a run in
    the same process loads the directory: one module, one registration."""
    tag = uuid.uuid4().hex[:8]
    module, name = _workflow_plugin(plugin_dir, tag)
    sys.path.insert(0, str(plugin_dir))  # what pytest does for a test beside the plugin
    try:
        plain = importlib.import_module(module)
        load_plugins(str(plugin_dir))  # no DuplicateModuleError
        assert sys.modules[f"trinity.plugins.{module}"] is plain
        assert WORKFLOWS.get(name) is plain.MyWorkflow
    finally:
        WORKFLOWS.unregister(name)


def test_a_fresh_process_unpickles_a_plugin_class_from_the_variable(plugin_dir):
    """What a Ray worker does: import ``trinity.plugins.<name>`` before any load_plugins."""
    tag = uuid.uuid4().hex[:8]
    module, name = _workflow_plugin(plugin_dir, tag)
    try:
        load_plugins(str(plugin_dir))
        blob = pickle.dumps(WORKFLOWS.get(name))
    finally:
        WORKFLOWS.unregister(name)
    code = textwrap.dedent(
        f"""
        import pickle, sys
        from trinity.common.workflows import WORKFLOWS
        cls = pickle.loads(sys.stdin.buffer.read())
        assert WORKFLOWS.get({name!r}) is cls, cls
        print(cls.__module__, cls(task=object(), model=object()).run())
        """
    )
    env = {**os.environ, PLUGIN_DIRS_ENV: str(plugin_dir)}
    out = subprocess.run(
        [sys.executable, "-c", code], input=blob, capture_output=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    assert out.stdout.decode().split() == [
        f"trinity.plugins.{module}",
        "['Hello",
        "world',",
        "'Hi']",
    ]


def test_a_plugin_named_like_an_installed_module_is_refused(plugin_dir):
    # a standard module that importing it would have side effects for, so nobody has
    name = next((m for m in ("antigravity", "this", "tabnanny") if m not in sys.modules), None)
    if name is None:
        pytest.skip("every candidate standard module is imported already")
    (plugin_dir / f"{name}.py").write_text("X = 1\n")
    with pytest.raises(PluginLoadError, match="same name as the installed module"):
        load_plugins(str(plugin_dir))
    assert name not in sys.modules


def test_the_guides_trinity_plugins_folder_of_a_plugin_directory(plugin_dir):
    tag = uuid.uuid4().hex[:8]
    inner = plugin_dir / "trinity" / "plugins"
    inner.mkdir(parents=True)
    (inner / f"guide_{tag}.py").write_text("VALUE = 3\n")
    try:
        assert f"trinity.plugins.guide_{tag}" in load_plugins(str(plugin_dir))
        assert sys.modules[f"trinity.plugins.guide_{tag}"].VALUE == 3
        assert f"guide_{tag}" not in sys.modules
    finally:
        sys.modules.pop(f"trinity.plugins.guide_{tag}", None)


@pytest.mark.slow
def test_a_ray_worker_receives_a_plugin_class_by_its_trinity_plugins_name(plugin_dir):
    """Trinity-RFT's ``test_passing_custom_class``: the worker never calls load_plugins."""
    ray = pytest.importorskip("ray")
    tag = uuid.uuid4().hex[:8]
    module, name = _workflow_plugin(plugin_dir, tag)
    load_plugins(str(plugin_dir))
    cls = WORKFLOWS.get(name)

    def run(workflow_cls):
        return workflow_cls.__module__, workflow_cls(task=object(), model=object()).run()

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # `run` by value
    ray.init(
        num_cpus=1,
        include_dashboard=False,
        runtime_env={"env_vars": {PLUGIN_DIRS_ENV: str(plugin_dir)}},
    )
    try:
        remote_module, result = ray.get(ray.remote(run).remote(cls), timeout=120)
    finally:
        ray.shutdown()
        WORKFLOWS.unregister(name)
    assert remote_module == f"trinity.plugins.{module}"
    assert result == ["Hello world", "Hi"]
