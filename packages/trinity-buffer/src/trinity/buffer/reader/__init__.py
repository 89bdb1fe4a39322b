"""Experience readers by storage type (Trinity-RFT's ``trinity.buffer.reader``).

:data:`READER` maps ``storage_type`` names to the reader classes
:func:`trinity.buffer.buffer_reader.get_buffer_reader` builds (``queue`` and
``priority_queue``: :class:`~trinity.buffer.storage.queue.QueueReader`; ``sql``:
:class:`~trinity.buffer.storage.sql.SQLReader`; ``file``:
:class:`~trinity.buffer.storage.file.FileReader`). Every one is a
:class:`~trinity.buffer.buffer_reader.BufferReader`.

The registry object is core's :data:`trinity.common.storage.READER` (so the config schema can
accept the ``storage_type`` names registered in it without importing this package); the
built-ins reach it through this package's ``trinity.buffer_reader`` entry points, and this
module registers them too. A plugin registers its own reader here (with its writer in
:data:`trinity.buffer.writer.WRITER`). Importing this module imports the storages (SQLAlchemy,
pyarrow); ``get_buffer_reader`` stays lazy.
"""

from __future__ import annotations

from trinity.buffer.storage.file import FileReader
from trinity.buffer.storage.queue import QueueReader
from trinity.buffer.storage.sql import SQLReader
from trinity.common.storage import READER  # core's registry: the same object

__all__ = ["READER"]

READER.register_module("queue", QueueReader)
READER.register_module("priority_queue", QueueReader)
READER.register_module("sql", SQLReader)
READER.register_module("file", FileReader)
