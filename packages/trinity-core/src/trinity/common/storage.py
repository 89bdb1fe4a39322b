"""Experience-storage registries: the readers and writers behind ``storage_type``.

* :data:`READER` / :data:`WRITER`: the reader and writer class of each ``storage_type``
  (Trinity-RFT's ``trinity.buffer.reader.READER``; ``trinity.buffer.reader`` re-exports the same
  object). The built-in storages (``queue``, ``priority_queue``, ``sql``, ``file``) ship with
  ``trinity-buffer`` and are advertised through the entry-point groups ``trinity.buffer_reader``
  and ``trinity.buffer_writer``, so this core module imports no sibling package, and
  ``trinity.buffer``'s ``get_buffer_reader`` / ``get_buffer_writer`` build whatever class the
  registry holds.
* A plugin adds a storage with ``@READER.register_module("my_storage")`` on a
  :class:`~trinity.buffer.base.BufferReader` subclass and ``@WRITER.register_module("my_storage")``
  on a :class:`~trinity.buffer.base.BufferWriter` subclass; both are built as ``cls(config)``
  (a ``StorageConfig``). The config schema accepts :data:`BUILTIN_STORAGE_TYPES` and every
  name registered in either registry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from trinity.utils.registry import Registry

__all__ = [
    "BUILTIN_STORAGE_TYPES",
    "READER",
    "WRITER",
    "build_reader",
    "set_reader_factory",
    "storage_type_names",
]

#: Reader class per ``storage_type`` (entry-point group ``trinity.buffer_reader``).
READER: Registry[type] = Registry("buffer_reader")
#: Writer class per ``storage_type`` (entry-point group ``trinity.buffer_writer``).
WRITER: Registry[type] = Registry("buffer_writer")

#: The storages ``trinity-buffer`` ships: configs naming them validate even where the buffer
#: is not installed (``trinity-core`` alone checking a Trinity-RFT config).
BUILTIN_STORAGE_TYPES: tuple[str, ...] = ("file", "queue", "priority_queue", "sql")


def storage_type_names() -> list[str]:
    """Every ``storage_type`` a config may name: the built-ins, then the other names a reader
    or a writer is registered (or advertised) under, sorted."""
    extra = (set(READER.list()) | set(WRITER.list())) - set(BUILTIN_STORAGE_TYPES)
    return [*BUILTIN_STORAGE_TYPES, *sorted(extra)]


#: The storage package's reader factory (``trinity.buffer``'s ``get_buffer_reader``), installed
#: when that package's storages are imported; ``None`` where only core is installed.
_reader_factory: Optional[Callable[[Any], Any]] = None


def set_reader_factory(factory: Optional[Callable[[Any], Any]]) -> None:
    """Install the function :func:`build_reader` builds readers with (the buffer does this
    when its storages are imported: its factory also wires Ray queues, which a bare
    ``READER[storage_type](config)`` does not)."""
    global _reader_factory
    _reader_factory = factory


def build_reader(storage_config: Any) -> Any:
    """The reader of ``storage_config``, as ``trinity.buffer.get_buffer_reader`` builds it.

    For packages that may not import the buffer (the sample strategies, built from a
    Trinity-RFT ``BufferConfig``): looking up the storage type loads the storage's package,
    which installs its factory; without one, the registered class is built as ``cls(config)``.
    """
    storage_type = getattr(storage_config, "storage_type", None)
    storage_type = str(getattr(storage_type, "value", storage_type)).lower()
    cls = READER[storage_type]
    if _reader_factory is not None:
        return _reader_factory(storage_config)
    return cls(storage_config)
