"""Daemon threads for reward calls: reused, never waited for, abandoned when stuck.

A reward function is user code: it may hang in C code, where no timeout can interrupt it. So
each call runs on a daemon thread its caller can give up on (the call scores 0 after its
timeout) without blocking anything else: a worker busy with a stuck call is simply never free
again, and a call that finds no free worker starts one. Free workers are reused (starting a
thread per call cost ~0.1-0.25 ms, 64 times per quickstart step and runner) and exit after
``IDLE_SECONDS`` without work.

Bookkeeping: ``_idle`` counts free workers not yet promised a call. ``submit`` promises one
(or starts a new worker) before queueing the call, so a queued call always has a worker that
will take it; a worker whose wait times out leaves only if no queued call counts on it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

__all__ = ["IDLE_SECONDS", "submit"]

#: seconds a free worker waits for another call before it exits
IDLE_SECONDS = 30.0

_calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
_lock = threading.Lock()
_idle = 0


def submit(call: Callable[[], None]) -> None:
    """Run ``call()`` on a daemon worker thread; return at once.

    ``call`` reports its own outcome (and must not raise: what it raises is dropped).
    """
    global _idle
    with _lock:
        start = _idle == 0
        if not start:
            _idle -= 1  # a free worker is promised this call
    _calls.put(call)
    if start:
        threading.Thread(target=_work, name="trinity-reward", daemon=True).start()


def _work() -> None:
    global _idle
    while True:
        try:
            call = _calls.get(timeout=IDLE_SECONDS)
        except queue.Empty:
            with _lock:
                if _idle > 0:  # no queued call counts on this worker: leave
                    _idle -= 1
                    return
            continue  # a call was promised to a free worker: take it
        try:
            call()
        except BaseException:  # noqa: BLE001, S110 - calls report their own outcome
            pass
        with _lock:
            _idle += 1
