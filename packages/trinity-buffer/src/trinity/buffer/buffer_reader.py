"""Readers of experience storages, and the factory that picks one from a ``StorageConfig``.

Every reader satisfies :class:`trinity.common.protocols.ExperienceReader` (what the trainer's
sample strategies consume): ``read(batch_size=None)`` returns one batch, ``read_async`` is its
asynchronous twin, and an exhausted source raises ``StopIteration`` / ``StopAsyncIteration``.
Offline readers (SQL, file) also satisfy ``StatefulReader`` so a resumed run continues where
the checkpoint left off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional, Union

# The bases live in ``trinity.buffer.base`` (below the storages); re-exported here so that
# ``from trinity.buffer.buffer_reader import BufferReader, OfflineReader, EndOfStream`` works.
from trinity.buffer.base import BufferReader, EndOfStream, OfflineReader
from trinity.buffer.buffer_writer import _use_ray, resolve_storage_config
from trinity.common.config import StorageConfig

__all__ = ["BufferReader", "OfflineReader", "EndOfStream", "get_buffer_reader"]


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
