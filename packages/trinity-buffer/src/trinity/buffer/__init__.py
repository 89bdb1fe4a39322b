"""trinity.buffer: where experiences and tasks live between explorer and trainer.

* storages (``storage_type`` queue, priority_queue, sql, file) behind one reader/writer
  interface: :func:`get_buffer_reader` / :func:`get_buffer_writer`; readers satisfy core's
  ``trinity.common.protocols.ExperienceReader`` so the algorithms' sample strategies consume them;
* task sets (:func:`get_taskset_reader`) read with HF ``datasets``, with selectors and resumable
  positions; formatters turn SFT / DPO data sets into Experiences;
* operators (``trinity.buffer.operators``) and pipelines (``trinity.buffer.pipelines``).
"""

from trinity.buffer.buffer_reader import BufferReader, get_buffer_reader
from trinity.buffer.buffer_writer import BufferWriter, get_buffer_writer
from trinity.buffer.taskset import get_taskset_reader

__version__ = "0.1.0"

__all__ = [
    "BufferReader",
    "BufferWriter",
    "get_buffer_reader",
    "get_buffer_writer",
    "get_taskset_reader",
]
