"""The preemption signal handlers (``trinity.launcher.run.preemption``) in a process of their
own: the first signal asks for a clean stop, the grace period or a second signal exits at
once with status 75. (The clean stop itself: ``test_coordinator.py`` with fake sides and
``test_both_resume.py`` end to end.)"""

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
