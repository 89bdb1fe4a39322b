"""``trinity-launch`` and a plugin author's own component names.

A workflow name used without the ``--plugin-dir`` that registers it is refused with the
closest built-in *and* what to pass; a plugin directory's test files are not imported by a run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from stand_in_model import small_config

BIN = Path(sys.executable).parent

WORKFLOW = textwrap.dedent(
    """
    from trinity.common.workflows import WORKFLOWS, Workflow

    @WORKFLOWS.register_module("my_workflow")
    class MyWorkflow(Workflow):
        def run(self):
            return []
    """
)

# what a contract test beside the plugin looks like to a run that imported it
TEST_FILE = "raise RuntimeError('the run imported a test file of the plugin directory')\n"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


@pytest.fixture
def config(tmp_path) -> Path:
    return small_config(tmp_path, workflow="my_workflow")  # a stand-in model: nothing loads it


@pytest.fixture
def plugins(tmp_path) -> Path:
    d = tmp_path / "my_plugins"
    d.mkdir()
    (d / "my_workflow.py").write_text(WORKFLOW)
    (d / "test_my_workflow.py").write_text(TEST_FILE)
    (d / "conftest.py").write_text(TEST_FILE)
    return d


def test_a_plugin_name_without_its_directory_says_what_to_pass(config):
    out = _run(str(BIN / "trinity-launch"), str(config), "--dry-run")
    assert out.returncode == 2, out.stdout
    assert "Traceback" not in out.stderr
    assert "buffer.explorer_input.taskset.default_workflow_type" in out.stderr
    assert "Unknown workflows name 'my_workflow'" in out.stderr
    assert "--plugin-dir DIR" in out.stderr and "TRINITY_PLUGIN_DIRS" in out.stderr
    assert "plugin directories loaded: none" in out.stderr


def test_the_plugin_directory_loads_without_its_test_files(config, plugins):
    out = _run(str(BIN / "trinity-launch"), str(config), "--dry-run", "--plugin-dir", str(plugins))
    assert out.returncode == 0, out.stderr
    assert "imported a test file" not in out.stderr


def test_a_wrong_directory_is_named_in_the_hint(config, tmp_path):
    other = tmp_path / "other_plugins"
    other.mkdir()
    (other / "helpers.py").write_text("X = 1\n")
    out = _run(str(BIN / "trinity-launch"), str(config), "--dry-run", "--plugin-dir", str(other))
    assert out.returncode == 2, out.stdout
    assert f"plugin directories loaded: {other.resolve()}" in out.stderr
