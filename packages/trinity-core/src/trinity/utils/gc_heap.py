"""Keep a long-running process's start-up objects out of the garbage collector's way.

A Trinity process imports torch, transformers, Ray (and verl or vLLM): hundreds of thousands of
long-lived objects, all tracked by the cyclic garbage collector. Every full (generation-2)
collection walks them all: ~100-400 ms on the project's 2-core CPU, at unpredictable points of
a step (measured: 1 in ~100 serializations of a quickstart batch took 97 ms instead of 4.7).
:func:`freeze_startup_heap`, called once a process is set up, moves everything alive into
the permanent generation (``gc.freeze``), so later collections only see what the run creates.
vLLM does the same in its engine core after start-up.

Before that point the imports themselves pay: CPython runs a full collection whenever the
objects that survived younger collections reach a quarter of the old generation, so a heap
growing from nothing to ~650K objects (a vLLM engine's process) is walked whole about ten
times, ever larger: 1.3 s of an engine's start-up, 1.2 s of the driver's, measured on the
quickstart. :func:`pause_collection_during_startup` stops the full collections (not the young
generations' ones, which are cheap and free the start-up's short-lived cycles) until the
process is set up (:func:`freeze_startup_heap` ends the pause), or for at most ``limit_s``
seconds in a process that never says so.
"""

from __future__ import annotations

import gc
import threading
from typing import Optional

__all__ = ["freeze_startup_heap", "pause_collection_during_startup", "resume_collection"]

#: the longest a start-up pause lasts in a process that never calls freeze_startup_heap
STARTUP_PAUSE_LIMIT_S = 120.0
#: generation-1 collections between two full ones during the pause (CPython's default: 10):
#: ~70M allocations, far more than any start-up makes
PAUSED_FULL_THRESHOLD = 10_000


class _StartupPause:
    """This process's pause of full collections (at most one), and the timer that ends it
    should nothing else."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._timer: Optional[threading.Timer] = None
        self._threshold: tuple[int, int, int] = gc.get_threshold()

    def start(self, limit_s: float) -> bool:
        with self._lock:
            if self._timer is not None or not gc.isenabled():
                return False  # already paused, or collection is off by someone else's choice
            timer = threading.Timer(limit_s, self.end)
            timer.daemon = True
            timer.name = "trinity-gc-startup-pause"
            self._threshold = gc.get_threshold()
            young, middle, _ = self._threshold
            gc.set_threshold(young, middle, PAUSED_FULL_THRESHOLD)
            self._timer = timer
        timer.start()
        return True

    def end(self) -> bool:
        with self._lock:
            timer, self._timer = self._timer, None
            if timer is None:
                return False
            gc.set_threshold(*self._threshold)
        if timer is not threading.current_thread():
            timer.cancel()
        return True


_PAUSE = _StartupPause()


def pause_collection_during_startup(limit_s: float = STARTUP_PAUSE_LIMIT_S) -> bool:
    """Stop automatic full collections while this process imports and builds (the young
    generations are still collected); they come back at :func:`freeze_startup_heap` (or
    :func:`resume_collection`), and after ``limit_s`` seconds at the latest. Returns whether
    this call paused them (``False`` where a pause is already on, or collection is off: then
    nothing changes)."""
    return _PAUSE.start(limit_s)


def resume_collection() -> bool:
    """End the start-up pause (no-op without one): the collector's thresholds as they were
    before it; returns whether one was ended."""
    return _PAUSE.end()


def freeze_startup_heap(collect: bool = False) -> int:
    """Freeze every tracked object (after a full collection with ``collect``) and end the
    start-up pause; returns how many the permanent generation holds. Later collections do not
    scan them; objects freed later are still freed (by reference counting, as always).

    No collection by default: start-up leaves almost no cyclic garbage (20 objects after
    importing torch, transformers, Ray and verl), and a full collection of the ~380K objects
    costs ~150 ms on the path to the first step."""
    if collect:
        gc.collect()
    gc.freeze()
    resume_collection()
    return gc.get_freeze_count()
