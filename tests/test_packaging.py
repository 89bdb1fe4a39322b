"""The five distributions build, stay in their namespaces, and install on their own.

``pip install trinity-algorithms`` must work with no launcher, buffer or workflows present:
built wheels of trinity-core + trinity-algorithms go into a fresh virtual environment and are
imported there.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
NAMESPACES = {
    # trinity.testing is the contract test kit that trinity-core ships (docs/testing-plugins.md);
    # trinity.plugins is Trinity-RFT's package of user plugin modules (only its __init__.py)
    "trinity_core": ("trinity/common/", "trinity/utils/", "trinity/testing/", "trinity/plugins/"),
    "trinity_algorithms": ("trinity/algorithm/",),
    # trinity.data: Trinity-RFT's older operator and pipeline paths (aliases; docs/compat.md)
    "trinity_buffer": ("trinity/buffer/", "trinity/data/"),
    "trinity_workflows": ("trinity/workflows/",),
    # trinity.explorer, trinity.cli, trinity.trainer: Trinity-RFT's module paths of its explorer,
    # its typer command line and its trainer helpers (docs/compat.md)
    "trinity_launcher": (
        "trinity/launcher/",
        "trinity/manager/",
        "trinity/explorer/",
        "trinity/cli/",
        "trinity/trainer/",
    ),
}
SIBLINGS = {"trinity-core", "trinity-algorithms", "trinity-buffer", "trinity-workflows"}

pytestmark = pytest.mark.slow


def _uv() -> str:
    local = Path(sys.executable).with_name("uv")
    found = str(local) if local.exists() else shutil.which("uv")
    if not found:
        pytest.fail("uv is needed to build the workspace (it is in the root dev dependencies)")
    return found


def _find_links() -> list[str]:
    """Local wheel directories (the CPU torch build on CI machines), from the environment."""
    args = []
    for var in ("UV_FIND_LINKS", "PIP_FIND_LINKS"):
        for d in os.environ.get(var, "").split():
            if Path(d.removeprefix("file://")).is_dir():
                args += ["--find-links", d]
    return args


@pytest.fixture(scope="module")
def dist_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [_uv(), "build", "--all-packages", "--out-dir", str(out), "--quiet"],
        cwd=ROOT,
        check=True,
        timeout=600,
    )
    return out


def _wheels(dist_dir: Path) -> dict[str, Path]:
    return {w.name.split("-")[0]: w for w in dist_dir.glob("*.whl")}


def test_five_wheels_and_five_sdists(dist_dir):
    assert sorted(_wheels(dist_dir)) == sorted(NAMESPACES)
    sdists = sorted(p.name.split("-")[0] for p in dist_dir.glob("*.tar.gz"))
    assert sdists == sorted(NAMESPACES)
    for sdist in dist_dir.glob("*.tar.gz"):
        with tarfile.open(sdist) as tar:
            names = tar.getnames()
        assert any(n.endswith("/pyproject.toml") for n in names), sdist.name
        assert any("/src/trinity/" in n for n in names), sdist.name
        assert not any(n.endswith("src/trinity/__init__.py") for n in names), sdist.name


def test_each_wheel_ships_only_its_namespace_and_no_trinity_init(dist_dir):
    for dist, wheel in _wheels(dist_dir).items():
        with zipfile.ZipFile(wheel) as zf:
            modules = [n for n in zf.namelist() if not n.split("/")[0].endswith(".dist-info")]
        assert "trinity/__init__.py" not in modules, wheel.name
        assert modules, wheel.name
        outside = [n for n in modules if not n.startswith(NAMESPACES[dist])]
        assert not outside, f"{wheel.name} ships files outside its namespace: {outside}"


def test_wheels_depend_on_siblings_through_bounded_ranges(dist_dir):
    for dist, wheel in _wheels(dist_dir).items():
        with zipfile.ZipFile(wheel) as zf:
            meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            meta = email.message_from_bytes(zf.read(meta_name))
        assert meta["Version"] == "0.1.0"
        for raw in meta.get_all("Requires-Dist") or []:
            req = Requirement(raw)
            if req.name in SIBLINGS:
                assert req.specifier.contains("0.1.0"), (dist, raw)
                assert not req.specifier.contains("1.0.0"), (dist, raw)
                assert req.url is None, f"{dist} must not pin a path/URL: {raw}"
        if dist == "trinity_core":
            assert not any(
                Requirement(r).name in SIBLINGS for r in meta.get_all("Requires-Dist") or []
            ), "trinity-core depends on no sibling"


def _fresh_env(tmp_path: Path, wheels: list[Path]) -> tuple[str, dict[str, str]]:
    """A new virtual environment holding only ``wheels`` (and their PyPI dependencies)."""
    uv = _uv()
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
    # torch first, so a local CPU build of the locked release is taken when one is at hand.
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", python, *_find_links(), "torch==2.13.0"],
        check=True,
        timeout=900,
        env=env,
    )
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", python, *_find_links(), *map(str, wheels)],
        check=True,
        timeout=900,
        env=env,
    )
    return python, env


def test_core_and_algorithms_install_alone_into_a_fresh_environment(dist_dir, tmp_path):
    uv = _uv()
    wheels = _wheels(dist_dir)
    python, env = _fresh_env(tmp_path, [wheels["trinity_core"], wheels["trinity_algorithms"]])
    venv = tmp_path / "venv"
    code = (
        "import importlib.util, importlib.metadata as md\n"
        "import trinity.algorithm, trinity.common.experience, trinity.common.config\n"
        "from trinity.common.workflows import Task, Workflow, WORKFLOWS\n"
        "from trinity.utils.registry import Registry\n"
        "for gone in ('trinity.launcher', 'trinity.buffer', 'trinity.workflows'):\n"
        "    assert importlib.util.find_spec(gone) is None, gone\n"
        "dists = sorted(d.metadata['Name'] for d in md.distributions()\n"
        "               if d.metadata['Name'].startswith('trinity'))\n"
        "print(dists)\n"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['trinity-algorithms', 'trinity-core']"

    # Every registered component computes there: the package's own tests, run against the
    # installed wheels (verl, the parity reference, is deliberately absent).
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", python, "pytest"], check=True, env=env
    )
    tests = ROOT / "packages" / "trinity-algorithms" / "tests"
    run = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            str(tests),
            "-q",
            "-p",
            "no:cacheprovider",
            "--ignore-glob=*verl_parity*",
            "-x",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout
    where = subprocess.run(
        [python, "-c", "import trinity.algorithm as a; print(a.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    assert str(venv) in where, f"tests must exercise the installed wheel, not the source: {where}"


def test_workflows_install_alone_and_serve_names_from_yaml(dist_dir, tmp_path):
    """``pip install trinity-workflows``: built-ins resolve by name with nothing imported."""
    wheels = _wheels(dist_dir)
    python, env = _fresh_env(tmp_path, [wheels["trinity_core"], wheels["trinity_workflows"]])
    code = (
        "import importlib.util\n"
        "from trinity.common.workflows import Task, run_task, MathWorkflow, WORKFLOWS\n"
        "from trinity.common.models.testing import FakeModelWrapper\n"
        "for gone in ('trinity.launcher', 'trinity.buffer', 'trinity.algorithm'):\n"
        "    assert importlib.util.find_spec(gone) is None, gone\n"
        "task = Task(workflow='math_workflow', raw_task={'prompt': '1/2?', 'response': '0.5'})\n"
        "exp, = run_task(task, FakeModelWrapper('<think>a</think><answer>\\\\frac12</answer>'))\n"
        "print(exp.reward, MathWorkflow.__module__, 'frozen_lake_workflow' in WORKFLOWS.list())\n"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1.1", "trinity.workflows.single_turn", "True"]
