"""trinity.buffer: where experiences and tasks live between explorer and trainer.

* storages (``storage_type`` queue, priority_queue, sql, file) behind one reader/writer
  interface: :func:`get_buffer_reader` / :func:`get_buffer_writer`; readers satisfy core's
  ``trinity.common.protocols.ExperienceReader`` so the algorithms' sample strategies consume them;
* task sets (:func:`get_taskset_reader`) read with HF ``datasets``, with selectors and resumable
  positions; formatters turn SFT / DPO data sets into Experiences;
* operators (``trinity.buffer.operators``) and pipelines (``trinity.buffer.pipelines``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trinity.common.storage import set_reader_factory
from trinity.utils.lazy import lazy_exports

if TYPE_CHECKING:  # what the lazy names are, for type checkers (redundant aliases: re-exports)
    from trinity.buffer.buffer_reader import BufferReader as BufferReader
    from trinity.buffer.buffer_reader import get_buffer_reader as get_buffer_reader
    from trinity.buffer.buffer_writer import BufferWriter as BufferWriter
    from trinity.buffer.buffer_writer import get_buffer_writer as get_buffer_writer
    from trinity.buffer.taskset import get_taskset_reader as get_taskset_reader

__version__ = "0.1.0"

# Names resolve on first use (PEP 562): a process that needs one storage -- the queue's Ray
# actor above all -- does not import torch, HF datasets and every storage with the package.
_LAZY = {
    "BufferReader": "trinity.buffer.buffer_reader",
    "get_buffer_reader": "trinity.buffer.buffer_reader",
    "BufferWriter": "trinity.buffer.buffer_writer",
    "get_buffer_writer": "trinity.buffer.buffer_writer",
    "get_taskset_reader": "trinity.buffer.taskset",
}


# also sets __all__ to the table's names: a public name is exactly one listed above
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


def _build_reader(storage_config: Any) -> Any:
    """``get_buffer_reader`` (imported when first used: it imports the storages)."""
    from trinity.buffer.buffer_reader import get_buffer_reader

    return get_buffer_reader(storage_config)


# Importing any storage imports this package first, so a reader looked up through core's
# READER registry (``trinity.common.storage.build_reader``, what the sample strategies' Trinity-RFT
# constructor uses) is built by the buffer's own factory, which wires Ray queues.
set_reader_factory(_build_reader)
