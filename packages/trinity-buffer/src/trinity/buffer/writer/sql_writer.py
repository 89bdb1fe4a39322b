"""Trinity-RFT's module path for the ``sql`` storage's writer (``trinity.buffer.writer.sql_writer``).

The class is :class:`trinity.buffer.storage.sql.SQLWriter`; code written for Trinity-RFT imports it
from here (``SQLWriter(storage_config)`` builds it the same way).
"""

from trinity.buffer.storage.sql import SQLWriter

__all__ = ["SQLWriter"]
