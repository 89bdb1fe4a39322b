"""Run coroutines from synchronous code, whether or not an event loop is already running.

Sync twins of async APIs (``model.chat`` vs ``model.chat_async``, ``Workflow.run`` vs
``run_async``) are called both from plain scripts and from code already inside an event loop (a
runner actor, a notebook). They all go through :func:`run_sync`, which runs the coroutine on one
long-lived background loop.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Coroutine
from typing import Any, Optional, TypeVar

__all__ = ["run_sync"]

T = TypeVar("T")


class _BackgroundLoop:
    """One event loop in a daemon thread that runs the coroutines of sync twins.

    Why a shared background loop instead of ``asyncio.run`` per call: ``asyncio.run`` fails
    when the caller already runs a loop (a workflow called from async code), and a fresh
    loop per call breaks engines that keep loop-bound resources (an ``httpx.AsyncClient``,
    an ``asyncio.Lock``). Running every sync call on the same long-lived loop works in both
    situations.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._pid: Optional[int] = None

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            alive = self._thread is not None and self._thread.is_alive()
            if self._loop is None or self._pid != os.getpid() or not alive:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=self._serve, args=(loop,), name="trinity-model-sync", daemon=True
                )
                thread.start()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
            return self._loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise RuntimeError(
                "A synchronous Trinity API (e.g. ModelWrapper.chat, Workflow.run) was called "
                "from inside a coroutine that itself runs on the sync bridge loop; this would "
                "deadlock. Await the *_async twin instead."
            )
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise


_SYNC_BRIDGE = _BackgroundLoop()


def run_sync(awaitable: Awaitable[T]) -> T:
    """Run ``awaitable`` to completion from synchronous code, with or without a running loop."""
    if asyncio.iscoroutine(awaitable):
        return _SYNC_BRIDGE.run(awaitable)

    async def _wrap() -> T:
        return await awaitable

    return _SYNC_BRIDGE.run(_wrap())
