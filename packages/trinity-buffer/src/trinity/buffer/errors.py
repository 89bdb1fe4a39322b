"""Errors raised by experience storages (also importable from ``trinity.buffer.storage.errors``).

Every error names the storage (``StorageConfig.name``) it comes from: a run usually has several
buffers (the trainer's experience buffer, auxiliary SFT data, an experience pipeline's output),
and "read timed out" alone does not tell which one starved.
"""

from __future__ import annotations

__all__ = [
    "StorageError",
    "StorageConfigError",
    "StorageTimeoutError",
    "QueueReadTimeout",
    "QueueWriteTimeout",
    "QueueClosedError",
]


class StorageError(Exception):
    """Base class of the errors raised by ``trinity.buffer.storage``."""


class StorageConfigError(StorageError, ValueError):
    """A storage config that cannot work (unknown ``storage_type``, missing ``path``, ...).

    A ``ValueError`` too, so callers validating configs can catch one type.
    """


class StorageTimeoutError(StorageError, TimeoutError):
    """A blocking storage operation gave up after its timeout."""


class QueueReadTimeout(StorageTimeoutError):
    """A queue read found fewer than ``batch_size`` experiences within ``max_read_timeout``."""


class QueueWriteTimeout(StorageTimeoutError):
    """A queue write found no room (the queue stayed at capacity) within the write timeout."""


class QueueClosedError(StorageError, RuntimeError):
    """A write to a queue whose writers have all released it (the stream has ended)."""
