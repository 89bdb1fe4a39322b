"""Trinity-RFT's module path for the ``queue`` storage's writer (``trinity.buffer.writer.queue_writer``).

The class is :class:`trinity.buffer.storage.queue.QueueWriter`; code written for Trinity-RFT imports it
from here (``QueueWriter(storage_config)`` builds it the same way).
"""

from trinity.buffer.storage.queue import QueueWriter

__all__ = ["QueueWriter"]
