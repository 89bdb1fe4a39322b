"""Every built-in is advertised through entry points and resolves with only this package.

The per-package test environment holds trinity-core and trinity-workflows alone, so these
tests show that ``default_workflow_type: math_workflow`` works for a user who installed just
``trinity-workflows`` and imported nothing by hand.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.common.workflows import WORKFLOWS, Workflow

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
DECLARED = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"]
WORKFLOW_EPS = DECLARED["trinity.workflows"]
REWARD_EPS = DECLARED["trinity.reward_functions"]


def test_installed_metadata_matches_the_pyproject():
    """The environment was built from this pyproject (stale metadata would hide new names)."""
    installed = {ep.name: ep.value for ep in metadata.entry_points(group="trinity.workflows")}
    assert {k: installed.get(k) for k in WORKFLOW_EPS} == WORKFLOW_EPS
    installed = {
        ep.name: ep.value for ep in metadata.entry_points(group="trinity.reward_functions")
    }
    assert {k: installed.get(k) for k in REWARD_EPS} == REWARD_EPS


@pytest.mark.parametrize(("name", "target"), sorted(WORKFLOW_EPS.items()))
def test_every_workflow_entry_point_loads_under_its_own_name(name, target):
    cls = WORKFLOWS.get(name)
    assert issubclass(cls, Workflow)
    assert f"{cls.__module__}:{cls.__qualname__}" == target
    # the guides' import path resolves the class name too
    import trinity.common.workflows as guide_path

    assert getattr(guide_path, cls.__name__) is cls


@pytest.mark.parametrize(("name", "target"), sorted(REWARD_EPS.items()))
def test_every_reward_entry_point_loads_under_its_own_name(name, target):
    cls = REWARD_FUNCTIONS.get(name)
    assert issubclass(cls, RewardFn)
    assert f"{cls.__module__}:{cls.__qualname__}" == target
    import trinity.common.rewards as guide_path

    assert getattr(guide_path, cls.__name__) is cls


def test_a_fresh_interpreter_resolves_names_without_importing_anything():
    code = (
        "from trinity.common.workflows import WORKFLOWS, Task\n"
        "from trinity.common.models.testing import FakeModelWrapper\n"
        "from trinity.common.workflows import run_task\n"
        "t = Task(workflow='math_workflow', raw_task={'prompt': '1+1?', 'response': '2'})\n"
        "print(run_task(t, FakeModelWrapper('<think>a</think><answer>2</answer>'))[0].reward)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1.1"


def test_importing_the_package_imports_no_environment():
    code = (
        "import sys, trinity.workflows, trinity.workflows.envs\n"
        "heavy = [m for m in ('gymnasium', 'math_verify') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
