"""Free loopback ports for the tests' servers and Ray nodes (a plain module beside the tests;
``conftest.py`` puts this directory on ``sys.path``)."""

from __future__ import annotations

import contextlib
import socket


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: all bound at once, then released. One at a time, the kernel
    may hand out a port it has just released again: a CI run gave a Ray node's dashboard agent
    and its metrics exporter the same one, and ``ray start`` refused it."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def free_port() -> int:
    """One free port (:func:`free_ports`)."""
    return free_ports(1)[0]
