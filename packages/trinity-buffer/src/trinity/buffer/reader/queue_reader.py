"""Trinity-RFT's module path for the ``queue`` storage's reader (``trinity.buffer.reader.queue_reader``).

The class is :class:`trinity.buffer.storage.queue.QueueReader`; code written for Trinity-RFT imports it
from here (``QueueReader(storage_config)`` builds it the same way).
"""

from trinity.buffer.storage.queue import QueueReader

__all__ = ["QueueReader"]
