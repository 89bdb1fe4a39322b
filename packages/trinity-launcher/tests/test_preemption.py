"""The preemption signal handlers (``trinity.launcher.run.preemption``) in a process of their
own: the first signal asks for a clean stop, the grace period or a second signal exits at
once with status 75. (The clean stop itself: ``test_coordinator.py`` with fake sides; end to
end through ``trinity-launch`` in every mode: ``test_both_resume.py`` (sync styles fixed and
fully_async), ``test_colocate.py``, ``test_explore_resume.py`` (SIGUSR1) and
``test_train_mode.py``.)"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from trinity.launcher.run.preemption import EXIT_PREEMPTED, PreemptionSettings, parse_signals

SCRIPT = textwrap.dedent(
    """
    import asyncio, os, signal, sys, time
    from trinity.launcher.run.preemption import PreemptionSettings, StopRequest

    async def main():
        stop = StopRequest()
        with stop.installed(PreemptionSettings((signal.SIGUSR1,), grace_s={grace})):
            os.kill(os.getpid(), signal.SIGUSR1)
            await asyncio.wait_for(stop.wait(), 5)
            print("stop requested by", stop.signal_name, flush=True)
            if {second}:
                os.kill(os.getpid(), signal.SIGUSR1)
            await asyncio.sleep({stay})  # a clean stop that takes this long
        print("left cleanly", flush=True)

    asyncio.run(main())
    """
)


def _run(
    grace: float, stay: float, second: bool = False
) -> tuple[subprocess.CompletedProcess, float]:
    code = SCRIPT.format(grace=grace, stay=stay, second=second)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return done, time.monotonic() - start


def test_the_first_signal_requests_a_stop_and_the_run_may_finish_cleanly():
    done, _ = _run(grace=30, stay=0.2)
    assert done.returncode == 0, done.stderr
    assert "stop requested by SIGUSR1" in done.stdout and "left cleanly" in done.stdout
    assert "SIGUSR1 received: stopping with a checkpoint (grace 30 s)" in done.stderr


def test_past_the_grace_period_the_process_exits_75():
    done, took = _run(grace=1.0, stay=30)
    assert done.returncode == EXIT_PREEMPTED, (done.stdout, done.stderr)
    assert "left cleanly" not in done.stdout
    assert "the 1 s grace period ended the run before its checkpoint" in done.stderr
    assert took < 20, took


def test_a_second_signal_exits_at_once():
    done, took = _run(grace=30, stay=30, second=True)
    assert done.returncode == EXIT_PREEMPTED and "a second SIGUSR1" in done.stderr
    assert took < 20, took


def test_settings_and_signal_names_are_checked():
    assert parse_signals("term, SIGUSR1 ,term") == (signal.SIGTERM, signal.SIGUSR1)
    assert parse_signals("") == ()
    with pytest.raises(ValueError, match="unknown signal 'NOPE'"):
        parse_signals("NOPE")
    with pytest.raises(ValueError, match="cannot be caught"):
        parse_signals("STOP")
    with pytest.raises(ValueError, match="grace period must be > 0"):
        PreemptionSettings(grace_s=0)


GUARDED = textwrap.dedent(
    """
    import asyncio, os, signal, sys, time
    from trinity.launcher.run.preemption import Preempted, PreemptionSettings, StopRequest

    settings = PreemptionSettings((signal.SIGTERM, signal.SIGUSR1), grace_s={grace})
    stop = StopRequest()

    async def loops():
        with stop.installed(settings):
            print("loops", flush=True)
            await asyncio.sleep(0.05)

    class SignalledInFinalizer:
        def __del__(self):  # Python ignores an exception raised here (and prints it)
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.2)

    async def main():
        await asyncio.sleep(0.01)  # the start-up
        if {signal_in_start}:
            os.kill(os.getpid(), signal.SIGUSR1)
            await asyncio.sleep(5)  # interrupted by the signal
            print("start-up went on", flush=True)
        if {lost_in_start}:
            SignalledInFinalizer()
            print("start-up went on", flush=True)
        await loops()
        if {signal_in_release}:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
            print("released after", stop.signal_name, flush=True)
            if {second}:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)

    try:
        with stop.guarded(settings):
            asyncio.run(main())
    except Preempted as exc:
        print("preempted:", exc, flush=True)
        sys.exit(75)
    print("default after:", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, flush=True)
    """
)


def _guarded(**kwargs) -> subprocess.CompletedProcess:
    args = {
        "grace": 30,
        "signal_in_start": False,
        "lost_in_start": False,
        "signal_in_release": False,
        "second": False,
    }
    code = GUARDED.format(**{**args, **kwargs})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_a_signal_in_the_start_up_abandons_it_with_the_preemption_status():
    """Before the run's loops start there is no step to finish: the guard raises
    ``Preempted`` where the start-up is (its ``finally`` blocks run) and the loops never
    start; without the guard SIGUSR1 would kill the process (status -10), and Ray's SIGTERM
    handler would exit 15: neither is the status a scheduler requeues on."""
    done = _guarded(signal_in_start=True)
    assert done.returncode == EXIT_PREEMPTED, (done.stdout, done.stderr)
    assert "preempted: stopped by SIGUSR1 while the run was starting" in done.stdout
    assert "start-up went on" not in done.stdout and "loops" not in done.stdout


def test_a_start_up_signal_whose_exception_python_dropped_still_stops_the_run():
    """Python ignores an exception raised in some places (a finalizer here; an at-fork hook
    while Ray starts its processes): the start-up goes on, but the request was recorded and
    the loops do not start (``check_start``, also between the session's start-up phases)."""
    done = _guarded(lost_in_start=True)
    assert done.returncode == EXIT_PREEMPTED, (done.stdout, done.stderr)
    assert "Exception ignored" in done.stderr and "start-up went on" in done.stdout
    assert "preempted: stopped by SIGUSR1 while the run was starting" in done.stdout
    assert "loops" not in done.stdout


def test_after_the_loops_a_signal_lets_the_release_finish_and_a_second_exits_at_once():
    """The loops' handlers give the guard's back when they end (not the default action,
    which would kill the process mid-release): a first signal then lets the release finish,
    a second exits 75 at once; after the run, the handlers from before it are back."""
    done = _guarded(signal_in_release=True)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "loops" in done.stdout and "released after SIGTERM" in done.stdout
    assert "default after: True" in done.stdout
    done = _guarded(signal_in_release=True, second=True)
    assert done.returncode == EXIT_PREEMPTED, (done.stdout, done.stderr)
    assert "a second SIGTERM" in done.stderr


def test_a_sigterm_while_ray_starts_reaches_the_run_s_own_handler():
    """``ray.init`` sets SIGTERM to its own ``sys.exit(15)`` first thing, whose exception is
    lost where the signal finds the main thread in an at-fork hook: the run's handler (the
    preemption guard) stays in place while Ray starts; a Ray that set its handler another way
    has its ``SystemExit(15)`` handed to the run's, which is put back afterwards."""
    import os

    pytest.importorskip("ray")
    from ray._private import utils as ray_utils

    from trinity.launcher.run.ray_session import _sigterm_handler_kept

    class Stopped(BaseException):
        pass

    def ours(signum, frame):
        raise Stopped(signum)

    def ray_exit(signum, frame):
        sys.exit(signum)

    def ray_init(signal_during_start: bool, directly: bool = False) -> None:
        if directly:  # another Ray version
            signal.signal(signal.SIGTERM, ray_exit)
        else:  # what ray.init does
            ray_utils.set_sigterm_handler(ray_exit)
        if signal_during_start:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)

    before = signal.signal(signal.SIGTERM, ours)
    try:
        with _sigterm_handler_kept():
            ray_init(False)
            assert signal.getsignal(signal.SIGTERM) is ours  # not Ray's, even meanwhile
        with pytest.raises(Stopped), _sigterm_handler_kept():
            ray_init(True)
        with pytest.raises(Stopped), _sigterm_handler_kept():
            ray_init(True, directly=True)
        assert signal.getsignal(signal.SIGTERM) is ours
        # without a handler of the run's own, Ray's is left alone
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with _sigterm_handler_kept():
            ray_init(False)
        assert signal.getsignal(signal.SIGTERM) is ray_exit
    finally:
        signal.signal(signal.SIGTERM, before)
