"""Fixtures shared by the buffer's tests that need Ray: a local cluster per test module, and a
look into a storage actor's process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory) -> Iterator[Any]:
    """A local Ray for one test module (2 CPUs, as on the CI machines), its files in a
    temporary directory; yields the ``ray`` module."""
    ray = pytest.importorskip("ray")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_pickles_this_module(local_ray, request) -> Iterator[Any]:
    """:func:`local_ray`, with the requesting test module's functions and classes pickled by
    value: Ray workers cannot import a test module, so what it defines and sends them (remote
    functions, actor classes) travels whole."""
    local_ray.cloudpickle.register_pickle_by_value(request.module)
    yield local_ray


def _torch_loaded(actor: Any) -> bool:
    """Whether the actor's process has torch's library mapped (read from /proc)."""
    import ray

    pid = ray._private.state.actors(actor._actor_id.hex())["Pid"]
    with open(f"/proc/{pid}/maps") as maps:
        return any("libtorch" in line for line in maps)


@pytest.fixture
def torch_loaded() -> Callable[[Any], bool]:
    """``torch_loaded(actor)``: whether a storage actor's process imported torch (Linux)."""
    return _torch_loaded
