"""Imported only by the engine-core forkserver (:mod:`.core_forkserver`): every process it
forks dies with it.

A spawned engine core is a child of its Ray actor, and Ray kills an actor's children when
the actor dies (even by SIGKILL, as after a ``kill -9`` of the driver). A forked one is the
forkserver's child, its actor's grandchild: Ray kills the forkserver, and the core would live
on as an orphan holding its memory. ``PR_SET_PDEATHSIG`` (Linux) has the kernel send it
SIGKILL when the forkserver exits, whatever the way.
"""

from __future__ import annotations

import os
import signal

_PR_SET_PDEATHSIG = 1
_SERVER_PID = os.getpid()
#: True in the forkserver's children (and theirs, which inherit it: only direct children of
#: the forkserver are tied to it; a process an engine core forks is the core's business)
_FORKED_BY_SERVER = False


def _die_with_the_forkserver() -> None:
    global _FORKED_BY_SERVER
    if _FORKED_BY_SERVER:
        return
    _FORKED_BY_SERVER = True
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to ask the kernel for
        return
    if os.getppid() != _SERVER_PID:  # the forkserver died before prctl took effect
        os._exit(1)


os.register_at_fork(after_in_child=_die_with_the_forkserver)
