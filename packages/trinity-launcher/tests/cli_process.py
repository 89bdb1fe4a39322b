"""Running the command line the way a user does, in a process group of its own (a plain
module beside the tests; ``conftest.py`` puts this directory on ``sys.path``)."""

from __future__ import annotations


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
    assert proc.returncode == 0, out[-6000:]
    return out


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
    assert proc.returncode == -signal.SIGKILL, out[-4000:]
    return out
