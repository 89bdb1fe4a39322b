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

import inspect
from collections.abc import Mapping
from typing import Any, Optional, Union

# The base and the storage types live in ``trinity.buffer.base`` (below the storages);
# re-exported here so that ``from trinity.buffer.buffer_writer import BufferWriter`` works.
from trinity.buffer.base import STORAGE_TYPES, BufferWriter
from trinity.common.config import StorageConfig, did_you_mean
from trinity.common.storage import READER, WRITER, storage_type_names
from trinity.utils.registry import Registry, UnknownModuleError

__all__ = ["BufferWriter", "get_buffer_writer", "resolve_storage_config", "STORAGE_TYPES"]


def _storage_type(storage_config: Any) -> str:
    """``storage_config.storage_type`` as a registered name: case-insensitive (a plugin's
    ``"MyStorage"`` may be written ``mystorage``), an enum of another config layer by value."""
    storage_type = getattr(storage_config, "storage_type", None)
    if not isinstance(storage_type, str):  # an enum from another config layer
        storage_type = str(getattr(storage_type, "value", storage_type))
    text = storage_type.strip()
    for name in storage_type_names():
        if name.lower() == text.lower():
            return name
    return text.lower()


def resolve_storage_config(storage_config: Union[StorageConfig, Mapping[str, Any], Any]) -> Any:
    """Validate ``storage_config`` before a reader or writer is built.

    Accepts a :class:`StorageConfig` (or subclass), a mapping (validated by pydantic, whose error
    names the bad field) or any object with the same attributes. Raises
    :class:`~trinity.buffer.storage.errors.StorageConfigError` naming ``storage_type`` when no
    reader or writer is registered under it, instead of failing later with an unrelated error
    (a storage's own constructor names what else it misses, e.g. ``path``).
    """
    from trinity.buffer.storage.errors import StorageConfigError

    if isinstance(storage_config, Mapping):
        storage_config = StorageConfig.model_validate(dict(storage_config))
    name = getattr(storage_config, "name", "") or "<unnamed>"
    storage_type = _storage_type(storage_config)
    if storage_type not in READER and storage_type not in WRITER:
        known = storage_type_names()
        raise StorageConfigError(
            f"storage {name!r}: unknown storage_type {storage_type!r}; "
            f"expected one of {', '.join(known)}{did_you_mean(storage_type, known)}"
        )
    batch_size = getattr(storage_config, "batch_size", 0)
    if batch_size is not None and batch_size < 0:
        raise StorageConfigError(f"storage {name!r}: batch_size must be >= 0, got {batch_size}")
    return storage_config


def _keyword_parameters(cls: type) -> set[str]:
    """The parameters ``cls(config, ...)`` names after the config (not ``**kwargs``)."""
    try:
        params = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):  # no signature to read: give it the config only
        return set()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name for p in params[1:] if p.kind in kinds}


def build_storage(
    registry: Registry, storage_config: Any, *, use_ray: Optional[bool] = None, **options: Any
) -> Any:
    """Build ``registry[storage_type](config, ...)``: the class the registry holds for the
    config's ``storage_type`` (:data:`trinity.common.storage.READER` or ``WRITER``; built-ins
    and plugins alike), with the options its constructor names.

    A storage class takes the ``StorageConfig`` first. A class that also names ``queue`` (the
    built-in queue reader and writer, and their subclasses) is a queue storage: it gets the
    shared Ray actor queue when Ray is used (``use_ray``, see :func:`get_buffer_writer`) and
    this process's queue of that name otherwise
    (:func:`trinity.buffer.storage.queue.open_queue`). A class that names ``use_ray`` (the SQL
    reader and writer) gets ``use_ray`` and makes the same choice itself
    (:func:`trinity.buffer.storage.sql.open_sql_storage`). Any other keyword in ``options``
    (``write_timeout``) goes to the classes that name it; a plugin class taking only
    ``(config)`` gets none.
    """
    from trinity.buffer.storage.errors import StorageConfigError

    config = resolve_storage_config(storage_config)
    storage_type = _storage_type(config)
    role = "reader" if registry is READER else "writer"
    try:
        cls = registry[storage_type]
    except UnknownModuleError:
        name = getattr(config, "name", "") or "<unnamed>"
        raise StorageConfigError(
            f"storage {name!r}: storage_type {storage_type!r} has no {role}; "
            f"{role}s are registered for {', '.join(registry.list()) or 'nothing'}"
        ) from None
    accepted = _keyword_parameters(cls)
    kwargs = {key: value for key, value in options.items() if key in accepted}
    if "queue" in accepted:
        # the one decision between the Ray actor and this process's queue, which a reader or
        # writer built directly from the config makes the same way
        from trinity.buffer.storage.queue import open_queue

        kwargs["queue"] = open_queue(config, use_ray)
    elif "use_ray" in accepted:
        kwargs["use_ray"] = use_ray
    return cls(config, **kwargs)


def get_buffer_writer(
    storage_config: Union[StorageConfig, Mapping[str, Any]],
    *,
    use_ray: Optional[bool] = None,
    write_timeout: Optional[float] = None,
) -> BufferWriter:
    """Build the writer of ``storage_config.storage_type``: the class
    :data:`trinity.common.storage.WRITER` holds for it (see :func:`build_storage`).

    Args:
        storage_config: the storage to write (``name`` is what a reader uses to meet a writer
            on a queue).
        use_ray: queue and SQL storages — ``True`` for the storage's named Ray actor,
            ``False`` for this process (the in-process queue; the database opened here),
            ``None`` (default) to use Ray when it is initialized and ``wrap_in_ray`` is set.
        write_timeout: queue storages only — seconds a write may wait for room before raising
            :class:`~trinity.buffer.storage.errors.QueueWriteTimeout`; ``None`` waits.
    """
    return build_storage(WRITER, storage_config, use_ray=use_ray, write_timeout=write_timeout)
