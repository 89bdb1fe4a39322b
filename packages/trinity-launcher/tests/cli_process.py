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
