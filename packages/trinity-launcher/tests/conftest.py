"""Fixtures shared by the launcher's tests: a Ray cluster per test module and a model-free
engine actor."""

from __future__ import annotations

import uuid

import pytest


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
