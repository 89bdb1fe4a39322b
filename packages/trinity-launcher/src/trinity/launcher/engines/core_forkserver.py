"""Start vLLM's engine-core process from a forkserver that imported vLLM while the actor did.

Inside a Ray actor vLLM must not fork (the actor process runs Ray's threads and gRPC), so it
spawns its ``EngineCore`` process, which then imports torch and vLLM again: ~5 s of a rollout
engine's start-up on a 2-core CPU, after the actor's own ~5 s import of the same modules.

A forkserver (:mod:`multiprocessing.forkserver`) is a fresh process, started by exec like a
spawn, that imports a preload list and then forks one child per request: children start with
vLLM imported, and they are forked from a process that has no Ray threads. :func:`start` launches
it when the actor is constructed, so its imports run beside the actor's own;
:func:`use_for_engine_core` makes vLLM's engine launcher take its processes from it.

Children inherit the forkserver's environment, not the actor's at fork time: environment
variables the engine core needs are set by :func:`start` (the engine passes them).
Importing vLLM sets a few more (``LD_LIBRARY_PATH``, ``TORCHINDUCTOR_COMPILE_THREADS``, ...) in
both processes alike; anything else the actor changed makes :func:`use_for_engine_core` refuse
(it returns ``False`` and vLLM spawns as before).
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Any, Optional

from trinity.launcher.engines.inproc_core import in_ray_actor
from trinity.utils.log import get_logger

__all__ = ["PRELOAD", "start", "use_for_engine_core"]

logger = get_logger(__name__)

#: Modules the forkserver imports before it forks engine cores (what a spawned core imports),
#: and the hook that makes every forked core die with the forkserver (``_core_child``).
PRELOAD = (
    "trinity.launcher.engines._core_child",
    "vllm.v1.engine.core",
    "vllm.v1.executor.uniproc_executor",
)

_STATE: dict[str, Any] = {"context": None, "environ": None}

#: Variables importing vLLM sets (the forkserver imports it too, so it has them as well).
_SET_BY_VLLM_IMPORT = frozenset(
    {
        "LD_LIBRARY_PATH",
        "PYTORCH_NVML_BASED_CUDA_CHECK",
        "TILELANG_CLEANUP_TEMP_FILES",
        "TORCHINDUCTOR_COMPILE_THREADS",
        "TRITON_CACHE_AUTOTUNING",
    }
)


def start(environment: Optional[dict[str, str]] = None) -> bool:
    """Launch the forkserver (once per process) with :data:`PRELOAD`, ``environment`` set
    first where unset (its children inherit it); returns whether it runs.

    Only inside a Ray actor (elsewhere vLLM forks or spawns by its own rules), and not with
    ``TRINITY_VLLM_SPAWN_CORE=1`` in the environment."""
    if _STATE["context"] is not None:
        return True
    if os.environ.get("TRINITY_VLLM_SPAWN_CORE") == "1":  # opt out: vLLM spawns as before
        return False
    if not in_ray_actor():
        return False
    for key, value in (environment or {}).items():
        os.environ.setdefault(key, value)
    try:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(PRELOAD))
        from multiprocessing import forkserver

        forkserver.ensure_running()
    except Exception as exc:  # noqa: BLE001 - vLLM spawns as before
        logger.debug("forkserver for the engine core not started: %r", exc)
        return False
    _STATE["context"] = context
    _STATE["environ"] = dict(os.environ)
    return True


def use_for_engine_core() -> bool:
    """Make vLLM's engine launcher (``vllm.v1.engine.utils``) take its processes from the
    forkserver. ``False`` (vLLM spawns) when none runs or the environment changed since."""
    context = _STATE["context"]
    if context is None:
        return False
    before = _STATE["environ"]
    changed = sorted(
        k
        for k in (set(os.environ) | set(before)) - _SET_BY_VLLM_IMPORT
        if os.environ.get(k) != before.get(k)
    )
    if changed:
        logger.info("engine core spawned, not forked: environment changed (%s)", changed)
        return False
    import vllm.v1.engine.utils as engine_utils

    engine_utils.get_mp_context = lambda: context
    return True
