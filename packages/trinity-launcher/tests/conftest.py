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
