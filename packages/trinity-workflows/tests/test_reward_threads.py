"""Reward calls run on reused daemon threads; a stuck call never holds up another."""

from __future__ import annotations

import threading
import time

import pytest

from trinity.workflows.rewards import threads


def _reward_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "trinity-reward"]


def _wait_until(predicate, seconds: float = 5.0) -> bool:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_free_threads_are_reused():
    done = threading.Semaphore(0)
    before = len(_reward_threads())
    for _ in range(200):  # one after another: each call finds the previous call's thread free
        threads.submit(done.release)
        assert done.acquire(timeout=5)
    assert len(_reward_threads()) - before <= 2
    assert all(t.daemon for t in _reward_threads())


def test_a_stuck_call_holds_up_no_other_and_every_concurrent_call_gets_a_thread():
    release = threading.Event()
    started = threading.Semaphore(0)

    def stuck() -> None:
        started.release()
        release.wait(30)

    try:
        for _ in range(8):  # eight calls stuck at once: eight threads, none waits for another
            threads.submit(stuck)
        for _ in range(8):
            assert started.acquire(timeout=5)
        answered = threading.Event()
        threads.submit(answered.set)
        assert answered.wait(5)
    finally:
        release.set()


def test_a_call_that_raises_leaves_its_thread_usable():
    def boom() -> None:
        raise RuntimeError("reported by the call itself, dropped here")

    done = threading.Event()
    threads.submit(boom)
    threads.submit(done.set)
    assert done.wait(5)


def test_free_threads_exit_when_idle(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(threads, "IDLE_SECONDS", 0.2)
    release = threading.Event()
    started = threading.Semaphore(0)
    used: set[threading.Thread] = set()

    def busy() -> None:
        used.add(threading.current_thread())
        started.release()
        release.wait(5)

    # more calls than threads: every free thread takes one (and then waits anew, with the
    # short idle time); threads other tests left stuck in their calls are not free
    calls = len(_reward_threads()) + 4
    for _ in range(calls):
        threads.submit(busy)
    for _ in range(calls):
        assert started.acquire(timeout=5)
    assert len(used) == calls  # one thread per concurrent call
    release.set()
    assert _wait_until(lambda: not any(t.is_alive() for t in used), 5)  # free, then gone
    done = threading.Event()
    threads.submit(done.set)  # and a later call starts a thread again
    assert done.wait(5)
