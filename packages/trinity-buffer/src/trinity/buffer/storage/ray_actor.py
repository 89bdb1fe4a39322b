"""Storages served by a named Ray actor: the choice, the naming and the life cycle, shared by the
queue actor (:mod:`trinity.buffer.storage.ray_queue`) and the SQL actor
(:mod:`trinity.buffer.storage.sql_actor`).

* :func:`use_ray_actor` decides, for a reader or writer built from a storage config, between the
  storage's named actor and this process (``wrap_in_ray``, Trinity-RFT's field, read here).
* :func:`named_actor` creates or finds the actor: named after the storage, in the storage's
  ``ray_namespace`` (default: the caller's namespace), created with ``get_if_exists`` so that
  processes that never passed each other a handle meet, and detached so that it outlives the
  task or actor that happened to create it. It takes no CPU (it only moves bytes and waits),
  and Ray keeps no event record of its calls (its GCS would keep up to 100,000 of them).
* :func:`kill_named_actor` ends one (a detached actor is ended by nothing else).

Ray is imported where an actor is used, never by importing this module: a run without Ray (or
a storage with ``wrap_in_ray: false``) does not pay for it.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

__all__ = ["use_ray_actor", "actor_namespace", "named_actor", "kill_named_actor"]


def use_ray_actor(config: Any, use_ray: Optional[bool] = None) -> bool:
    """Whether the storage of ``config`` is served by its named Ray actor: when asked
    (``use_ray``), else when Ray is initialized in this process and the config allows it
    (``wrap_in_ray``, True by default, as in Trinity-RFT)."""
    if use_ray is not None:
        return use_ray
    if not getattr(config, "wrap_in_ray", True):
        return False
    # Ray cannot be initialized in a process that never imported it: no import just to ask
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def actor_namespace(storage_config: Any) -> str:
    """The Ray namespace of a storage's actor: its ``ray_namespace``, else the caller's."""
    import ray

    return getattr(storage_config, "ray_namespace", None) or ray.get_runtime_context().namespace


def named_actor(
    cls: type, name: str, storage_config: Any, *args: Any, max_concurrency: int = 1
) -> Any:
    """The handle of the detached actor ``name`` running ``cls(*args)`` in the namespace of
    ``storage_config``: the one that exists, else a new one. ``max_concurrency`` above 1 makes
    it a threaded actor (a call that waits does not hold up the others)."""
    import ray

    return (
        ray.remote(cls)
        .options(
            name=name,
            namespace=actor_namespace(storage_config),
            get_if_exists=True,
            lifetime="detached",
            max_concurrency=max_concurrency,
            num_cpus=0,
            # Ray's GCS would keep an event record of every call (up to 100,000; a run's queue
            # calls grew it ~130 MB per 1,000 steps: benchmarks/soak.py)
            enable_task_events=False,
        )
        .remote(*args)
    )


def kill_named_actor(name: str, storage_config: Any) -> bool:
    """Kill the actor ``name`` in the namespace of ``storage_config``; returns whether one
    existed."""
    import ray

    try:
        actor = ray.get_actor(name, namespace=actor_namespace(storage_config))
    except ValueError:
        return False
    ray.kill(actor)
    return True
