"""Fixtures shared by the launcher's tests: a Ray cluster per test module and a model-free
engine actor."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

# the tests import small helper modules of this directory (cli_process)
sys.path.insert(0, str(Path(__file__).parent))

# Ray 2.60 turns token auth on the first time a process starts a local cluster with
# RAY_AUTH_MODE unset, and that choice sticks in the process's cached RayConfig: a later
# connection from the same pytest process to a cluster started without a token (the two-node
# test's ``ray start``) is refused with "InvalidAuthToken". The tests' clusters are local and
# short-lived, so they all run without token auth; an explicit setting from outside wins.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(autouse=True)
def _keep_main_module():
    """Streamlit's ``AppTest`` (test_studio, test_view_cli) runs a page as ``__main__`` and
    leaves it there; a later test in the same worker that spawns a process (vLLM's engine core)
    would have the child run that page instead. Each test gets the real one back."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


@pytest.fixture(scope="module")
def ray_cluster(request, tmp_path_factory):
    """A local Ray for one test module (2 CPUs, as on the CI machines), its files in a
    temporary directory and its actors in a namespace of their own."""
    ray = pytest.importorskip("ray")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        namespace=f"{request.module.__name__.rpartition('.')[2]}-{uuid.uuid4().hex[:8]}",
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
        log_to_driver=False,
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def engine(ray_cluster):
    """A ``FakeEngine`` actor: scripted replies, no model, milliseconds per call."""
    import ray

    from trinity.launcher.engines import EngineSettings, create_engine_actor

    handle = create_engine_actor(
        EngineSettings(model_path="fake-model", engine_type="fake", extra_engine_args={})
    )
    ray.get(handle.ready.remote())
    return handle


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    """A tiny random Qwen2 and its tokenizer, built locally (no model hub), one per module."""
    from trinity.launcher.tiny_model import build_tiny_model

    path = tmp_path_factory.mktemp("tiny-qwen2")
    build_tiny_model(path)
    return str(path)


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op torch thread for in-process training: the tiny model gains nothing from
    more, and on 2 shared cores two OpenMP threads contend (measured: 0.7 s vs 7 ms for a
    forward/backward)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _merge(base: dict, over: dict) -> dict:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


@pytest.fixture
def arithmetic_tasks():
    """``write(tmp_path, n) -> Path``: the first ``n`` problems of the quickstart's arithmetic
    task file, as ``tmp_path/tasks.jsonl``."""
    from pathlib import Path

    source = (
        Path(__file__).resolve().parents[3] / "examples" / "data" / "arithmetic" / "train.jsonl"
    )

    def write(tmp_path, n: int):
        tasks = tmp_path / "tasks.jsonl"
        tasks.write_text("\n".join(source.read_text().splitlines()[:n]) + "\n")
        return tasks

    return write


@pytest.fixture
def both_config(model_path):
    """``build(tmp_path, name, tasks, **sections) -> dict``: the tests' mode-``both`` config --
    GRPO on an arithmetic task file with the transformers engine in a Ray actor and verl on CPU
    -- with ``sections`` merged in (nested dicts key by key)."""

    def build(tmp_path, name: str, tasks, **sections) -> dict:
        config = {
            "mode": "both",
            "project": "both",
            "name": name,
            "checkpoint_root_dir": str(tmp_path / "ckpt"),
            "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 1e-3}},
            "model": {"model_path": model_path, "max_prompt_tokens": 32, "max_response_tokens": 4},
            "cluster": {"gpu_per_node": 0},
            "buffer": {
                "batch_size": 4,
                "total_epochs": 1,
                "explorer_input": {
                    "taskset": {
                        "name": "arithmetic",
                        "path": str(tasks),
                        "format": {"prompt_key": "question", "response_key": "answer"},
                        "default_workflow_type": "arithmetic_workflow",
                    }
                },
            },
            "explorer": {
                "runner_per_model": 4,
                "eval_on_startup": False,
                "rollout_model": {"engine_type": "transformers", "dtype": "float32", "seed": 1},
            },
            "synchronizer": {"sync_method": "memory", "sync_interval": 1},
            "trainer": {"save_interval": 2},
        }
        return _merge(config, sections)

    return build


@pytest.fixture
def run_cli():
    """``run(config_path, *args, timeout=600)``: ``trinity run --config PATH`` in a subprocess
    with a short Ray session directory (Ray's socket paths must stay short) and one OpenMP
    thread; returns the ``CompletedProcess`` (output captured as text)."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    def run(path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        ray_tmp = tempfile.mkdtemp(prefix="tr-ray-")
        env = dict(os.environ, TRINITY_RAY_TMPDIR=ray_tmp, OMP_NUM_THREADS="1")
        env.pop("RAY_ADDRESS", None)
        try:
            return subprocess.run(
                [sys.executable, "-m", "trinity.launcher.cli", "run", "--config", str(path), *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
            )
        finally:
            shutil.rmtree(ray_tmp, ignore_errors=True)

    return run
