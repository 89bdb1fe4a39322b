"""Experience readers by storage type (Trinity-RFT's ``trinity.buffer.reader``).

:data:`READER` maps ``storage_type`` names to the reader classes
:func:`trinity.buffer.buffer_reader.get_buffer_reader` builds (``queue`` and
``priority_queue``: :class:`~trinity.buffer.storage.queue.QueueReader`; ``sql``:
:class:`~trinity.buffer.storage.sql.SQLReader`; ``file``:
:class:`~trinity.buffer.storage.file.FileReader`). Every one is a
:class:`~trinity.buffer.buffer_reader.BufferReader`. Importing this module imports the
storages (SQLAlchemy, pyarrow); ``get_buffer_reader`` stays lazy.
"""

from __future__ import annotations

from trinity.buffer.buffer_reader import BufferReader
from trinity.buffer.storage.file import FileReader
from trinity.buffer.storage.queue import QueueReader
from trinity.buffer.storage.sql import SQLReader
from trinity.utils.registry import Registry

__all__ = ["READER"]

#: Reader class per ``storage_type``.
READER: Registry[type[BufferReader]] = Registry("buffer_reader")
READER.register_module("queue", QueueReader)
READER.register_module("priority_queue", QueueReader)
READER.register_module("sql", SQLReader)
READER.register_module("file", FileReader)
