"""Writers of experience storages, and the factory that picks one from a ``StorageConfig``.

Explorers, experience pipelines and tests all write through :class:`BufferWriter`, whatever the
storage (a live queue, a SQL table, a file): the storage is a deployment choice in the YAML, not
something the producing code should branch on.

Life cycle: a producer calls :meth:`BufferWriter.acquire` once before its first write and
:meth:`BufferWriter.release` when it is done. For a queue this reference count is what ends the
stream: when every acquired writer has released, readers drain what is left and then get
``StopIteration`` instead of waiting for data that will never come.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional, Union

# The base and the storage types live in ``trinity.buffer.base`` (below the storages);
# re-exported here so that ``from trinity.buffer.buffer_writer import BufferWriter`` works.
from trinity.buffer.base import STORAGE_TYPES, BufferWriter
from trinity.common.config import StorageConfig

__all__ = ["BufferWriter", "get_buffer_writer", "resolve_storage_config", "STORAGE_TYPES"]


def resolve_storage_config(storage_config: Union[StorageConfig, Mapping[str, Any], Any]) -> Any:
    """Validate ``storage_config`` before a reader or writer is built.

    Accepts a :class:`StorageConfig` (or subclass), a mapping (validated by pydantic, whose error
    names the bad field) or any object with the same attributes. Raises
    :class:`~trinity.buffer.storage.errors.StorageConfigError` naming ``storage_type`` or
    ``path`` when the storage cannot work, instead of failing later with an unrelated error.
    """
    from trinity.buffer.storage.errors import StorageConfigError

    if isinstance(storage_config, Mapping):
        storage_config = StorageConfig.model_validate(dict(storage_config))
    name = getattr(storage_config, "name", "") or "<unnamed>"
    storage_type = getattr(storage_config, "storage_type", None)
    if isinstance(storage_type, str):
        storage_type = storage_type.strip().lower()
    else:  # an enum from another config layer
        storage_type = str(getattr(storage_type, "value", storage_type)).lower()
    if storage_type not in STORAGE_TYPES:
        raise StorageConfigError(
            f"storage {name!r}: unknown storage_type {storage_type!r}; "
            f"expected one of {', '.join(STORAGE_TYPES)}"
        )
    if storage_type in ("sql", "file") and not getattr(storage_config, "path", None):
        raise StorageConfigError(
            f"storage {name!r}: storage_type {storage_type!r} needs `path` "
            + (
                "(a database URL such as 'sqlite:///buffer.db' / 'postgresql://...', "
                "or a SQLite file path)"
                if storage_type == "sql"
                else "(a .jsonl file, a .parquet dataset directory or a directory)"
            )
        )
    batch_size = getattr(storage_config, "batch_size", 0)
    if batch_size is not None and batch_size < 0:
        raise StorageConfigError(f"storage {name!r}: batch_size must be >= 0, got {batch_size}")
    return storage_config


def _use_ray(storage_config: Any, use_ray: Optional[bool]) -> bool:
    """Whether a queue should live in a Ray actor: when asked, or when Ray is up and the config
    allows it (``wrap_in_ray``, True by default) — the explorer and trainer then run in
    different processes and only an actor is visible to both."""
    if use_ray is not None:
        return use_ray
    if not getattr(storage_config, "wrap_in_ray", True):
        return False
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a dependency
        return False
    return ray.is_initialized()


def get_buffer_writer(
    storage_config: Union[StorageConfig, Mapping[str, Any]],
    *,
    use_ray: Optional[bool] = None,
    write_timeout: Optional[float] = None,
) -> BufferWriter:
    """Build the writer for ``storage_config.storage_type``.

    Args:
        storage_config: the storage to write (``name`` is what a reader uses to meet a writer
            on a queue).
        use_ray: queue storages only — ``True`` for the Ray actor queue, ``False`` for the
            in-process queue, ``None`` (default) to use Ray when it is initialized and
            ``wrap_in_ray`` is set.
        write_timeout: queue storages only — seconds a write may wait for room before raising
            :class:`~trinity.buffer.storage.errors.QueueWriteTimeout`; ``None`` waits.
    """
    config = resolve_storage_config(storage_config)
    storage_type = str(config.storage_type).lower()
    if storage_type in ("queue", "priority_queue"):
        from trinity.buffer.storage.queue import QueueWriter

        if _use_ray(config, use_ray):
            from trinity.buffer.storage.ray_queue import get_ray_queue

            return QueueWriter(config, queue=get_ray_queue(config), write_timeout=write_timeout)
        return QueueWriter(config, write_timeout=write_timeout)
    if storage_type == "sql":
        from trinity.buffer.storage.sql import SQLWriter

        return SQLWriter(config)
    from trinity.buffer.storage.file import FileWriter

    return FileWriter(config)
