"""Readers of experience storages, and the factory that picks one from a ``StorageConfig``.

Every reader satisfies :class:`trinity.common.protocols.ExperienceReader` (what the trainer's
sample strategies consume): ``read(batch_size=None)`` returns one batch, ``read_async`` is its
asynchronous twin, and an exhausted source raises ``StopIteration`` / ``StopAsyncIteration``.
Offline readers (SQL, file) also satisfy ``StatefulReader`` so a resumed run continues where
the checkpoint left off.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Optional, Union

from trinity.buffer.buffer_writer import _use_ray, resolve_storage_config
from trinity.buffer.storage.errors import StorageConfigError
from trinity.common.config import StorageConfig
from trinity.common.experience import Experience

__all__ = ["BufferReader", "OfflineReader", "EndOfStream", "get_buffer_reader"]


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


def get_buffer_reader(
    storage_config: Union[StorageConfig, Mapping[str, Any]],
    *,
    use_ray: Optional[bool] = None,
) -> BufferReader:
    """Build the reader for ``storage_config.storage_type``.

    Args:
        storage_config: the storage to read; a queue reader meets the writers that use the
            same ``name`` (and, with Ray, the same ``ray_namespace``).
        use_ray: queue storages only — ``True`` for the Ray actor queue, ``False`` for the
            in-process queue, ``None`` (default) to use Ray when it is initialized and
            ``wrap_in_ray`` is set.
    """
    config = resolve_storage_config(storage_config)
    storage_type = str(config.storage_type).lower()
    if storage_type in ("queue", "priority_queue"):
        from trinity.buffer.storage.queue import QueueReader

        if _use_ray(config, use_ray):
            from trinity.buffer.storage.ray_queue import get_ray_queue

            return QueueReader(config, queue=get_ray_queue(config))
        return QueueReader(config)
    if storage_type == "sql":
        from trinity.buffer.storage.sql import SQLReader

        return SQLReader(config)
    from trinity.buffer.storage.file import FileReader

    return FileReader(config)
