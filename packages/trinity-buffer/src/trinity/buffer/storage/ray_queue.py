"""A queue storage served by a named Ray actor, for explorer and trainer in different processes.

The actor is deliberately thin: it hosts the in-process queue of
:mod:`trinity.buffer.storage.queue` (so FIFO, priority replay, blocking at capacity, read
timeouts and end-of-stream behave exactly as in tests) and adds nothing but transport.

* Experiences cross the process boundary as :meth:`Experience.serialize_many` bytes, never
  pickles, like every other storage.
* A FIFO queue holds what writers sent as written: each row is a reference into its write's
  payload, and a read that hands out whole writes returns their payloads untouched (a list of
  payloads; the client decodes each). Only a write split across reads is decoded, once, and
  the part read re-encoded. The priority replay queue ranks each write by its experiences'
  fields (model version, use count), so it decodes every write. Decoding each batch into
  objects and encoding it again cost the quickstart ~5 ms per step on the way from explorer
  to trainer.
* It is a *threaded* actor (``max_concurrency``): a reader blocked waiting for a batch must
  not stop a writer from putting one, nor a release from ending the stream.
* Outcomes come back as ``(status, payload)`` tuples rather than raised exceptions, so the
  client re-raises the same exception types as the in-process queue (Ray would wrap them in
  ``RayTaskError``, and cannot carry ``StopIteration`` at all).
* The actor is named ``trinity_queue:<storage name>`` in the storage's ``ray_namespace``
  (default: the caller's namespace) and created with ``get_if_exists``, so a writer in an
  explorer actor and a reader in the trainer meet without passing handles around; it is
  detached so that it outlives the task that happened to create it
  (:func:`~trinity.buffer.storage.ray_actor.named_actor`). A client that opens it
  with a config of other queue settings gets a queue built as it says (:meth:`QueueActor.open`,
  as the in-process registry does).
* ``client.length.remote()`` is the actor's ``length`` (Trinity-RFT's tests read it from
  ``QueueReader(config).queue``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

import ray

from trinity.buffer.base import EndOfStream
from trinity.buffer.storage.errors import (
    QueueClosedError,
    QueueReadTimeout,
    QueueWriteTimeout,
    StorageConfigError,
    StorageError,
)
from trinity.buffer.storage.fifo_queue import ExperienceQueue
from trinity.buffer.storage.queue_registry import build_queue, queue_settings
from trinity.buffer.storage.ray_actor import kill_named_actor, named_actor
from trinity.utils.log import get_logger

if TYPE_CHECKING:
    from trinity.common.experience import Experience

__all__ = ["QueueActor", "RayQueueClient", "get_ray_queue", "kill_ray_queue", "ray_queue_name"]

logger = get_logger(__name__)

_MAX_CONCURRENCY = 64
_ERRORS: dict[str, type[Exception]] = {
    "read_timeout": QueueReadTimeout,
    "write_timeout": QueueWriteTimeout,
    "closed": QueueClosedError,
    "config": StorageConfigError,
    "value": ValueError,
}


def _codec() -> type[Experience]:
    """:class:`Experience`, imported where a payload is decoded or encoded: the actor of a FIFO
    queue never does it for whole writes, and starts without torch (~1.5 s of CPU less at a
    run's start, while the rollout engine loads on the same cores)."""
    from trinity.common.experience import Experience

    return Experience


def _outcome(exc: BaseException) -> tuple[str, Any]:
    if isinstance(exc, EndOfStream):
        return "end", None
    for status, cls in _ERRORS.items():
        if isinstance(exc, cls):
            return status, str(exc)
    raise exc


class _Write:
    """One writer's payload of ``size`` experiences, decoded only if a read splits it."""

    __slots__ = ("payload", "size", "_exps")

    def __init__(self, payload: bytes, size: int) -> None:
        self.payload = payload
        self.size = size
        self._exps: Optional[list[Experience]] = None

    @classmethod
    def decoded(cls, payload: bytes) -> _Write:
        """A write whose size was not sent: decoded now to count it."""
        exps = _codec().deserialize_many(payload)
        write = cls(payload, len(exps))
        write._exps = exps
        return write

    def experiences(self) -> list[Experience]:
        if self._exps is None:
            self._exps = _codec().deserialize_many(self.payload)
            if len(self._exps) != self.size:
                raise ValueError(
                    f"a queue write announced {self.size} experiences, its payload holds "
                    f"{len(self._exps)}"
                )
        return self._exps


class _Row:
    """Row ``index`` of a :class:`_Write`: what the FIFO queue holds in the actor."""

    __slots__ = ("write", "index")

    def __init__(self, write: _Write, index: int) -> None:
        self.write = write
        self.index = index


def _payloads(rows: list[_Row]) -> list[bytes]:
    """The wire payloads of ``rows`` in order: a whole write as it was sent, the rows of a
    split write re-encoded together."""
    out: list[bytes] = []
    i = 0
    while i < len(rows):
        write = rows[i].write
        j = i
        while j < len(rows) and rows[j].write is write:
            j += 1
        if j - i == write.size and rows[i].index == 0:
            out.append(write.payload)
        else:
            exps = write.experiences()
            out.append(_codec().serialize_many([exps[row.index] for row in rows[i:j]]))
        i = j
    return out


class QueueActor:
    """The actor body: one queue built from the storage config, bytes in and out."""

    def __init__(self, storage_config: Any) -> None:
        self._build(storage_config)

    def _build(self, storage_config: Any) -> None:
        self.queue = build_queue(storage_config)
        self._fifo = isinstance(self.queue, ExperienceQueue)
        self._settings = queue_settings(storage_config)

    def open(self, storage_config: Any) -> bool:
        """Called by each client that opens the actor: a config asking for another kind of
        queue (FIFO or priority, capacity, replay settings) than the actor holds gets a new
        one, built as it says, as :func:`~trinity.buffer.storage.queue.get_queue` does in a
        process (the actor is detached, so one of an earlier run or test may still be there).
        Returns whether it rebuilt."""
        settings = queue_settings(storage_config)
        if settings == self._settings:
            return False
        logger.warning(
            "queue actor %r opened with other settings %s than it holds %s: using a new queue",
            getattr(storage_config, "name", None),
            settings,
            self._settings,
        )
        self.queue.close()  # wake whoever still waits on the old queue: its stream ended
        self._build(storage_config)
        return True

    def put(self, payload: bytes, timeout: Optional[float], size: int = 0) -> tuple[str, Any]:
        """Insert a payload of ``size`` experiences (``0``: count them by decoding)."""
        try:
            if self._fifo:
                write = _Write(payload, size) if size > 0 else _Write.decoded(payload)
                self.queue.put([_Row(write, i) for i in range(write.size)], timeout=timeout)
            else:
                self.queue.put(_codec().deserialize_many(payload), timeout=timeout)
            return "ok", None
        except (QueueWriteTimeout, QueueClosedError) as exc:
            return _outcome(exc)

    def get(
        self, batch_size: int, timeout: Optional[float], min_size: Optional[int] = None
    ) -> tuple[str, Any]:
        """``("ok", [payload, ...])`` holding the batch in order, or an error outcome."""
        try:
            items = self.queue.get(batch_size, timeout=timeout, min_size=min_size)
        except (EndOfStream, QueueReadTimeout, StorageConfigError, ValueError) as exc:
            return _outcome(exc)
        if self._fifo:
            return "ok", _payloads(items)
        return "ok", [_codec().serialize_many(items)]

    def end_step(self) -> None:
        self.queue.end_step()

    def flush(self) -> None:
        self.queue.flush()

    def acquire(self) -> int:
        return self.queue.acquire()

    def release(self) -> int:
        return self.queue.release()

    def close(self) -> None:
        self.queue.close()

    def qsize(self) -> int:
        return self.queue.qsize()

    def length(self) -> int:
        """Trinity-RFT's name: the entries the queue holds (the priority queue's items)."""
        return self.queue.length()


def _raise_for(status: str, payload: Any) -> Any:
    if status == "ok":
        return payload
    if status == "end":
        raise EndOfStream
    raise _ERRORS.get(status, StorageError)(payload)


def _decode(payloads: list[bytes]) -> list[Experience]:
    if len(payloads) == 1:
        return _codec().deserialize_many(payloads[0])
    return [exp for payload in payloads for exp in _codec().deserialize_many(payload)]


class RayQueueClient:
    """Driver-side handle with the same methods as the in-process queues (``QueueLike``).

    Trinity-RFT's reader and writer hold the queue actor itself as ``.queue``, and its tests
    call ``reader.queue.length.remote()``: :attr:`length` is that remote method, so the same
    call works on this client (``ray.get`` gives the count).
    """

    def __init__(self, actor: Any, name: str) -> None:
        self.actor = actor
        self.name = name

    @property
    def length(self) -> Any:
        """The actor's ``length`` method (call ``.remote()``): the entries the queue holds."""
        return self.actor.length

    def put(self, exps: Sequence[Experience], timeout: Optional[float] = None) -> None:
        if exps:
            payload = _codec().serialize_many(list(exps))
            _raise_for(*ray.get(self.actor.put.remote(payload, timeout, len(exps))))

    async def put_async(self, exps: Sequence[Experience], timeout: Optional[float] = None) -> None:
        if exps:
            payload = _codec().serialize_many(list(exps))
            _raise_for(*(await self.actor.put.remote(payload, timeout, len(exps))))

    def get(
        self, batch_size: int, timeout: Optional[float] = None, min_size: Optional[int] = None
    ) -> list[Experience]:
        payloads = _raise_for(*ray.get(self.actor.get.remote(batch_size, timeout, min_size)))
        return _decode(payloads)

    async def get_async(
        self, batch_size: int, timeout: Optional[float] = None, min_size: Optional[int] = None
    ) -> list[Experience]:
        payloads = _raise_for(*(await self.actor.get.remote(batch_size, timeout, min_size)))
        return _decode(payloads)

    def end_step(self) -> None:
        ray.get(self.actor.end_step.remote())

    async def end_step_async(self) -> None:
        await self.actor.end_step.remote()

    def flush(self) -> None:
        ray.get(self.actor.flush.remote())

    async def flush_async(self) -> None:
        await self.actor.flush.remote()

    def acquire(self) -> int:
        return ray.get(self.actor.acquire.remote())

    def release(self) -> int:
        return ray.get(self.actor.release.remote())

    def close(self) -> None:
        ray.get(self.actor.close.remote())

    def qsize(self) -> int:
        return ray.get(self.actor.qsize.remote())


def ray_queue_name(storage_config: Any) -> str:
    """The Ray actor name of a queue storage."""
    return f"trinity_queue:{storage_config.name}"


def get_ray_queue(storage_config: Any) -> RayQueueClient:
    """The queue actor for ``storage_config`` (created on first use, shared by name; one
    holding a queue of other settings builds the one this config asks for,
    :meth:`QueueActor.open`)."""
    if not ray.is_initialized():
        raise RuntimeError(
            f"queue {storage_config.name!r}: the Ray actor queue needs ray.init() first "
            "(or build the reader/writer with use_ray=False for an in-process queue)"
        )
    actor = named_actor(
        QueueActor,
        ray_queue_name(storage_config),
        storage_config,
        storage_config,
        max_concurrency=_MAX_CONCURRENCY,
    )
    ray.get(actor.open.remote(storage_config))
    return RayQueueClient(actor, storage_config.name or "<unnamed>")


def kill_ray_queue(storage_config: Any) -> bool:
    """Kill the queue actor of ``storage_config`` (it is detached, so nothing else does);
    returns whether one existed."""
    return kill_named_actor(ray_queue_name(storage_config), storage_config)
