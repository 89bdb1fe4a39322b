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
from trinity.buffer.buffer_writer import build_storage
from trinity.common.config import StorageConfig
from trinity.common.storage import READER

__all__ = ["BufferReader", "OfflineReader", "EndOfStream", "get_buffer_reader"]


def get_buffer_reader(
    storage_config: Union[StorageConfig, Mapping[str, Any]],
    *,
    use_ray: Optional[bool] = None,
) -> BufferReader:
    """Build the reader of ``storage_config.storage_type``: the class
    :data:`trinity.common.storage.READER` holds for it (the built-ins, or a plugin's; see
    :func:`trinity.buffer.buffer_writer.build_storage`).

    Args:
        storage_config: the storage to read; a queue reader meets the writers that use the
            same ``name`` (and, with Ray, the same ``ray_namespace``).
        use_ray: queue storages only — ``True`` for the Ray actor queue, ``False`` for the
            in-process queue, ``None`` (default) to use Ray when it is initialized and
            ``wrap_in_ray`` is set.
    """
    return build_storage(READER, storage_config, use_ray=use_ray)
