"""Experience writers by storage type, the twin of :mod:`trinity.buffer.reader`.

:data:`WRITER` maps ``storage_type`` names to the writer classes
:func:`trinity.buffer.buffer_writer.get_buffer_writer` builds (``queue`` and
``priority_queue``: :class:`~trinity.buffer.storage.queue.QueueWriter`; ``sql``:
:class:`~trinity.buffer.storage.sql.SQLWriter`; ``file``:
:class:`~trinity.buffer.storage.file.FileWriter`). Every one is a
:class:`~trinity.buffer.buffer_writer.BufferWriter`.

The registry object is core's :data:`trinity.common.storage.WRITER`; the built-ins reach it
through this package's ``trinity.buffer_writer`` entry points, and this module registers them
too. Importing this module imports the storages; ``get_buffer_writer`` stays lazy.
"""

from __future__ import annotations

from trinity.buffer.storage.file import FileWriter
from trinity.buffer.storage.queue import QueueWriter
from trinity.buffer.storage.sql import SQLWriter
from trinity.common.storage import WRITER

__all__ = ["WRITER"]

WRITER.register_module("queue", QueueWriter)
WRITER.register_module("priority_queue", QueueWriter)
WRITER.register_module("sql", SQLWriter)
WRITER.register_module("file", FileWriter)
