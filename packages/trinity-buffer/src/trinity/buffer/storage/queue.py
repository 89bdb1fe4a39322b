"""In-process experience queues: a bounded FIFO queue and a priority replay queue.

Both are thread-safe and serve blocking callers (``threading.Condition``) and coroutines
(futures woken from any thread) alike, because the explorer writes from an event loop while a
trainer thread reads. The Ray actor queue (:mod:`trinity.buffer.storage.ray_queue`) hosts the
very same classes in an actor, so behaviour is identical in tests and in a cluster.

* :class:`ExperienceQueue` — bounded FIFO. A write blocks while the queue is at capacity
  (back-pressure on the explorer instead of unbounded memory); a read returns exactly
  ``batch_size`` experiences, waiting up to ``max_read_timeout``; when every acquired writer
  has released, readers drain what is left and then see the end of the stream.
* :class:`PriorityReplayQueue` — replay buffer. Each experience has a priority computed by a
  registered priority function from its model version and use count (fresher and less used
  first); a read takes the highest priorities; a read experience comes back after
  ``reuse_cooldown_time`` seconds (if set) with its use count incremented; at capacity a new
  experience evicts the lowest-priority one (or is dropped if it ranks lower still), so a
  replay buffer never blocks the explorer.

A writer and a reader created separately meet through :func:`get_queue`, a registry of named
queues (by ``StorageConfig.name``).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Protocol, Union

from trinity.buffer.base import BufferReader, BufferWriter, EndOfStream
from trinity.buffer.storage.errors import (
    QueueClosedError,
    QueueReadTimeout,
    QueueWriteTimeout,
    StorageConfigError,
)
from trinity.buffer.storage.priority import (
    PRIORITY_FN,
    PRIORITY_FUNC,
    LinearDecayPriority,
    LinearDecayUseCountControlPriority,
    PriorityFunction,
)
from trinity.utils.log import get_logger

if TYPE_CHECKING:  # the queue actor's FIFO holds payloads and needs no torch
    from trinity.common.experience import Experience

logger = get_logger(__name__)

__all__ = [
    "PRIORITY_FN",
    "PRIORITY_FUNC",
    "PriorityFunction",
    "LinearDecayPriority",
    "LinearDecayUseCountControlPriority",
    "QueueLike",
    "ExperienceQueue",
    "PriorityReplayQueue",
    "build_queue",
    "get_queue",
    "remove_queue",
    "clear_queues",
    "QueueReader",
    "QueueWriter",
]

# --------------------------------------------------------------------------------------
# Queues
# --------------------------------------------------------------------------------------


class QueueLike(Protocol):
    """What :class:`QueueReader` / :class:`QueueWriter` need: the in-process queues and the
    Ray actor client both provide it."""

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


class _BaseQueue(ABC):
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


class ExperienceQueue(_BaseQueue):
    """Bounded FIFO queue of experiences (``storage_type: queue``).

    A write of at most ``capacity`` experiences is inserted whole (a reader never sees half
    of it); a larger write is streamed in as room frees up.
    """

    def __init__(self, name: str, capacity: int) -> None:
        super().__init__(name, capacity)
        self._items: deque[Experience] = deque()

    def _try_put(self, exps: list[Experience]) -> int:
        free = self.capacity - len(self._items)
        n = len(exps) if len(exps) <= self.capacity else min(free, len(exps))
        if n > free or n == 0:
            return 0
        self._items.extend(exps[:n])
        return n

    def _try_get(self, batch_size: int, min_size: int) -> Optional[list[Experience]]:
        size = self._release_size(len(self._items), batch_size, min_size)
        if not size and self._closed:
            if not self._items:
                raise EndOfStream
            size = len(self._items)
        if not size:
            return None
        self._taken(size)
        return [self._items.popleft() for _ in range(size)]

    def qsize(self) -> int:
        return len(self._items)


@dataclass(order=True)
class _Entry:
    """An experience in the replay queue, ordered by (priority, age) for the sorted index."""

    priority: float
    seq: int  # negated insertion counter: among equal priorities the oldest sorts last
    exp: Experience = field(compare=False)
    use_count: int = field(default=0, compare=False)


class PriorityReplayQueue(_BaseQueue):
    """Priority replay queue (``storage_type: priority_queue`` or ``replay_buffer.enable``).

    Entries are kept sorted by priority (a ``bisect`` index: O(log n) search, and reads and
    evictions pop from the two ends). Experiences waiting out their reuse cooldown do not
    count against ``capacity`` and are not readable; they are re-prioritized with their new
    use count when the cooldown ends.
    """

    def __init__(
        self,
        name: str,
        capacity: int,
        priority_fn: str = "linear_decay",
        priority_fn_args: Optional[dict[str, Any]] = None,
        reuse_cooldown_time: Optional[float] = None,
    ) -> None:
        super().__init__(name, capacity)
        self.priority_fn: PriorityFunction = PRIORITY_FN[priority_fn](**(priority_fn_args or {}))
        self.reuse_cooldown_time = reuse_cooldown_time
        self._entries: list[_Entry] = []  # ascending: lowest priority first
        self._cooling: deque[tuple[float, _Entry]] = deque()  # (ready_at, entry), FIFO by time
        self._counter = itertools.count()
        self.evicted = 0  # experiences dropped by capacity (observable for tests/metrics)

    def _insert(self, exp: Experience, use_count: int) -> None:
        priority, keep = self.priority_fn(exp, use_count)
        if not keep:
            return
        entry = _Entry(float(priority), -next(self._counter), exp, use_count)
        if len(self._entries) >= self.capacity:
            if entry.priority < self._entries[0].priority:
                self.evicted += 1  # ranks below everything held: drop the newcomer
                return
            self._entries.pop(0)
            self.evicted += 1
        bisect.insort(self._entries, entry)

    def _refill(self) -> None:
        """Return experiences whose cooldown has ended."""
        now = time.monotonic()
        while self._cooling and self._cooling[0][0] <= now:
            _, entry = self._cooling.popleft()
            self._insert(entry.exp, entry.use_count)

    def _try_put(self, exps: list[Experience]) -> int:
        self._refill()
        for exp in exps:
            self._insert(exp, 0)
        return len(exps)

    def _try_get(self, batch_size: int, min_size: int) -> Optional[list[Experience]]:
        # a replay queue has no order to mark positions in: a step's end (or a flush) lets a
        # read take what is readable, at least ``min_size`` (any, after a flush)
        self._refill()
        if len(self._entries) < batch_size:
            marks = {kind for position, kind in self._marks if position > self._get_count}
            least = 1 if "flush" in marks else (min_size if "step" in marks else batch_size)
            if self._closed:
                if not self._entries:
                    raise EndOfStream
            elif len(self._entries) < least:
                return None
            batch_size = len(self._entries)
        self._get_count = self._put_count  # every mark so far is served by this read
        self._marks.clear()
        taken = [self._entries.pop() for _ in range(batch_size)]  # highest priority first
        now = time.monotonic()
        out = []
        for entry in taken:
            entry.use_count += 1
            entry.exp.info["use_count"] = entry.use_count
            if self.reuse_cooldown_time is not None and not self._closed:
                self._cooling.append((now + self.reuse_cooldown_time, entry))
            out.append(entry.exp)
        return out

    def _next_event(self) -> float:
        return self._cooling[0][0] if self._cooling else math.inf

    def _on_close(self) -> None:
        # no writer left: stop recycling so the stream can end once the queue is drained
        self._cooling.clear()

    def qsize(self) -> int:
        return len(self._entries)

    def priorities(self) -> list[float]:
        """Priorities of the readable experiences, highest first (for inspection and tests).

        Experiences whose cooldown has ended count as readable, as they would for a read.
        """
        with self._cond:
            self._refill()
            return [e.priority for e in reversed(self._entries)]


def _is_priority(config: Any) -> bool:
    replay = getattr(config, "replay_buffer", None)
    return str(config.storage_type).lower() == "priority_queue" or bool(
        replay is not None and getattr(replay, "enable", False)
    )


def build_queue(config: Any) -> Union[ExperienceQueue, PriorityReplayQueue]:
    """A fresh queue for ``config`` (FIFO, or priority replay when asked for)."""
    name = config.name or "<unnamed>"
    if _is_priority(config):
        replay = config.replay_buffer
        return PriorityReplayQueue(
            name,
            config.capacity,
            priority_fn=getattr(replay, "priority_fn", "linear_decay") or "linear_decay",
            priority_fn_args=dict(getattr(replay, "priority_fn_args", None) or {}),
            reuse_cooldown_time=getattr(replay, "reuse_cooldown_time", None),
        )
    return ExperienceQueue(name, config.capacity)


_QUEUES: dict[str, Union[ExperienceQueue, PriorityReplayQueue]] = {}
_QUEUE_SETTINGS: dict[str, tuple] = {}
_QUEUES_LOCK = threading.Lock()


def _settings(config: Any) -> tuple:
    """What :func:`build_queue` builds from ``config``: kind, capacity and replay settings."""
    if not _is_priority(config):
        return ("fifo", int(config.capacity))
    replay = config.replay_buffer
    return (
        "priority",
        int(config.capacity),
        getattr(replay, "priority_fn", None),
        repr(sorted((getattr(replay, "priority_fn_args", None) or {}).items())),
        getattr(replay, "reuse_cooldown_time", None),
    )


def get_queue(config: Any) -> Union[ExperienceQueue, PriorityReplayQueue]:
    """The process-wide queue named ``config.name``, created on first use — how a writer and
    a reader built separately from the same config meet. A config of that name asking for
    another kind of queue (FIFO or priority, capacity, replay settings) gets a new one, built
    as it says; the old one is forgotten (with a warning)."""
    with _QUEUES_LOCK:
        queue = _QUEUES.get(config.name)
        settings = _settings(config)
        if queue is not None and _QUEUE_SETTINGS.get(config.name) != settings:
            logger.warning(
                "queue %r opened with other settings %s than the queue of that name %s: "
                "using a new queue",
                config.name,
                settings,
                _QUEUE_SETTINGS.get(config.name),
            )
            queue = None
        if queue is None:
            queue = _QUEUES[config.name] = build_queue(config)
            _QUEUE_SETTINGS[config.name] = settings
        return queue


def remove_queue(name: str) -> None:
    """Forget the named queue (the next :func:`get_queue` creates a fresh one)."""
    with _QUEUES_LOCK:
        _QUEUES.pop(name, None)
        _QUEUE_SETTINGS.pop(name, None)


def clear_queues() -> None:
    """Forget every named queue (test isolation)."""
    with _QUEUES_LOCK:
        _QUEUES.clear()
        _QUEUE_SETTINGS.clear()


# --------------------------------------------------------------------------------------
# Reader / writer
# --------------------------------------------------------------------------------------


class QueueWriter(BufferWriter):
    """Writes into a queue storage (in-process by default, or the given Ray queue client)."""

    def __init__(
        self,
        storage_config: Any,
        queue: Optional[QueueLike] = None,
        write_timeout: Optional[float] = None,
    ) -> None:
        self.config = storage_config
        self.queue: QueueLike = queue if queue is not None else get_queue(storage_config)
        self.write_timeout = write_timeout

    def write(self, exps: Sequence[Experience]) -> None:
        self.queue.put(list(exps), timeout=self.write_timeout)

    async def write_async(self, exps: Sequence[Experience]) -> None:
        await self.queue.put_async(list(exps), timeout=self.write_timeout)

    def end_step(self) -> None:
        self.queue.end_step()

    async def end_step_async(self) -> None:
        method = getattr(self.queue, "end_step_async", None)
        if callable(method):
            await method()
        else:
            self.queue.end_step()

    def flush(self) -> None:
        self.queue.flush()

    async def flush_async(self) -> None:
        method = getattr(self.queue, "flush_async", None)
        if callable(method):
            await method()
        else:
            self.queue.flush()

    def acquire(self) -> int:
        return self.queue.acquire()

    def release(self) -> int:
        return self.queue.release()


class QueueReader(BufferReader):
    """Reads ``batch_size`` experiences per call, waiting up to ``max_read_timeout``; fewer
    at an explore step's end when the step produced at least ``min_batch_size`` (set from
    ``explorer.min_batch_fraction``), and after the writer's flush."""

    def __init__(self, storage_config: Any, queue: Optional[QueueLike] = None) -> None:
        super().__init__(storage_config)
        self.queue: QueueLike = queue if queue is not None else get_queue(storage_config)
        self.timeout: float = float(getattr(storage_config, "max_read_timeout", 1800))
        self.min_size: Optional[int] = getattr(storage_config, "min_batch_size", None) or None

    def _read(self, batch_size: int) -> list[Experience]:
        return self.queue.get(batch_size, timeout=self.timeout, min_size=self.min_size)

    async def _read_async(self, batch_size: int) -> list[Experience]:
        return await self.queue.get_async(batch_size, timeout=self.timeout, min_size=self.min_size)
