"""Trinity-RFT's module path for the ``file`` storage's reader (``trinity.buffer.reader.file_reader``).

The class is :class:`trinity.buffer.storage.file.FileReader`; code written for Trinity-RFT imports it
from here (``FileReader(storage_config)`` builds it the same way).
"""

from trinity.buffer.storage.file import FileReader

__all__ = ["FileReader"]
