"""The machinery the in-process experience queues share: blocking and coroutine callers, writer
counting and end of stream, explore-step ends and flushes.

Both queues (:class:`trinity.buffer.storage.fifo_queue.ExperienceQueue`, the FIFO, and
:class:`trinity.buffer.storage.priority_queue.PriorityReplayQueue`) are thread-safe and serve
blocking callers (``threading.Condition``) and coroutines (futures woken from any thread)
alike, because the explorer writes from an event loop while a trainer thread reads. Each
implements the non-blocking ``_try_put`` / ``_try_get``; everything else is here.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Optional, Protocol

from trinity.buffer.storage.errors import (
    QueueClosedError,
    QueueReadTimeout,
    QueueWriteTimeout,
    StorageConfigError,
)

if TYPE_CHECKING:  # the queue actor's FIFO holds payloads and needs no torch
    from trinity.common.experience import Experience

__all__ = ["QueueLike", "BaseQueue"]


class QueueLike(Protocol):
    """What :class:`~trinity.buffer.storage.queue.QueueReader` /
    :class:`~trinity.buffer.storage.queue.QueueWriter` need: the in-process queues and the Ray
    actor client both provide it."""

    name: str

    def put(self, exps: Sequence[Experience], timeout: Optional[float] = None) -> None: ...

    async def put_async(
        self, exps: Sequence[Experience], timeout: Optional[float] = None
    ) -> None: ...

    def get(
        self, batch_size: int, timeout: Optional[float] = None, min_size: Optional[int] = None
    ) -> list[Experience]: ...

    async def get_async(
        self, batch_size: int, timeout: Optional[float] = None, min_size: Optional[int] = None
    ) -> list[Experience]: ...

    def end_step(self) -> None: ...

    def flush(self) -> None: ...

    def acquire(self) -> int: ...

    def release(self) -> int: ...

    def qsize(self) -> int: ...


def _deadline(timeout: Optional[float]) -> float:
    return math.inf if timeout is None else time.monotonic() + max(0.0, timeout)


class BaseQueue(ABC):
    """Shared blocking/async machinery; subclasses implement the non-blocking ``_try_*``.

    Why futures for coroutines instead of ``run_in_executor(blocking_get)``: a cancelled
    coroutine (``asyncio.wait_for`` timing out) would leave the worker thread waiting, and
    when data arrived it would pop a batch nobody receives. Here the pop happens in the
    coroutine itself, so cancellation loses nothing.
    """

    def __init__(self, name: str, capacity: int) -> None:
        if capacity < 1:
            raise StorageConfigError(f"queue {name!r}: capacity must be >= 1, got {capacity}")
        self.name = name
        self.capacity = int(capacity)
        self._cond = threading.Condition()
        self._waiters: set[Future[None]] = set()
        self._writers = 0
        self._closed = False
        #: experiences ever inserted / ever handed to readers (absolute positions)
        self._put_count = 0
        self._get_count = 0
        #: release points ``(position, kind)``: ``"step"`` (an explore step ended there: a
        #: read may stop there with at least ``min_size`` experiences) or ``"flush"`` (the
        #: writer waits for the reader: a read may stop there with any experience at all)
        self._marks: deque[tuple[int, str]] = deque()

    # ---- subclass hooks (called with the lock held) ---------------------------------

    @abstractmethod
    def _try_put(self, exps: list[Experience]) -> int:
        """Insert as many of ``exps`` as the policy allows now; returns how many it took."""

    @abstractmethod
    def _try_get(self, batch_size: int, min_size: int) -> Optional[list[Experience]]:
        """A batch if one is ready, ``None`` to wait; raises :class:`EndOfStream`.

        ``min_size`` (``1 <= min_size <= batch_size``): the fewest experiences a read may
        return at a step's end (see :meth:`end_step`)."""

    def _next_event(self) -> float:
        """Monotonic time at which the state changes by itself (a cooldown ends)."""
        return math.inf

    def _on_close(self) -> None:
        """Called when the stream ends."""
        return None

    @abstractmethod
    def qsize(self) -> int:
        """Experiences readable now."""

    def length(self) -> int:
        """What Trinity-RFT's queue storage calls its length: the entries it holds (the FIFO
        counts experiences, the priority queue the written lists it ranks)."""
        with self._cond:
            return self.qsize()

    # ---- wake-ups -------------------------------------------------------------------

    def _notify(self) -> None:
        self._cond.notify_all()
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    async def _wait_async(self, fut: Future[None], until: float) -> None:
        wait = until - time.monotonic()
        try:
            await asyncio.wait_for(asyncio.wrap_future(fut), None if wait == math.inf else wait)
        except asyncio.TimeoutError:
            pass
        finally:
            with self._cond:
                self._waiters.discard(fut)

    # ---- writers --------------------------------------------------------------------

    def acquire(self) -> int:
        """Count a live writer; re-opens a queue whose previous writers all released."""
        with self._cond:
            self._writers += 1
            self._closed = False
            return self._writers

    def release(self) -> int:
        """Uncount a writer; the last release ends the stream (readers drain, then stop)."""
        with self._cond:
            self._writers = max(0, self._writers - 1)
            if self._writers == 0:
                self.close()
            return self._writers

    def close(self) -> None:
        """End the stream now, whatever the writer count."""
        with self._cond:
            self._closed = True
            self._on_close()
            self._notify()

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- step ends --------------------------------------------------------------------

    def end_step(self) -> None:
        """Mark the end of one explore step's experiences.

        A read that reaches this mark with at least ``min_size`` experiences returns them
        instead of waiting for a full batch: the trainer trains on what the step produced
        when some of its tasks failed, instead of waiting (``max_read_timeout``) for
        experiences that will never come. Without ``min_size`` a read ignores marks.
        """
        with self._cond:
            if not self._marks or self._marks[-1][0] != self._put_count:
                self._marks.append((self._put_count, "step"))
            self._notify()

    def flush(self) -> None:
        """Let the next read return whatever was written so far (at least one experience).

        The explorer calls this before it waits for the trainer (on-policy sync): whatever the
        trainer still lacks for a full batch cannot come before the trainer finishes its step,
        so waiting for it would deadlock the two.
        """
        with self._cond:
            if self._put_count > self._get_count:
                self._marks.append((self._put_count, "flush"))
                self._notify()

    def _release_size(self, available: int, batch_size: int, min_size: int) -> int:
        """How many experiences a read may take now: ``batch_size`` when that many are
        there, fewer at a release point, 0 to wait."""
        for position, kind in self._marks:
            size = position - self._get_count
            if size <= 0:
                continue
            if size >= batch_size or size > available:
                break
            if size >= (1 if kind == "flush" else min_size):
                return size
        return batch_size if available >= batch_size else 0

    def _taken(self, n: int) -> None:
        """Account for ``n`` experiences handed to a reader; drop the marks behind them."""
        self._get_count += n
        while self._marks and self._marks[0][0] <= self._get_count:
            self._marks.popleft()

    def _put_step(self, pending: list[Experience], total: int, done: int) -> int:
        if self._closed:
            raise QueueClosedError(
                f"queue {self.name!r} is closed (all writers released); wrote {done} of "
                f"{total} experiences"
            )
        taken = self._try_put(pending)
        if taken:
            self._put_count += taken
            self._notify()
        return taken

    def _put_timeout_error(self, total: int, done: int, timeout: Optional[float]) -> Exception:
        return QueueWriteTimeout(
            f"queue {self.name!r} stayed at capacity ({self.capacity}) for {timeout} s: "
            f"wrote {done} of {total} experiences; is a reader consuming it?"
        )

    def put(self, exps: Sequence[Experience], timeout: Optional[float] = None) -> None:
        """Insert ``exps``, blocking while the queue is full; ``timeout`` (seconds) bounds the
        wait and raises :class:`QueueWriteTimeout`."""
        pending = list(exps)
        total, done, until = len(pending), 0, _deadline(timeout)
        with self._cond:
            while pending:
                taken = self._put_step(pending, total, done)
                done += taken
                del pending[:taken]
                if not pending:
                    break
                wait = until - time.monotonic()
                if wait <= 0:
                    raise self._put_timeout_error(total, done, timeout)
                self._cond.wait(None if wait == math.inf else wait)

    async def put_async(self, exps: Sequence[Experience], timeout: Optional[float] = None) -> None:
        """Coroutine :meth:`put`."""
        pending = list(exps)
        total, done, until = len(pending), 0, _deadline(timeout)
        while True:
            with self._cond:
                taken = self._put_step(pending, total, done)
                done += taken
                del pending[:taken]
                if not pending:
                    return
                if until - time.monotonic() <= 0:
                    raise self._put_timeout_error(total, done, timeout)
                fut: Future[None] = Future()
                self._waiters.add(fut)
            await self._wait_async(fut, until)

    # ---- readers --------------------------------------------------------------------

    def _check_batch(self, batch_size: int) -> None:
        if batch_size < 1:
            raise ValueError(f"queue {self.name!r}: batch_size must be >= 1, got {batch_size}")
        if batch_size > self.capacity:
            raise StorageConfigError(
                f"queue {self.name!r}: batch_size {batch_size} exceeds capacity "
                f"{self.capacity}; the read could never be served (raise `capacity`)"
            )

    def _read_timeout_error(self, batch_size: int, timeout: Optional[float]) -> Exception:
        return QueueReadTimeout(
            f"queue {self.name!r}: timed out after {timeout} s (max_read_timeout) waiting for "
            f"{batch_size} experiences, {self.qsize()} available; is the explorer producing?"
        )

    @staticmethod
    def _min_size(batch_size: int, min_size: Optional[int]) -> int:
        if not min_size:
            return batch_size
        return max(1, min(int(min_size), batch_size))

    def get(
        self, batch_size: int, timeout: Optional[float] = None, min_size: Optional[int] = None
    ) -> list[Experience]:
        """``batch_size`` experiences; fewer from a closed queue's remainder, at a step's end
        with at least ``min_size`` (:meth:`end_step`), or after a :meth:`flush`.

        Raises :class:`QueueReadTimeout` after ``timeout`` seconds and :class:`EndOfStream`
        when the queue is closed and empty.
        """
        self._check_batch(batch_size)
        least = self._min_size(batch_size, min_size)
        until = _deadline(timeout)
        with self._cond:
            while True:
                batch = self._try_get(batch_size, least)
                if batch is not None:
                    self._notify()
                    return batch
                now = time.monotonic()
                if now >= until:
                    raise self._read_timeout_error(batch_size, timeout)
                wait = min(until, self._next_event()) - now
                self._cond.wait(None if wait == math.inf else max(wait, 0.0))

    async def get_async(
        self, batch_size: int, timeout: Optional[float] = None, min_size: Optional[int] = None
    ) -> list[Experience]:
        """Coroutine :meth:`get`; cancellation-safe (nothing is popped unless returned)."""
        self._check_batch(batch_size)
        least = self._min_size(batch_size, min_size)
        until = _deadline(timeout)
        while True:
            with self._cond:
                batch = self._try_get(batch_size, least)
                if batch is not None:
                    self._notify()
                    return batch
                if time.monotonic() >= until:
                    raise self._read_timeout_error(batch_size, timeout)
                fut: Future[None] = Future()
                self._waiters.add(fut)
                wake = min(until, self._next_event())
            await self._wait_async(fut, wake)
