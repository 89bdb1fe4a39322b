"""Experience storages: bounded / priority queues (in-process or a Ray actor), SQL, files.

Readers and writers are normally built from a ``StorageConfig`` by
:func:`trinity.buffer.buffer_reader.get_buffer_reader` and
:func:`trinity.buffer.buffer_writer.get_buffer_writer`; this package holds the storages
themselves. Names resolve lazily so that importing, e.g., the queue does not import Ray,
SQLAlchemy and pyarrow.
"""

from __future__ import annotations

from trinity.buffer.errors import __all__ as _ERROR_NAMES  # exception classes only: cheap
from trinity.utils.lazy import lazy_exports

# Which module of this package holds each public name. lazy_exports also makes the names, in
# this order, the package's ``__all__``.
_MODULES = {
    "errors": tuple(_ERROR_NAMES),
    "queue": (
        "PRIORITY_FN",
        "PRIORITY_FUNC",
        "PriorityFunction",
        "ExperienceQueue",
        "PriorityReplayQueue",
        "QueueReader",
        "QueueWriter",
        "get_queue",
        "remove_queue",
        "clear_queues",
    ),
    "ray_queue": ("RayQueueClient", "get_ray_queue", "kill_ray_queue"),
    "sql": ("SQLStorage", "SQLReader", "SQLWriter"),
    "file": ("FileReader", "FileWriter", "JsonlFile", "ParquetDataset"),
}
__getattr__, __dir__ = lazy_exports(
    __name__,
    {name: f"{__name__}.{module}" for module, names in _MODULES.items() for name in names},
)
