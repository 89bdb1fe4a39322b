"""A runner's concurrent ``draw_chat`` calls as one engine call, its requests in one engine step.

A workflow runner runs several tasks at once (``explorer.tasks_per_runner``), and each asks the
engine for its samples when it starts, so the calls of one wave arrive together. Sent one Ray
call each, they reached the engine's event loop one after another while the engine core was
already stepping on the first ones: the quickstart's 16 requests of a step were spread over 4-5
engine steps where vLLM alone takes 2. Here the calls a runner's event loop makes in the same
turn are sent as one :meth:`~trinity.launcher.engines.base.BaseRolloutEngine.draw_chat_many`
call (:class:`DrawBatcher`), and the engine submits their requests together
(:func:`draw_together`; vLLM's in-process core takes them in one step: ``inproc_core``'s
``held``).

Each call keeps its own outcome: one that raises fails only its task (:func:`portable_error`
carries the exception back with the engine's traceback as a note), and one whose task is
cancelled (a task past ``explorer.max_timeout``: Ray cancels its ``run_task``) cancels its
request on the engine (:meth:`~trinity.launcher.engines.base.BaseRolloutEngine.cancel_draws`)
while the others go on. The batch's own Ray call is made outside every task's context, so
Ray's recursive cancellation of one task's calls does not reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import pickle
import traceback
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, Callable, ContextManager, Optional

__all__ = ["DrawBatcher", "DrawRegistry", "draw_together", "portable_error"]

#: keys whose cancel reached the engine before their call did (kept a while, then forgotten)
EARLY_CANCELS_KEPT = 4096


class DrawRegistry:
    """The engine's side: the draws of :func:`draw_together` calls still running, by key."""

    def __init__(self) -> None:
        self.running: dict[str, asyncio.Future] = {}
        #: an ordered set (the oldest forgotten first past :data:`EARLY_CANCELS_KEPT`)
        self._cancelled_early: OrderedDict[str, None] = OrderedDict()

    def cancel(self, keys: Sequence[str]) -> None:
        for key in keys:
            task = self.running.get(key)
            if task is not None:
                task.cancel()
            else:  # its call has not started yet: cancelled as soon as it does
                self._cancelled_early[key] = None
                if len(self._cancelled_early) > EARLY_CANCELS_KEPT:
                    self._cancelled_early.popitem(last=False)

    def take_early_cancel(self, key: str) -> bool:
        """Whether ``key``'s cancel came before its call (forgotten once asked)."""
        if key not in self._cancelled_early:
            return False
        del self._cancelled_early[key]
        return True


async def draw_together(
    registry: DrawRegistry,
    calls: Sequence[tuple[str, Any, dict[str, Any]]],
    draw: Callable[..., Awaitable[Any]],
    together: Callable[[], ContextManager[Any]],
) -> AsyncIterator[list[tuple[int, Any]]]:
    """``draw(messages, **kwargs)`` for each ``(key, messages, kwargs)`` of ``calls``, all
    submitted before any is waited on; yields ``[(index, result or exception), ...]`` as they
    finish, those that finish in the same turn together (a request never waits for a longer
    one of its batch: a multi-turn workflow's next turn starts as soon as its answer is in).

    ``together()`` is held while the draws run up to their first wait (each submits its
    request there), so an engine that can (vLLM's in-process core) takes them in one step."""
    index: dict[asyncio.Future, int] = {}
    try:
        for i, (key, messages, kwargs) in enumerate(calls):
            task = asyncio.ensure_future(draw(messages, **dict(kwargs)))
            registry.running[key] = task
            index[task] = i
            if registry.take_early_cancel(key):
                task.cancel()
        with together():
            await asyncio.sleep(0)  # each draw runs up to its request's submission
        while index:
            await asyncio.wait(index, return_when=asyncio.FIRST_COMPLETED)
            done = [task for task in index if task.done()]
            yield [(index.pop(task), _outcome(task)) for task in done]
    finally:
        for task in index:  # the caller went away (the batch's call was cancelled)
            task.cancel()
        for key, _, _ in calls:
            registry.running.pop(key, None)


def _outcome(task: asyncio.Future) -> Any:
    if task.cancelled():
        return asyncio.CancelledError()
    exc = task.exception()
    return portable_error(exc) if exc is not None else task.result()


def portable_error(exc: BaseException) -> BaseException:
    """``exc`` as it can travel back in a list of results: the exception itself when it
    pickles, else a ``RuntimeError`` naming it; with the engine's traceback as a note (a
    task's error shows where in the engine it was raised, as Ray's own errors do)."""
    if isinstance(exc, asyncio.CancelledError):
        return exc
    where = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        pickle.loads(pickle.dumps(exc))
        out = exc
    except Exception:  # noqa: BLE001 - any exception that cannot travel is named instead
        out = RuntimeError(f"{type(exc).__name__}: {exc}")
    out.add_note(f"(raised in the rollout engine)\n{where.rstrip()}")
    return out


class DrawBatcher:
    """The runner's side: ``draw_chat`` calls made in the same turn of this process's event
    loop, sent as one ``draw_chat_many`` call to ``engine`` (a Ray actor handle), whose
    answers stream back as they finish (a Ray generator).

    Calls from another event loop (a synchronous workflow's ``model.chat`` on a thread of its
    own) are sent one by one, as before."""

    def __init__(self, engine: Any, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        self.engine = engine
        self.loop = loop
        self._pending: list[tuple[str, Any, dict[str, Any], asyncio.Future]] = []
        self._sending: set[asyncio.Future] = set()

    async def draw_chat(self, messages: Any, kwargs: dict[str, Any]) -> Any:
        loop = asyncio.get_running_loop()
        if self.loop is not None and loop is not self.loop:
            return await self.engine.draw_chat.remote(messages, **kwargs)
        key = uuid.uuid4().hex
        result = loop.create_future()
        self._pending.append((key, messages, kwargs, result))
        if len(self._pending) == 1:  # the first of this turn: send once the turn is over
            loop.call_soon(self._flush, context=contextvars.Context())
        try:
            return await result
        except asyncio.CancelledError:
            waiting = [p for p in self._pending if p[0] == key]
            if waiting:  # not sent yet: it never will be
                self._pending.remove(waiting[0])
            else:  # on the engine: stop it there (outside this task's cancelled context)
                with contextlib.suppress(Exception):
                    contextvars.Context().run(self.engine.cancel_draws.remote, [key])
            raise

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        batch = [p for p in batch if not p[3].done()]
        if batch:
            sending = asyncio.ensure_future(self._send(batch))
            self._sending.add(sending)
            sending.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[str, Any, dict[str, Any], asyncio.Future]]) -> None:
        calls = [(key, messages, kwargs) for key, messages, kwargs, _ in batch]
        try:
            async for finished in self.engine.draw_chat_many.remote(calls):
                for i, value in await finished:
                    result = batch[i][3]
                    if result.done():  # its task was cancelled meanwhile
                        continue
                    if isinstance(value, BaseException):
                        result.set_exception(value)
                    else:
                        result.set_result(value)
        except BaseException as exc:  # the engine call itself failed (a dead engine)
            for *_, result in batch:
                if not result.done():
                    result.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for *_, result in batch:  # an engine that ended its answer early
            if not result.done():
                result.set_exception(
                    RuntimeError("the engine's draw_chat_many left a call unanswered")
                )
