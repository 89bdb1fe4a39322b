"""Trinity-RFT's module path for the ``file`` storage's readers (``trinity.buffer.reader.file_reader``).

:class:`FileReader` is :class:`trinity.buffer.storage.file.FileReader` (experiences); code
written for Trinity-RFT imports it from here (``FileReader(storage_config)`` builds it the same
way). :class:`TaskFileReader` reads a task set (Trinity-RFT 0.6's name): it is the task set
reader (:class:`~trinity.buffer.taskset.TasksetReader`) and also a ``FileReader``, which is
what ``get_buffer_reader`` returns for a task set stored as a file, as Trinity-RFT's
``FileReader`` reads task rows when the storage has no experience schema.
"""

from __future__ import annotations

from typing import Any, Optional

from trinity.buffer.storage.file import FileReader
from trinity.buffer.taskset.loading import TasksetData
from trinity.buffer.taskset.reader import TasksetReader

__all__ = ["FileReader", "TaskFileReader"]


class TaskFileReader(TasksetReader, FileReader):
    """A task set file read in batches of :class:`~trinity.common.workflows.Task`.

    Everything is :class:`TasksetReader`'s (selectors, epochs, ``index`` offset, ``read`` /
    ``read_async``, state); the ``FileReader`` base only makes ``isinstance(reader,
    FileReader)`` hold, as it does for Trinity-RFT's readers of the ``file`` storage type.
    """

    def __init__(
        self, config: Any, taskset_id: int = 0, data: Optional[TasksetData] = None
    ) -> None:
        TasksetReader.__init__(self, config, taskset_id=taskset_id, data=data)

    def close(self) -> None:
        """Nothing to release: the rows are in memory."""
