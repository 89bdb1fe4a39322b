"""Experience storages: bounded / priority queues (in-process or a Ray actor), SQL, files.

Readers and writers are normally built from a ``StorageConfig`` by
:func:`trinity.buffer.buffer_reader.get_buffer_reader` and
:func:`trinity.buffer.buffer_writer.get_buffer_writer`; this package holds the storages
themselves. Names resolve lazily so that importing, e.g., the queue does not import Ray,
SQLAlchemy and pyarrow.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    # errors
    "StorageError",
    "StorageConfigError",
    "StorageTimeoutError",
    "QueueReadTimeout",
    "QueueWriteTimeout",
    "QueueClosedError",
    # queues
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
    # ray
    "RayQueueClient",
    "get_ray_queue",
    "kill_ray_queue",
    # sql / file
    "SQLStorage",
    "SQLReader",
    "SQLWriter",
    "FileReader",
    "FileWriter",
    "JsonlFile",
    "ParquetDataset",
]

_MODULES = {
    "errors": (
        "StorageError",
        "StorageConfigError",
        "StorageTimeoutError",
        "QueueReadTimeout",
        "QueueWriteTimeout",
        "QueueClosedError",
    ),
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
_WHERE = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
