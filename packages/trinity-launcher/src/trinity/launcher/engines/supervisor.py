"""Rollout engines that die are replaced, with the weights they last served.

An engine can die two ways: its Ray actor's process goes (a crash, ``kill -9``, the OOM
killer: every call raises ``RayActorError`` / ``ActorDiedError`` / ``ActorUnavailableError``),
or the actor lives on while its backend is gone (vLLM's ``EngineCore`` process dies: every
call raises ``EngineDeadError``, forever). Either way the actor is useless, so the
:class:`EngineSupervisor` (in the explorer's process) kills it and starts a fresh actor with
the same settings -- one recovery path for both, and no reliance on a half-dead actor to
notice its own state -- then loads the **latest synchronised weights** into it (the Ray
object ref of the last state dict pushed, or the path of the last checkpoint loaded, or for
NCCL a state dict the synchronizer provides on demand) under their model version, so the new
engine serves exactly what the old one did.

Who notices: a workflow runner whose task failed asks its engine :meth:`check_health`; a dead
engine makes the runner report ``engine_dead`` and the :class:`~trinity.launcher.runner.RunnerPool`
asks :meth:`EngineSupervisor.restart`, rebinds that engine's runners to the new handle and runs
the tasks again without charging them a retry. A weight push that meets a dead engine restarts
it the same way (:meth:`EngineSupervisor.update_weights`).

Restarts are bounded: the ``explorer.max_engine_restarts + 1``-th death of one engine within
``explorer.engine_restart_window`` seconds raises :class:`EngineRestartError`, which names the
engine and carries the last lines of its log, and the run stops.
"""

from __future__ import annotations

import asyncio
import glob
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from trinity.utils.log import get_logger

__all__ = ["EngineRestartError", "EngineSupervisor", "is_engine_death"]

logger = get_logger(__name__)

#: exception class names that mean "this engine is gone" (matched along the MRO and the
#: cause chain, so a ``RayTaskError`` that wraps vLLM's error counts without importing vLLM)
_DEATH_NAMES = frozenset(
    {"RayActorError", "ActorDiedError", "ActorUnavailableError", "EngineDeadError"}
)
#: seconds a health check may take before the engine is taken to be busy (not dead)
HEALTH_TIMEOUT = 30.0
#: seconds a replacement engine may take to load its model
START_TIMEOUT = 1800.0
#: lines of an engine's log quoted when the restart bound stops the run
LOG_TAIL_LINES = 20


def is_engine_death(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the engine is gone."""
    seen: set[int] = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(cls.__name__ in _DEATH_NAMES for cls in type(current).__mro__):
            return True
        if type(current).__name__ == "RayTaskError" and "EngineDeadError" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


async def engine_death(handle: Any, timeout: float = HEALTH_TIMEOUT) -> Optional[str]:
    """Why the engine behind ``handle`` is dead, or ``None`` when it passes a health check
    (or is too busy to answer within ``timeout``: a hang is ``max_timeout``'s business)."""
    from trinity.launcher.engines.wrapper import call_engine

    try:
        await asyncio.wait_for(call_engine(handle, "check_health"), timeout)
    except asyncio.TimeoutError:
        return None
    except Exception as exc:
        if is_engine_death(exc):
            return f"{type(exc).__name__}: {str(exc).strip()[:500]}"
        raise
    return None


class EngineRestartError(RuntimeError):
    """An engine died more often than ``explorer.max_engine_restarts`` allows."""


@dataclass
class LatestWeights:
    """The weights the engines serve now, as the supervisor can hand them to a new engine."""

    version: int
    #: a Ray object ref of a state dict (``sync_method: memory``)
    state: Any = None
    #: a safetensors file or HF directory (``checkpoint``; ``bench``)
    path: Optional[str] = None
    #: ``async () -> state dict or object ref`` (``nccl``: the trainer's weights on demand)
    provider: Optional[Callable[[], Awaitable[Any]]] = None


@dataclass
class _Engine:
    handle: Any
    settings: Any = None
    pid: Optional[int] = None
    owned: bool = False
    deaths: deque = field(default_factory=deque)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class EngineSupervisor:
    """Watches the rollout engines of one explorer and replaces those that die.

    Args:
        handles: the engine actors, in engine-id order (the list is updated in place when an
            engine is replaced, so whoever shares it -- the explorer, the synchronizer --
            sees the new handle).
        owned: which of them the explorer started (it kills those at shutdown; replacements
            are always owned).
        max_restarts: ``explorer.max_engine_restarts``.
        window: ``explorer.engine_restart_window`` seconds.
        env_vars: environment of replacement actors (as the originals got).
        engine_options: Ray actor options of each engine (its placement-group bundle,
            :meth:`~trinity.launcher.placement.Placement.engine_options`): a replacement
            gets its predecessor's, so it lands in the same bundle.
    """

    def __init__(
        self,
        handles: list[Any],
        *,
        owned: Optional[Sequence[bool]] = None,
        max_restarts: int = 3,
        window: float = 600.0,
        env_vars: Optional[dict[str, str]] = None,
        engine_options: Optional[Sequence[Optional[dict[str, Any]]]] = None,
    ) -> None:
        if max_restarts < 0:
            raise ValueError(f"explorer.max_engine_restarts must be >= 0, got {max_restarts}")
        if window <= 0:
            raise ValueError(f"explorer.engine_restart_window must be > 0, got {window}")
        self.handles = handles
        owned = list(owned) if owned is not None else [False] * len(handles)
        self.engines = [_Engine(h, owned=o) for h, o in zip(handles, owned, strict=True)]
        self.max_restarts = int(max_restarts)
        self.window = float(window)
        self.env_vars = dict(env_vars or {})
        self.engine_options = list(engine_options or [None] * len(handles))
        self.latest: Optional[LatestWeights] = None
        #: the sleep level the engines are at (mode colocate), ``None`` when awake: a
        #: replacement is put to the same state
        self.asleep: Optional[int] = None
        self.total_restarts = 0
        self._unreported = 0

    async def start(self) -> None:
        """Learn each engine's settings and process (call once the engines are ready)."""
        from trinity.launcher.engines.wrapper import call_engine

        for engine in self.engines:
            engine.settings = await call_engine(engine.handle, "get_settings")
            engine.pid = await self._pid(engine.handle)

    @staticmethod
    async def _pid(handle: Any) -> Optional[int]:
        from trinity.launcher.engines.wrapper import call_engine

        try:
            return int((await call_engine(handle, "pids"))["pid"])
        except Exception as exc:  # an engine without the method: no log tail, nothing else
            logger.debug("engine pids: %s", exc)
            return None

    def owned_handles(self) -> list[Any]:
        return [e.handle for e in self.engines if e.owned]

    def take_unreported(self) -> int:
        """Restarts since the last call (for the step's ``rollout/engine_restarts``)."""
        n, self._unreported = self._unreported, 0
        return n

    # ------------------------------------------------------------------ weights
    def record(
        self,
        version: int,
        *,
        state: Any = None,
        path: Optional[str] = None,
        provider: Optional[Callable[[], Awaitable[Any]]] = None,
    ) -> None:
        """Remember the weights just given to the engines (one of ``state``/``path``/``provider``)."""
        if sum(x is not None for x in (state, path, provider)) != 1:
            raise ValueError("record needs exactly one of state=, path= or provider=")
        self.latest = LatestWeights(int(version), state=state, path=path, provider=provider)

    async def update_weights(
        self, version: int, *, state: Any = None, path: Optional[str] = None
    ) -> None:
        """Load weights into every engine and record them; an engine found dead on the way is
        replaced (and the replacement loads these weights)."""
        self.record(version, state=state, path=path)
        # until a push succeeds (see _each_one): a replacement started before this push may
        # hold older weights, so the push goes to it too
        kwargs = {"state_dict": state} if state is not None else {"path": path}
        await self._each("update_weights", version=version, **kwargs)

    # ------------------------------------------------------------------ sleep (colocate)
    async def sleep(self, level: int) -> None:
        """Put every engine to sleep (:meth:`BaseRolloutEngine.sleep`); a dead one is
        replaced, and the replacement is put to sleep too."""
        self.asleep = int(level)
        await self._each("sleep", level)

    async def wake_up(self) -> None:
        """Wake every engine (a dead one is replaced, and a replacement starts awake)."""
        self.asleep = None
        await self._each("wake_up")

    async def take_call_logs(self) -> list[list[tuple[str, int]]]:
        """Each engine's calls since the last time (``BaseRolloutEngine.take_call_log``)."""
        return await self._each("take_call_log")

    async def _each(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return await asyncio.gather(
            *(self._each_one(i, method, *args, **kwargs) for i in range(len(self.engines)))
        )

    async def _each_one(self, index: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """``method`` on engine ``index``; an engine found dead is replaced and the call goes
        to the replacement (the restart bound ends the loop)."""
        while True:
            handle = self.engines[index].handle
            try:
                return await getattr(handle, method).remote(*args, **kwargs)
            except Exception as exc:
                if not is_engine_death(exc):
                    raise
                await self.restart(index, handle, f"{type(exc).__name__}: {exc}")

    async def _load_latest(self, handle: Any) -> None:
        latest = self.latest
        if latest is None:  # nothing synchronised yet: the model as loaded is version 0
            return
        if latest.path is not None:
            await handle.update_weights.remote(path=latest.path, version=latest.version)
            return
        state = latest.state if latest.provider is None else await latest.provider()
        await handle.update_weights.remote(state_dict=state, version=latest.version)

    # ------------------------------------------------------------------ restarts
    async def restart(self, index: int, dead: Any, reason: str) -> Any:
        """Replace engine ``index`` (whose handle was ``dead``) and return the new handle.

        If it was replaced already (another caller saw the same death), the current handle
        is returned. Raises :class:`EngineRestartError` past the restart bound.
        """
        engine = self.engines[index]
        async with engine.lock:
            if engine.handle is not dead:
                return engine.handle
            now = time.monotonic()
            while engine.deaths and now - engine.deaths[0] > self.window:
                engine.deaths.popleft()
            if len(engine.deaths) >= self.max_restarts:
                raise EngineRestartError(self._bound_message(index, reason))
            engine.deaths.append(now)
            logger.warning(
                "Rollout engine %s died (%s); restarting it (%d of %d allowed within %gs)",
                self._name(index),
                reason,
                len(engine.deaths),
                self.max_restarts,
                self.window,
            )
            began = time.monotonic()
            await _stop(dead)
            handle = self._create(engine.settings, index)
            try:
                await asyncio.wait_for(_await(handle.ready.remote()), START_TIMEOUT)
                await self._load_latest(handle)
                if self.asleep is not None:  # colocate: the others sleep, so does it
                    await handle.sleep.remote(self.asleep)
            except BaseException:
                await _stop(handle)
                raise
            engine.handle = handle
            engine.owned = True
            engine.pid = await self._pid(handle)
            self.handles[index] = handle
            self.total_restarts += 1
            self._unreported += 1
            version = self.latest.version if self.latest is not None else 0
            logger.warning(
                "Rollout engine %s restarted in %.1fs, serving model version %d",
                self._name(index),
                time.monotonic() - began,
                version,
            )
            return handle

    def _create(self, settings: Any, index: int) -> Any:
        from trinity.launcher.engines import _actor_resources, create_engine_actor

        cpus, gpus = _actor_resources(settings)
        options = self.engine_options[index] if index < len(self.engine_options) else None
        return create_engine_actor(
            settings, num_cpus=cpus, num_gpus=gpus, env_vars=self.env_vars, options=options
        )

    def _name(self, index: int) -> str:
        s = self.engines[index].settings
        if s is None:
            return str(index)
        return f"{s.engine_id} ({s.engine_type}, model {s.model_path})"

    def _bound_message(self, index: int, reason: str) -> str:
        engine = self.engines[index]
        source, lines = log_tail(engine.pid)
        deaths = len(engine.deaths) + 1
        text = (
            f"rollout engine {self._name(index)} died {deaths} time{'s' if deaths > 1 else ''} "
            f"within "
            f"{self.window:g}s, more than explorer.max_engine_restarts ({self.max_restarts}) "
            f"allows (explorer.engine_restart_window: {self.window:g}); stopping the run. "
            f"Last error: {reason}"
        )
        if lines:
            text += f"\nLast {len(lines)} lines of its log ({source}):\n" + "\n".join(lines)
        else:
            text += f"\n(no log of the engine's process found: {source})"
        return text


def log_tail(pid: Optional[int], lines: int = LOG_TAIL_LINES) -> tuple[str, list[str]]:
    """``(file, last lines)`` of the Ray worker log of process ``pid`` on this node (stderr,
    where Python logging and tracebacks go, else stdout)."""
    if pid is None:
        return "the engine's process id is unknown", []
    try:
        import ray._private.worker as ray_worker

        logs = ray_worker._global_node.get_logs_dir_path()
    except Exception as exc:
        return f"Ray's log directory is unknown ({exc})", []
    for suffix in ("err", "out"):
        for path in sorted(glob.glob(os.path.join(logs, f"worker-*-{pid}.{suffix}"))):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = [line.rstrip("\n") for line in f.readlines()[-lines:]]
            except OSError:
                continue
            if any(line.strip() for line in text):
                return path, text
    return f"no worker log of pid {pid} under {logs} (another node?)", []


async def _await(ref: Any) -> Any:
    return await ref


async def _stop(handle: Any) -> None:
    """Release what a dead engine still holds (its backend, if the actor lives), then kill
    the actor so Ray does not restart it."""
    import ray

    try:
        await asyncio.wait_for(_await(handle.shutdown.remote()), 10)
    except Exception as exc:  # the actor is gone, or its backend hangs
        logger.debug("dead engine shutdown: %s", exc)
    try:
        ray.kill(handle, no_restart=True)
    except Exception as exc:
        logger.debug("dead engine kill: %s", exc)
