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

from trinity.utils.registry import Registry

__all__ = ["BUILTIN_STORAGE_TYPES", "READER", "WRITER", "storage_type_names"]

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
