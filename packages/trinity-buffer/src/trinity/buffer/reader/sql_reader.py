"""Trinity-RFT's module path for the ``sql`` storage's reader (``trinity.buffer.reader.sql_reader``).

The class is :class:`trinity.buffer.storage.sql.SQLReader`; code written for Trinity-RFT imports it
from here (``SQLReader(storage_config)`` builds it the same way).
"""

from trinity.buffer.storage.sql import SQLReader

__all__ = ["SQLReader"]
