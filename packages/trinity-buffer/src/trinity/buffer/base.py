"""The abstract reader and writer of every experience storage, and the types they share.

This module owns :class:`BufferReader` / :class:`OfflineReader` (how a storage is read in
batches, across epochs, with a resumable position), :class:`BufferWriter` (how a storage is
written, with the acquire/release life cycle that ends a queue's stream), :class:`EndOfStream`
and :data:`STORAGE_TYPES`. It sits *below* the storages (``trinity.buffer.storage.*``) and the
factories (:mod:`trinity.buffer.buffer_reader`, :mod:`trinity.buffer.buffer_writer`): storages
import their bases from here, the factories import the storages, and nothing imports back up,
so the buffer has no import circle.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, Optional

from trinity.buffer.errors import StorageConfigError

if TYPE_CHECKING:  # the queue actor imports this module and needs no torch
    from trinity.common.experience import Experience

__all__ = [
    "BufferReader",
    "OfflineReader",
    "EndOfStream",
    "BufferWriter",
    "STORAGE_TYPES",
    "WriterCount",
]

#: The ``storage_type`` values the factories understand.
STORAGE_TYPES: tuple[str, ...] = ("queue", "priority_queue", "sql", "file")


class WriterCount(int):
    """The writer count :meth:`BufferWriter.acquire` / :meth:`~BufferWriter.release` return:
    an ``int`` that can also be awaited.

    Trinity-RFT 0.6 declares both methods ``async`` (``await writer.acquire()``) while code
    written for this package calls them plainly; the work is done when the method is called,
    and ``n = writer.acquire()`` and ``n = await writer.acquire()`` give the same count.
    It is also a finished coroutine (``send`` / ``throw`` / ``close``), so code that runs the
    0.6 coroutine itself (``asyncio.run(writer.release())``) gets the count too.
    """

    def __await__(self) -> Generator[Any, None, int]:
        return _ready(int(self)).__await__()

    # the coroutine protocol (collections.abc.Coroutine): done at once, with the count
    def send(self, value: Any) -> Any:
        raise StopIteration(int(self))

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        raise typ if val is None else val

    def close(self) -> None:
        return None


async def _ready(value: int) -> int:
    return value


def _counted(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a subclass's plain ``acquire`` / ``release`` so its int result is a
    :class:`WriterCount`; an ``async def`` one (a writer written for Trinity-RFT 0.6) is
    awaitable already and stays as it is."""
    if inspect.iscoroutinefunction(method) or getattr(method, "_trinity_counted", False):
        return method

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        if isinstance(result, int) and not isinstance(result, (bool, WriterCount)):
            return WriterCount(result)
        return result

    wrapper._trinity_counted = True  # type: ignore[attr-defined]
    return wrapper


class BufferWriter(ABC):
    """Writes batches of experiences into one storage.

    A write is all-or-nothing where the storage allows it (one SQL transaction, one locked
    append of complete lines, one renamed parquet part): a crash never leaves half a batch for
    a reader to trip over.

    ``acquire()`` / ``release()`` may be called plainly or awaited (their counts are
    :class:`WriterCount`, also for subclasses that override them); async code that must not
    block its event loop (a Ray queue's count lives in an actor) awaits
    :meth:`acquire_async` / :meth:`release_async`.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("acquire", "release"):
            if name in vars(cls):
                setattr(cls, name, _counted(vars(cls)[name]))

    @abstractmethod
    def write(self, exps: Sequence[Experience]) -> None:
        """Write ``exps``; blocks while a bounded queue is at capacity."""

    async def write_async(self, exps: Sequence[Experience]) -> None:
        """Asynchronous :meth:`write`; by default the blocking write runs in a worker thread
        so that an event loop (an explorer runner) keeps serving other coroutines."""
        await asyncio.get_running_loop().run_in_executor(None, self.write, list(exps))

    def end_step(self) -> None:
        """Mark the end of one explore step's experiences (see
        :meth:`trinity.buffer.storage.queue.ExperienceQueue.end_step`). Storages that are not
        read while they are written (files, SQL tables read by a later run) ignore it."""
        return None

    async def end_step_async(self) -> None:
        """Asynchronous :meth:`end_step`."""
        self.end_step()

    def flush(self) -> None:
        """Let the reader take whatever was written so far, even less than a batch: the
        writer is about to wait for the reader. A no-op where reads never wait for a batch."""
        return None

    async def flush_async(self) -> None:
        """Asynchronous :meth:`flush`."""
        self.flush()

    def position(self) -> Any:
        """Where the storage ends now (JSON-able), for :meth:`truncate`; ``None`` where a
        storage cannot be cut back (a live queue: its reader has taken what it holds)."""
        return None

    def truncate(self, position: Any) -> int:
        """Remove what was written after :meth:`position` returned ``position``; returns how
        many experiences went. A resumed explorer calls this so that the rows of a step it
        was killed in (written, but not recorded as done) are not there twice."""
        raise NotImplementedError(f"{type(self).__name__} cannot be cut back to a position")

    def acquire(self) -> int:
        """Register this writer as a live producer; returns the storage's writer count
        (a :class:`WriterCount`: awaiting it, as Trinity-RFT 0.6 code does, gives the same)."""
        return WriterCount(1)

    def release(self) -> int:
        """Unregister this writer; returns how many writers remain. When none remain a queue
        ends its stream. Subclasses also close files or connections here."""
        return WriterCount(0)

    async def acquire_async(self) -> int:
        """:meth:`acquire` off the event loop (it may wait on a Ray actor)."""
        return await _call_off_loop(self.acquire)

    async def release_async(self) -> int:
        """:meth:`release` off the event loop (it may wait on a Ray actor)."""
        return await _call_off_loop(self.release)

    def __enter__(self) -> BufferWriter:
        _finish_sync(self.acquire())
        return self

    def __exit__(self, *exc: Any) -> None:
        _finish_sync(self.release())


async def _call_off_loop(method: Callable[[], Any]) -> int:
    """Run a writer's ``acquire``/``release`` in a worker thread (an ``async def`` one, from a
    writer written for Trinity-RFT 0.6, is awaited here instead) and return its count."""
    if inspect.iscoroutinefunction(method):
        return int(await method())
    result = await asyncio.get_running_loop().run_in_executor(None, method)
    if inspect.isawaitable(result) and not isinstance(result, WriterCount):
        result = await result
    return int(result)


def _finish_sync(result: Any) -> Any:
    """The value of a writer method called from sync code, running it to completion when it
    is a coroutine (an ``async def acquire`` of a writer written for Trinity-RFT 0.6)."""
    if inspect.iscoroutine(result):
        from trinity.utils.aio import run_sync

        return run_sync(result)
    return result


class EndOfStream(Exception):
    """Internal signal "the source is exhausted".

    ``StopIteration`` cannot cross a thread-pool future or a coroutine boundary (Python turns
    it into ``RuntimeError``/``TypeError`` there), so storages raise this and the public
    ``read``/``read_async`` translate it into ``StopIteration``/``StopAsyncIteration``.
    """


class BufferReader(ABC):
    """Reads batches of experiences from one storage.

    Subclasses implement :meth:`_read` (blocking, raising :class:`EndOfStream` when exhausted)
    and may override :meth:`_read_async` with a native asynchronous version.
    """

    def __init__(self, storage_config: Any) -> None:
        self.config = storage_config
        self.name: str = getattr(storage_config, "name", "") or "<unnamed>"
        self.default_batch_size: int = int(getattr(storage_config, "batch_size", 0) or 0)

    def _batch_size(self, batch_size: Optional[int]) -> int:
        """``None`` means the configured batch size (``buffer.train_batch_size``), as the
        ``ExperienceReader`` protocol says; a reader without one must be told explicitly."""
        size = self.default_batch_size if batch_size is None else int(batch_size)
        if size <= 0:
            raise StorageConfigError(
                f"storage {self.name!r}: no batch size — pass read(batch_size=...) or set "
                f"`batch_size` in the storage config (got {size})"
            )
        return size

    @abstractmethod
    def _read(self, batch_size: int) -> list[Experience]:
        """Blocking read of at most ``batch_size`` experiences; raises :class:`EndOfStream`."""

    async def _read_async(self, batch_size: int) -> list[Experience]:
        """Default: run the blocking read in a worker thread (fine for short SQL/file reads)."""
        return await asyncio.get_running_loop().run_in_executor(None, self._read, batch_size)

    def read(self, batch_size: Optional[int] = None) -> list[Experience]:
        """Read one batch; raises ``StopIteration`` when the storage is exhausted."""
        size = self._batch_size(batch_size)
        try:
            return self._read(size)
        except EndOfStream:
            raise StopIteration(f"storage {self.name!r} is exhausted") from None

    async def read_async(self, batch_size: Optional[int] = None) -> list[Experience]:
        """Read one batch; raises ``StopAsyncIteration`` when the storage is exhausted."""
        size = self._batch_size(batch_size)
        try:
            return await self._read_async(size)
        except EndOfStream:
            raise StopAsyncIteration(f"storage {self.name!r} is exhausted") from None

    def state_dict(self) -> dict[str, Any]:
        """The read position (JSON-able); a live queue has none worth saving."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a position saved by :meth:`state_dict` (no-op for a live queue)."""
        return None

    def __iter__(self) -> BufferReader:
        return self

    def __next__(self) -> list[Experience]:
        return self.read()


class OfflineReader(BufferReader):
    """A reader of a finite, ordered source (a SQL table, a file) read for ``total_epochs``.

    Batches span epoch boundaries (the last batch of epoch 1 is topped up from the start of
    epoch 2), so every batch is full except the very last one, as the protocol requires.
    Subclasses implement :meth:`_fetch` from an opaque position and :meth:`_start_position`.
    """

    def __init__(self, storage_config: Any) -> None:
        super().__init__(storage_config)
        self.total_epochs: int = max(1, int(getattr(storage_config, "total_epochs", 1) or 1))
        self.epoch = 0
        self.position: Any = self._start_position()
        self.consumed = 0  # experiences handed out in the current epoch

    @abstractmethod
    def _start_position(self) -> Any:
        """The position of the first record."""

    @abstractmethod
    def _fetch(self, position: Any, limit: int) -> tuple[list[Experience], Any]:
        """Up to ``limit`` committed records after ``position``, and the position after them.
        Returning fewer than ``limit`` means the source has no more (for now)."""

    def _read(self, batch_size: int) -> list[Experience]:
        out: list[Experience] = []
        while len(out) < batch_size:
            exps, self.position = self._fetch(self.position, batch_size - len(out))
            out.extend(exps)
            self.consumed += len(exps)
            if len(out) >= batch_size:
                break
            # the source ran dry: next epoch, unless this one was empty or the last one
            if self.epoch + 1 >= self.total_epochs or (self.consumed == 0 and not exps):
                break
            self.epoch += 1
            self.position = self._start_position()
            self.consumed = 0
        if not out:
            raise EndOfStream
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "consumed": self.consumed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epoch = int(state_dict.get("epoch", 0))
        self.position = state_dict.get("position", self._start_position())
        self.consumed = int(state_dict.get("consumed", 0))
