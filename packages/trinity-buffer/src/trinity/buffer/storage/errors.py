"""Errors raised by experience storages: defined in :mod:`trinity.buffer.errors` (beside
:mod:`trinity.buffer.base`, which raises them too) and re-exported here, their documented path."""

from trinity.buffer.errors import (
    QueueClosedError,
    QueueReadTimeout,
    QueueWriteTimeout,
    StorageConfigError,
    StorageError,
    StorageTimeoutError,
)

__all__ = [
    "StorageError",
    "StorageConfigError",
    "StorageTimeoutError",
    "QueueReadTimeout",
    "QueueWriteTimeout",
    "QueueClosedError",
]
