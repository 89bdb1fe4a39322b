"""Running the command line the way a user does, in a process group of its own (a plain
module beside the tests; ``conftest.py`` puts this directory on ``sys.path``)."""

from __future__ import annotations

import re


def spawn_cli(config, log):
    """``trinity run --config CONFIG`` in a process group of its own (``os.killpg`` takes Ray's
    processes with it), output appended to the file ``log`` (nobody has to read a pipe while a
    test waits); returns ``(process, ray_tmp)`` -- remove ``ray_tmp`` once it has ended."""
    import os
    import subprocess
    import sys
    import tempfile

    ray_tmp = tempfile.mkdtemp(prefix="tr-ray-")  # Ray's socket paths must stay short
    env = dict(os.environ, TRINITY_RAY_TMPDIR=ray_tmp, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    with open(log, "a") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trinity.launcher.cli", "run", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    return proc, ray_tmp


def run_to_end(config, log, timeout: float = 600) -> str:
    """:func:`spawn_cli` and wait for it (past ``timeout`` its process group is killed and
    the wait raises); assert it exited 0; return its output."""
    import os
    import shutil

    proc, ray_tmp = spawn_cli(config, log)
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    out = log.read_text()
    assert proc.returncode == 0, failure_digest(out) + out[-6000:]
    return out


#: what a failed run's output says about why it failed (an actor's death cause, a kill, a
#: signal): shown first, where a truncated report of a long message still has it
_CAUSE = re.compile(
    r"Error\b|[Dd]ied\b|[Kk]illed|Worker exit|memory|SIG[A-Z]+|exit (code|status|type)"
)


def failure_digest(out: str, limit: int = 15) -> str:
    """The last ``limit`` lines of ``out`` that name a cause (:data:`_CAUSE`), as a block to
    put before an output's tail in an assertion message (empty where none does)."""
    lines = [line.strip() for line in out.splitlines() if _CAUSE.search(line)]
    if not lines:
        return ""
    return "causes named in the output:\n  " + "\n  ".join(lines[-limit:]) + "\n---\n"


def kill_when(config, log, ready, timeout: float = 600):
    """:func:`spawn_cli`, then SIGKILL its whole process group (Ray's processes too) as soon
    as ``ready()`` is true (polled every 20 ms, at most ``timeout`` s); assert it died of the
    kill, not on its own; return its output."""
    import os
    import shutil
    import signal
    import time

    proc, ray_tmp = spawn_cli(config, log)
    try:
        deadline = time.monotonic() + timeout
        while proc.poll() is None and not ready() and time.monotonic() < deadline:
            time.sleep(0.02)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    out = log.read_text()
    assert proc.returncode == -signal.SIGKILL, failure_digest(out) + out[-4000:]
    return out


class Preemption:
    """What :func:`preempt_when` saw: the output, the seconds from the signal to the exit."""

    def __init__(self, output: str, took: float) -> None:
        self.output = output
        self.took = took


def preempt_when(config, log, ready, sig=None, timeout: float = 600, grace: float = 150):
    """:func:`spawn_cli`, then send ``sig`` (default SIGTERM) to the driver alone -- as a
    scheduler's first signal -- as soon as ``ready()`` is true (polled every 20 ms, at most
    ``timeout`` s); wait at most ``grace`` s for it to exit; assert it exited with the
    preemption status (75) and left no process of its group behind (Ray's included); return
    its output and how long it took to exit."""
    import os
    import shutil
    import signal
    import time

    sig = signal.SIGTERM if sig is None else sig
    proc, ray_tmp = spawn_cli(config, log)
    left: list[str] = []
    try:
        deadline = time.monotonic() + timeout
        while proc.poll() is None and not ready() and time.monotonic() < deadline:
            time.sleep(0.02)
        if proc.poll() is not None:
            out = log.read_text()
            raise AssertionError(f"ended before the signal:\n{failure_digest(out)}{out[-4000:]}")
        assert ready(), f"not ready within {timeout} s:\n{log.read_text()[-4000:]}"
        os.kill(proc.pid, sig)
        signalled = time.monotonic()
        proc.wait(timeout=grace)
        took = time.monotonic() - signalled
        left = _group_left(proc.pid)
    finally:
        if proc.poll() is None or left:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=60)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    out = log.read_text()
    assert proc.returncode == 75, (
        f"exit status {proc.returncode}:\n{failure_digest(out)}{out[-4000:]}"
    )
    assert not left, f"processes of the run left behind: {left}"
    return Preemption(out, took)


def _group_left(pgid: int, wait: float = 10.0) -> list[str]:
    """The live processes of process group ``pgid`` after at most ``wait`` s (Ray's take a
    moment to go after the driver), as ``"pid command"``."""
    import os
    import time

    deadline = time.monotonic() + wait
    while True:
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:120]
            except OSError:  # gone meanwhile
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":  # (state, ppid, pgrp, ...)
                left.append(f"{pid} {cmd}")
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def preempt_after_steps(config, log, run, steps: int, total: int) -> tuple[str, int]:
    """:func:`preempt_when` with SIGTERM once ``run``'s ``metrics.jsonl`` holds ``steps``
    train records; checks the stop is a checkpointed one of a step in ``[steps, total)``,
    made well inside the default grace period (120 s), with every record up to it and none
    after. Returns the output and the checkpoint's step."""
    import json

    records = run / "metrics.jsonl"

    def written() -> int:  # complete lines only: the run may be writing the next one
        return records.read_text().count("\n") if records.exists() else 0

    stopped = preempt_when(config, log, lambda: written() >= steps)
    out = stopped.output
    assert "SIGTERM received: stopping with a checkpoint" in out
    step = int((run / "latest_checkpointed_iteration.txt").read_text())
    assert steps <= step < total and f"stopped by SIGTERM at step {step}" in out, out[-3000:]
    assert stopped.took < 60, stopped.took
    lines = records.read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == list(range(1, step + 1))
    return out, step
