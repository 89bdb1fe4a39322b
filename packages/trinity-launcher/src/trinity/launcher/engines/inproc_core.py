"""vLLM's engine core on a thread of the engine actor, for ``AsyncLLM`` on CPU.

``AsyncLLM`` always runs its ``EngineCore`` in a second process and talks to it over ZMQ
(msgpack both ways). On a small CPU box that process is pure cost: it imports torch and vLLM
again at start-up (~5 s of CPU on the way to the first step, beside the actor's own imports),
and every engine step's outputs are encoded in one process and decoded in the other. vLLM's
``InprocClient`` (what ``LLMEngine`` uses when ``VLLM_ENABLE_V1_MULTIPROCESSING=0``) builds the
same ``EngineCore`` in the caller's process, but only for synchronous callers.

:func:`client_class`'s ``ThreadedInprocClient`` is that client with ``AsyncLLM``'s asynchronous
interface: the core runs on one daemon thread, the only thread that touches it. Requests, aborts and utility
calls (``collective_rpc`` for weight reloads, ``reset_prefix_cache``, ...) are queued to that
thread and run between engine steps, in order; step outputs come back to the event loop
through an ``asyncio.Queue``. The scheduler and model are vLLM's own, so seeded requests draw
the same samples as in the two-process layout.

If a step raises, the engine is dead, as when vLLM's core process dies: the error reaches
every waiting request (``AsyncLLM``'s output handler propagates it), and later calls raise
``EngineDeadError``; the engine actor's supervisor restarts it like any dead engine.

Used on CPU inside an engine's Ray actor (``TRINITY_VLLM_INPROC_CORE``, default on there);
``=0`` restores vLLM's process.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import queue
import threading
from collections.abc import Iterator
from typing import Any, Callable, Optional

from trinity.utils.log import get_logger

__all__ = ["client_class", "enabled", "in_ray_actor", "installed"]

logger = get_logger(__name__)

ENV = "TRINITY_VLLM_INPROC_CORE"
_STOP = object()


def enabled() -> bool:
    """Whether an ``AsyncLLM`` built now should run its core on a thread: the default inside a
    Ray actor (a process of its own for the engine). Elsewhere vLLM keeps its engine-core
    process, which keeps what the core sets up process-wide (``torch.distributed``, vLLM's
    CPU thread settings) out of the caller's process."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off", ""):
        return False
    return in_ray_actor()


def in_ray_actor() -> bool:
    """Whether this code runs in a Ray actor's process."""
    try:
        import ray

        return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
    except Exception:  # noqa: BLE001 - no Ray, or no runtime context: not an actor
        return False


class _Resources:
    """What ``AsyncLLM`` reads of its client's background resources (``errored``)."""

    engine_dead = False


class _CoreThread:
    """The body of ``ThreadedInprocClient`` (:func:`client_class` puts it in front of vLLM's
    ``InprocClient``, whose ``engine_core`` and synchronous calls it drives): the core thread,
    and the ``*_async`` methods ``AsyncLLM`` calls (see the module docstring)."""

    def __init__(self, vllm_config: Any, executor_class: type, log_stats: bool, **_: Any):
        super().__init__(vllm_config, executor_class, log_stats)
        self.resources = _Resources()
        self.engine_ranks_managed = [0]
        self._loop = asyncio.get_running_loop()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._outputs: asyncio.Queue = asyncio.Queue()
        self._error: Optional[BaseException] = None
        #: posts held back by :meth:`held` (``None``: not held)
        self._held: Optional[list[tuple[Callable[..., Any], tuple]]] = None
        self._thread = threading.Thread(target=self._run, name="vllm-engine-core", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ the core thread
    def _run(self) -> None:
        core = self.engine_core
        try:
            while True:
                busy = core.scheduler.has_requests()
                try:
                    item = self._inbox.get(block=not busy)
                except queue.Empty:
                    item = None
                while item is not None:
                    if item is _STOP:
                        return
                    self._execute(*item)
                    try:
                        item = self._inbox.get_nowait()
                    except queue.Empty:
                        item = None
                if core.scheduler.has_requests():
                    outputs, executed = core.step_fn()
                    core.post_step(model_executed=executed)
                    out = outputs.get(0) if outputs else None
                    if out is not None and (out.outputs or out.finished_requests):
                        self._loop.call_soon_threadsafe(self._outputs.put_nowait, out)
        except BaseException as exc:  # the engine is dead: every waiter must hear it
            logger.error("vLLM engine core thread died: %r", exc)
            self._error = exc
            self.resources.engine_dead = True
            try:
                self._loop.call_soon_threadsafe(self._outputs.put_nowait, exc)
                self._fail_pending(exc)
            except RuntimeError:  # the event loop is closed: no one is waiting
                pass

    def _execute(self, fn: Callable[..., Any], args: tuple, future: Any) -> None:
        try:
            result = fn(*args)
        except Exception as exc:
            if future is None:
                raise  # a request the core refused: the engine is not in a known state
            self._loop.call_soon_threadsafe(_settle, future, None, exc)
        else:
            if future is not None:
                self._loop.call_soon_threadsafe(_settle, future, result, None)

    def _fail_pending(self, exc: BaseException) -> None:
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP and item[2] is not None:
                self._loop.call_soon_threadsafe(_settle, item[2], None, _dead(exc))

    # ------------------------------------------------------------ the event loop side
    def _check_alive(self) -> None:
        if self._error is not None or not self._thread.is_alive():
            raise _dead(self._error)

    def _post(self, fn: Callable[..., Any], *args: Any) -> None:
        self._check_alive()
        if self._held is not None:
            self._held.append((fn, args))
            return
        self._inbox.put((fn, args, None))

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Requests (and aborts) posted meanwhile reach the core thread as one item, in order,
        so the requests a runner's tasks send together start in the same engine step (posted
        one by one, the thread woke on the first and stepped while the others arrived)."""
        if self._held is not None:  # nested: the outer one sends them
            yield
            return
        self._held = []
        try:
            yield
        finally:
            items, self._held = self._held, None
            if items:
                self._inbox.put((_run_in_order, (items,), None))

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        self._check_alive()
        future = self._loop.create_future()
        self._inbox.put((fn, args, future))
        if self._error is not None:  # died between the check and the put: not run
            self._fail_pending(self._error)
        return await future

    async def get_output_async(self) -> Any:
        out = await self._outputs.get()
        if isinstance(out, BaseException):
            self._outputs.put_nowait(out)  # every later reader fails the same way
            raise _dead(out) from out
        return out

    async def add_request_async(self, request: Any) -> None:
        self._post(self.add_request, request)

    async def abort_requests_async(self, request_ids: list[str]) -> None:
        if request_ids:
            self._post(self.abort_requests, request_ids)

    async def collective_rpc_async(
        self,
        method: Any,
        timeout: Optional[float] = None,
        args: tuple = (),
        kwargs: Optional[dict[str, Any]] = None,
    ) -> Any:
        return await self._call(self.collective_rpc, method, timeout, args, kwargs)

    # vLLM's InprocClient lacks the scheduler's pause / resume (AsyncLLM's
    # pause_generation / resume_generation): the engine core has them, run on its thread
    def pause_scheduler(self, mode: str = "abort", clear_cache: bool = True) -> None:
        self.engine_core.pause_scheduler(mode=mode, clear_cache=clear_cache)

    def resume_scheduler(self) -> None:
        self.engine_core.resume_scheduler()

    def is_scheduler_paused(self) -> bool:
        return self.engine_core.is_scheduler_paused()

    async def pause_scheduler_async(self, mode: str = "abort", clear_cache: bool = True) -> None:
        await self._call(self.pause_scheduler, mode, clear_cache)

    async def resume_scheduler_async(self) -> None:
        await self._call(self.resume_scheduler)

    async def is_scheduler_paused_async(self) -> bool:
        return await self._call(self.is_scheduler_paused)

    def shutdown(self, timeout: Optional[float] = None) -> None:
        if self._thread.is_alive():
            self._inbox.put(_STOP)
            self._thread.join(timeout if timeout is not None else 30)
        super().shutdown()


@functools.cache
def client_class() -> type:
    """``ThreadedInprocClient`` (built on first use: vLLM is imported only where it runs)."""
    from vllm.v1.engine.core_client import EngineCoreClient, InprocClient

    cls = type("ThreadedInprocClient", (_CoreThread, InprocClient), {"__module__": __name__})
    # every other ``<utility>_async`` of vLLM's client interface is InprocClient's ``<utility>``
    # run on the core thread (reset_prefix_cache, sleep, wake_up, add_lora, profile, ...)
    for name in dir(EngineCoreClient):
        sync = getattr(InprocClient, name[: -len("_async")], None)
        if name.endswith("_async") and not hasattr(_CoreThread, name) and callable(sync):
            setattr(cls, name, _on_core_thread(sync))
    return cls


def _on_core_thread(sync: Callable[..., Any]) -> Callable[..., Any]:
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await self._call(lambda: sync(self, *args, **kwargs))

    call.__name__ = f"{sync.__name__}_async"
    return call


def _run_in_order(items: list[tuple[Callable[..., Any], tuple]]) -> None:
    for fn, args in items:
        fn(*args)


def _dead(cause: Optional[BaseException]) -> BaseException:
    """vLLM's ``EngineDeadError`` (what its clients raise once the core is gone)."""
    from vllm.v1.engine.exceptions import EngineDeadError

    exc = EngineDeadError()
    exc.__cause__ = cause
    return exc


def _settle(future: asyncio.Future, result: Any, exc: Optional[BaseException]) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """While active, ``AsyncLLM`` builds a ``ThreadedInprocClient`` (one engine, no data
    parallelism) instead of starting an engine-core process."""
    from vllm.v1.engine.core_client import EngineCoreClient

    cls = client_class()
    original = EngineCoreClient.__dict__["make_async_mp_client"]

    def make(vllm_config: Any, executor_class: type, log_stats: bool, **kwargs: Any) -> Any:
        if vllm_config.parallel_config.data_parallel_size > 1:
            return original.__func__(vllm_config, executor_class, log_stats, **kwargs)
        return cls(vllm_config, executor_class, log_stats)

    EngineCoreClient.make_async_mp_client = staticmethod(make)  # type: ignore[method-assign]
    try:
        yield
    finally:
        EngineCoreClient.make_async_mp_client = original  # type: ignore[method-assign]
