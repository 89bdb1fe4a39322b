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
from trinity.buffer.buffer_writer import build_storage, resolve_storage_config
from trinity.common.config import StorageConfig, TasksetConfig
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
        use_ray: queue and SQL storages — ``True`` for the storage's named Ray actor,
            ``False`` for this process (the in-process queue; the database opened here),
            ``None`` (default) to use Ray when it is initialized and ``wrap_in_ray`` is set.
    """
    if _is_task_file(storage_config):
        from trinity.buffer.reader.file_reader import TaskFileReader

        return TaskFileReader(resolve_storage_config(storage_config))
    return build_storage(READER, storage_config, use_ray=use_ray)


def _is_task_file(storage_config: Any) -> bool:
    """A task set stored as a file (Trinity-RFT 0.6 reads its rows as tasks through the
    ``file`` reader): a ``TasksetConfig``, or a storage naming the ``task`` schema or, with no
    schema, a default workflow (the rule the SQL reader uses for a new table), whose
    ``storage_type`` is ``file`` and whose ``file`` reader is still the built-in one."""
    if isinstance(storage_config, Mapping):
        return False
    storage_type = getattr(storage_config, "storage_type", None)
    if str(getattr(storage_type, "value", storage_type)) != "file":
        return False
    from trinity.buffer.storage.file import FileReader

    if READER.get("file") is not FileReader:  # a plugin replaced the file reader: its call
        return False
    schema = getattr(storage_config, "schema_type", None)
    if isinstance(storage_config, TasksetConfig) or schema == "task":
        return True
    return schema is None and bool(getattr(storage_config, "default_workflow_type", None))
