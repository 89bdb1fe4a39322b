"""Trinity-RFT's module path for the ``file`` storage's writer (``trinity.buffer.writer.file_writer``).

The class is :class:`trinity.buffer.storage.file.FileWriter`; Trinity-RFT calls its JSONL writer
``JSONWriter``, the same class here (it writes JSONL, or parquet for a ``.parquet`` path).
"""

from trinity.buffer.storage.file import FileWriter

JSONWriter = FileWriter

__all__ = ["FileWriter", "JSONWriter"]
