"""Run one Python script as ``world_size`` local ranks of a torch process group (env://).

For work that needs every rank of a sharded checkpoint in its own process without Ray
(``trinity convert``) and for the tests that compare several gloo ranks with one process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Optional


def free_port() -> int:
    """A TCP port on localhost that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_ranks(
    script: str,
    args: Sequence[str],
    world_size: int,
    *,
    env: Optional[Mapping[str, str]] = None,
    timeout: Optional[float] = None,
) -> list[tuple[int, str]]:
    """Run ``python -c script *args`` once per rank with ``RANK``/``WORLD_SIZE``/``MASTER_*``
    set; return ``(returncode, output)`` per rank. Ranks still running at the timeout are
    killed (their return code is then negative)."""
    port = free_port()
    procs = []
    for rank in range(world_size):
        rank_env = dict(
            os.environ,
            **(env or {}),
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world_size),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-W", "ignore", "-c", script, *args],
                env=rank_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    logs = []
    try:
        for proc in procs:
            try:
                logs.append(proc.communicate(timeout=timeout)[0])
            except subprocess.TimeoutExpired:
                proc.kill()
                logs.append(proc.communicate()[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return [(proc.returncode, log) for proc, log in zip(procs, logs, strict=True)]
