"""Experience queues (Trinity-RFT's module path): the reader and writer of a queue storage, the
choice of where its queue lives, and the names of the modules below.

Both queues are thread-safe and serve blocking callers and coroutines alike
(:class:`~trinity.buffer.storage.queue_base.BaseQueue`). The Ray actor queue
(:mod:`trinity.buffer.storage.ray_queue`) hosts the very same classes in an actor, so behaviour
is identical in tests and in a cluster.

* :class:`~trinity.buffer.storage.fifo_queue.ExperienceQueue` — bounded FIFO with
  back-pressure on the writer (see its module).
* :class:`~trinity.buffer.storage.priority_queue.PriorityReplayQueue` — replay buffer of
  items (one write's experiences each), ranked by a registered priority function, reused
  after a cooldown, evicted by priority at capacity (see its module).

A writer and a reader meet by the storage's name: in one process through
:func:`~trinity.buffer.storage.queue_registry.get_queue`, a registry of named queues, across
processes through the named Ray actor. :func:`open_queue` is
the one place that picks between the two, for the factories
(:func:`trinity.buffer.buffer_writer.build_storage`) and for a :class:`QueueReader` /
:class:`QueueWriter` built directly from a config alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from trinity.buffer.base import BufferReader, BufferWriter
from trinity.buffer.storage.fifo_queue import ExperienceQueue
from trinity.buffer.storage.priority import (
    PRIORITY_FN,
    PRIORITY_FUNC,
    LinearDecayPriority,
    LinearDecayUseCountControlPriority,
    PriorityFunction,
)
from trinity.buffer.storage.priority_queue import PriorityReplayQueue
from trinity.buffer.storage.queue_base import QueueLike
from trinity.buffer.storage.queue_registry import (
    build_queue,
    clear_queues,
    get_queue,
    queue_settings,
    remove_queue,
)
from trinity.buffer.storage.ray_actor import use_ray_actor

if TYPE_CHECKING:  # the queue actor's FIFO holds payloads and needs no torch
    from trinity.common.experience import Experience

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
    "queue_settings",
    "get_queue",
    "remove_queue",
    "clear_queues",
    "use_ray_queue",
    "open_queue",
    "QueueReader",
    "QueueWriter",
]

# --------------------------------------------------------------------------------------
# Where a queue lives
# --------------------------------------------------------------------------------------


def use_ray_queue(config: Any, use_ray: Optional[bool] = None) -> bool:
    """Whether the queue of ``config`` lives in its named Ray actor: when asked (``use_ray``),
    else when Ray is initialized and the config allows it (``wrap_in_ray``, True by default;
    the explorer and trainer then run in different processes and only an actor is visible to
    both; :func:`~trinity.buffer.storage.ray_actor.use_ray_actor`). Runs that keep both sides
    in one process set ``wrap_in_ray: false`` (compat D8)."""
    return use_ray_actor(config, use_ray)


def open_queue(config: Any, use_ray: Optional[bool] = None) -> QueueLike:
    """The queue a reader or writer of ``config`` uses: the named Ray actor's client
    (:func:`~trinity.buffer.storage.ray_queue.get_ray_queue`) or this process's queue of that
    name (:func:`get_queue`), as :func:`use_ray_queue` decides."""
    if use_ray_queue(config, use_ray):
        from trinity.buffer.storage.ray_queue import get_ray_queue  # imports this module

        return get_ray_queue(config)
    return get_queue(config)


# --------------------------------------------------------------------------------------
# Reader / writer
# --------------------------------------------------------------------------------------


class QueueWriter(BufferWriter):
    """Writes into a queue storage: ``queue`` when given, else the one :func:`open_queue`
    picks (the named Ray actor when Ray is up and ``wrap_in_ray`` is set, as with
    :func:`~trinity.buffer.buffer_writer.get_buffer_writer`).

    Each write is one unit for the queue: the FIFO inserts it whole when it fits, the priority
    queue keeps it as one item (ranked, read, reused and evicted together)."""

    def __init__(
        self,
        storage_config: Any,
        queue: Optional[QueueLike] = None,
        write_timeout: Optional[float] = None,
    ) -> None:
        self.config = storage_config
        self.queue: QueueLike = queue if queue is not None else open_queue(storage_config)
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
    ``explorer.min_batch_fraction``), and after the writer's flush. ``queue``: as for
    :class:`QueueWriter`."""

    def __init__(self, storage_config: Any, queue: Optional[QueueLike] = None) -> None:
        super().__init__(storage_config)
        self.queue: QueueLike = queue if queue is not None else open_queue(storage_config)
        self.timeout: float = float(getattr(storage_config, "max_read_timeout", 1800))
        self.min_size: Optional[int] = getattr(storage_config, "min_batch_size", None) or None

    def _read(self, batch_size: int) -> list[Experience]:
        return self.queue.get(batch_size, timeout=self.timeout, min_size=self.min_size)

    async def _read_async(self, batch_size: int) -> list[Experience]:
        return await self.queue.get_async(batch_size, timeout=self.timeout, min_size=self.min_size)
