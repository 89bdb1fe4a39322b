"""Preemption: a scheduler's stop signal ends a run cleanly, with a checkpoint to resume from.

Cluster schedulers stop a job with a signal and a grace period (Kubernetes and spot instances
send SIGTERM, Slurm a configurable warning signal such as SIGUSR1 before the end). A run that
receives one of :class:`PreemptionSettings`' signals:

* starts no further explore step, and abandons the one in flight (it was not committed, so a
  resumed run reads and runs its tasks again: nothing is lost, nothing doubled);
* lets the train step in progress finish, then writes a checkpoint of everything resume needs
  (the trainer, the explorer's committed position, the experiences explored and not trained)
  and ends with :class:`Preempted`, which ``trinity-launch`` turns into exit status
  :data:`EXIT_PREEMPTED`;
* if that has not happened within ``grace_s`` seconds, or a second signal arrives, exits at
  once with the same status: the previous checkpoint is what the same command resumes from.

Only the driver (the process ``trinity-launch`` runs in) handles the signals; send them to it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional, TextIO

from trinity.utils.log import get_logger

__all__ = [
    "EXIT_PREEMPTED",
    "Preempted",
    "PreemptionSettings",
    "StopRequest",
    "parse_signals",
]

logger = get_logger(__name__)

#: ``trinity-launch``'s exit status after a preemption signal (sysexits' EX_TEMPFAIL: "try
#: again later"): the same command resumes the run
EXIT_PREEMPTED = 75


class Preempted(Exception):
    """The run stopped on a preemption signal after writing what resume needs."""

    def __init__(self, signal_name: str, step: int, checkpoint: Optional[str]) -> None:
        where = f"checkpoint {checkpoint}" if checkpoint else "the last checkpoint"
        super().__init__(
            f"stopped by {signal_name} at step {step}; run the same command to resume from {where}"
        )
        self.signal_name = signal_name
        self.step = step
        self.checkpoint = checkpoint


def parse_signals(text: str) -> tuple[signal.Signals, ...]:
    """``"TERM,USR1"`` (names with or without ``SIG``, case-insensitive; empty: none) as
    signals; an unknown name raises ``ValueError`` naming the known ones."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name = part.upper()
        name = name if name.startswith("SIG") else "SIG" + name
        try:
            sig = signal.Signals[name]
        except KeyError:
            raise ValueError(
                f"unknown signal {part!r}; e.g. TERM, USR1, USR2, INT (names of Python's "
                "signal.Signals)"
            ) from None
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            raise ValueError(f"{part!r} cannot be caught; e.g. TERM, USR1, USR2")
        out.append(sig)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class PreemptionSettings:
    """Which signals stop a run cleanly, and how long the clean stop may take."""

    signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR1)
    grace_s: float = 120.0

    def __post_init__(self) -> None:
        if not self.grace_s > 0:
            raise ValueError(f"the grace period must be > 0 seconds, got {self.grace_s}")


class StopRequest:
    """Set once by a preemption signal; the coordinator's loops read it at step boundaries.

    Created and set on the run's event loop (signal handlers installed with
    :meth:`installed` run there).
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.signal_name: Optional[str] = None

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self, signal_name: str) -> None:
        if self.signal_name is None:
            self.signal_name = signal_name
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()

    @contextmanager
    def installed(self, settings: PreemptionSettings) -> Iterator[None]:
        """Handle ``settings.signals`` on the running loop while the block runs: the first
        one requests the stop and arms the grace timer, a second one exits at once."""
        loop = asyncio.get_running_loop()
        timer: list[threading.Timer] = []

        def on_signal(sig: signal.Signals) -> None:
            if self.requested:
                _exit_now(f"a second {sig.name}")
            logger.warning(
                "%s received: finishing the current train step, then a checkpoint "
                "(at most %.0f s; a second signal exits at once)",
                sig.name,
                settings.grace_s,
            )
            print(
                f"{sig.name} received: stopping with a checkpoint (grace {settings.grace_s:.0f} s)",
                file=_console(),
                flush=True,
            )
            self.request(sig.name)
            grace = threading.Timer(
                settings.grace_s, _exit_now, (f"the {settings.grace_s:.0f} s grace period",)
            )
            grace.daemon = True
            grace.start()
            timer.append(grace)

        for sig in settings.signals:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            yield
        finally:
            for sig in settings.signals:
                loop.remove_signal_handler(sig)
            for grace in timer:
                grace.cancel()


def _exit_now(why: str) -> None:
    """Leave without the checkpoint: the previous one is what the same command resumes from."""
    print(
        f"preempted: {why} ended the run before its checkpoint was written; the same command "
        "resumes from the previous checkpoint",
        file=_console(),
        flush=True,
    )
    os._exit(EXIT_PREEMPTED)


def _console() -> TextIO:
    """The console's error stream (``trinity-launch`` sends engine output to a log file)."""
    from trinity.launcher.logs import console_err

    return console_err()
