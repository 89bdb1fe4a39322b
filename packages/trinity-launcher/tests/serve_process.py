"""A mode-serve service in a process of its own, as a user starts it (``trinity run``), for the
serve tests (a plain module beside the tests; ``conftest.py`` puts this directory on
``sys.path``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def service_env(tmp_path: Path, port: int, key: str, **extra: str) -> dict[str, str]:
    """The environment ``examples/serve_*.yaml`` read, for a service on ``port`` in
    ``tmp_path``: the quickstart's tiny model built there, checkpoints under ``ckpt``, the
    SQLite buffer ``served.db``, the API key in ``TRINITY_TEST_SERVE_KEY``; ``extra`` added."""
    from trinity.launcher.tiny_model import PRESETS, build_tiny_model

    model = build_tiny_model(tmp_path / "tiny-model", PRESETS["arithmetic"])
    env = dict(
        os.environ,
        TRINITY_QUICKSTART_MODEL=str(model),
        TRINITY_CHECKPOINT_ROOT_DIR=str(tmp_path / "ckpt"),
        TRINITY_SERVE_BUFFER=f"sqlite:///{tmp_path / 'served.db'}",
        TRINITY_SERVE_PORT=str(port),
        TRINITY_TEST_SERVE_KEY=key,
        OMP_NUM_THREADS="1",
        **extra,
    )
    env.pop("RAY_ADDRESS", None)
    return env


def start(config: str, env: dict, log: Path, *overrides: str) -> subprocess.Popen:
    """``trinity run --config CONFIG [KEY=VALUE ...]`` from the repository root, in a process
    group of its own (``stop`` takes Ray's processes with it), output to ``log``."""
    ray_tmp = tempfile.mkdtemp(prefix="tr-ray-")  # Ray's socket paths must stay short
    cmd = [str(Path(sys.executable).with_name("trinity")), "run", "--config", config, *overrides]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=dict(env, TRINITY_RAY_TMPDIR=ray_tmp),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_healthy(proc: subprocess.Popen, base: str, log: Path, timeout: float = 600) -> None:
    """Until ``/health`` answers 200; fails with the log's tail when the service exits."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, log.read_text()[-5000:]
        assert time.monotonic() < deadline, f"the service did not come up in {timeout:.0f} s"
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)


def stop(proc: subprocess.Popen, sig: int = signal.SIGINT, wait: float = 120) -> int:
    """Send ``sig`` to the service's process group; SIGKILL after ``wait`` seconds."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            return proc.wait(wait)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(30)
    return proc.returncode
