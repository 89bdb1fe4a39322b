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
