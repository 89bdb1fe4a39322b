"""The buffer packages' ``__all__`` comes from their ``lazy_exports`` tables; the names are
pinned to what the hand-written lists exported before, and every one resolves."""

from __future__ import annotations

import importlib

import pytest

# The names the hand-written lists exported, in their order.
BUFFER_ALL = set(
    "BufferReader BufferWriter get_buffer_reader get_buffer_writer get_taskset_reader".split()
)
ERRORS_ALL = (
    "StorageError StorageConfigError StorageTimeoutError QueueReadTimeout QueueWriteTimeout "
    "QueueClosedError"
).split()
STORAGE_ALL = ERRORS_ALL + [
    *"PRIORITY_FN PRIORITY_FUNC PriorityFunction ExperienceQueue PriorityReplayQueue".split(),
    *"QueueReader QueueWriter get_queue remove_queue clear_queues".split(),
    *"RayQueueClient get_ray_queue kill_ray_queue".split(),
    *"SQLStorage SQLReader SQLWriter FileReader FileWriter JsonlFile ParquetDataset".split(),
]


def test_buffer_exports_the_same_names_as_before():
    import trinity.buffer

    assert set(trinity.buffer.__all__) == BUFFER_ALL
    assert trinity.buffer.__all__ == list(trinity.buffer._LAZY)


def test_storage_exports_the_same_names_as_before():
    import trinity.buffer.storage as storage

    assert storage.__all__ == STORAGE_ALL


def test_storage_errors_are_the_buffer_errors():
    import trinity.buffer.errors as errors
    import trinity.buffer.storage.errors as storage_errors

    assert errors.__all__ == ERRORS_ALL
    assert storage_errors.__all__ == ERRORS_ALL
    for name in ERRORS_ALL:
        assert getattr(storage_errors, name) is getattr(errors, name)


@pytest.mark.parametrize(
    "package", ["trinity.buffer", "trinity.buffer.storage", "trinity.buffer.storage.errors"]
)
def test_every_exported_name_resolves(package):
    module = importlib.import_module(package)
    missing = []
    for name in module.__all__:
        try:
            getattr(module, name)
        except ImportError as exc:  # an optional backend (Ray) may be absent here
            pytest.importorskip(exc.name or name)
        except AttributeError:
            missing.append(name)
    assert not missing
