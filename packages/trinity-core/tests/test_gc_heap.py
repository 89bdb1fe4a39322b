"""``freeze_startup_heap``: start-up objects leave the collector's scans; later ones do not."""

from __future__ import annotations

import gc

import pytest

from trinity.utils.gc_heap import freeze_startup_heap


@pytest.fixture()
def unfrozen():
    yield
    gc.unfreeze()


def test_startup_objects_are_frozen_and_later_garbage_is_still_collected(unfrozen):
    class Node:
        pass

    kept = [Node() for _ in range(100)]
    frozen = freeze_startup_heap()
    assert frozen >= len(kept) and gc.get_freeze_count() == frozen
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(o) in tracked for o in kept)  # no longer scanned

    cycle = Node()
    cycle.self = cycle  # garbage only a collection can free
    del cycle
    assert gc.collect() >= 1


# ---------------------------------------------------------------- the start-up pause
DEFAULT = gc.get_threshold()


def _paused() -> bool:
    """Full collections stopped, the young generations' kept."""
    from trinity.utils.gc_heap import PAUSED_FULL_THRESHOLD

    return gc.get_threshold() == (DEFAULT[0], DEFAULT[1], PAUSED_FULL_THRESHOLD)


@pytest.fixture()
def no_pause():
    """Each test starts and ends with collection on, the default thresholds and no pause."""
    from trinity.utils.gc_heap import resume_collection

    resume_collection()
    assert gc.isenabled() and gc.get_threshold() == DEFAULT
    yield
    resume_collection()
    gc.enable()
    gc.set_threshold(*DEFAULT)


def test_the_pause_lasts_until_the_heap_is_frozen(no_pause, unfrozen):
    from trinity.utils.gc_heap import pause_collection_during_startup

    assert pause_collection_during_startup() is True
    assert _paused() and gc.isenabled()
    assert pause_collection_during_startup() is False  # one pause at a time
    assert _paused()
    freeze_startup_heap()
    assert gc.get_threshold() == DEFAULT


def test_young_cycles_are_still_collected_during_the_pause(no_pause):
    """Start-up's short-lived cycles die in the young generations, not in the frozen heap."""
    import weakref

    from trinity.utils.gc_heap import pause_collection_during_startup

    class Node:
        pass

    assert pause_collection_during_startup()
    cycle = Node()
    cycle.self = cycle
    alive = weakref.ref(cycle)
    del cycle
    kept = [[] for _ in range(10 * DEFAULT[0])]  # enough new objects for young collections
    assert alive() is None
    del kept


def test_a_process_that_never_freezes_gets_full_collections_back_after_the_limit(no_pause):
    import time

    from trinity.utils.gc_heap import pause_collection_during_startup

    assert pause_collection_during_startup(limit_s=0.05)
    deadline = time.monotonic() + 10
    while gc.get_threshold() != DEFAULT and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gc.get_threshold() == DEFAULT


def test_collection_switched_off_by_someone_else_is_left_alone(no_pause, unfrozen):
    from trinity.utils.gc_heap import pause_collection_during_startup, resume_collection

    gc.disable()
    assert pause_collection_during_startup() is False
    assert gc.get_threshold() == DEFAULT
    assert resume_collection() is False
    freeze_startup_heap()
    assert not gc.isenabled()  # not ours to switch back on


def test_a_runs_ray_workers_pause_full_collections_from_their_setup_hook():
    """Ray runs the hook in each worker before its actor is built (in a process of its own
    here: the hook also configures that process's logging and warnings)."""
    import subprocess
    import sys

    code = (
        "import gc\n"
        "from trinity.utils.log import setup_worker_process\n"
        "from trinity.utils.gc_heap import freeze_startup_heap\n"
        "before = gc.get_threshold()\n"
        "setup_worker_process()\n"
        "during = gc.get_threshold()\n"
        "freeze_startup_heap()\n"
        "print(before[2], during[2], gc.get_threshold()[2])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    before, during, after = map(int, done.stdout.split())
    assert during > 100 * before and after == before
