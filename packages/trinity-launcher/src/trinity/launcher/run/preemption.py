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

A signal that lands before the run's loops start (Ray, the engines and the trainer starting,
a checkpoint loading) has no step to finish and nothing new to checkpoint: the start-up is
abandoned at once (:meth:`StopRequest.guarded` raises :class:`Preempted` where it is, and what
had started is released), with the same exit status and grace period. One that lands after the
loops ended lets the release finish. So a scheduler that requeues on :data:`EXIT_PREEMPTED`
requeues whenever its signal landed.

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


class Preempted(BaseException):
    """The run stopped on a preemption signal after writing what resume needs.

    A ``BaseException``, as ``KeyboardInterrupt`` is: in a run's start-up it is raised by the
    signal handler wherever the main thread is, and no ``except Exception`` on the way (Ray's
    start retries, an engine supervisor's) may take it for a failure to handle. ``step`` is
    ``None`` when the run stopped before its loops started.
    """

    def __init__(self, signal_name: str, step: Optional[int], checkpoint: Optional[str]) -> None:
        where = f"checkpoint {checkpoint}" if checkpoint else "the last checkpoint"
        when = f"at step {step}" if step is not None else "while the run was starting"
        super().__init__(
            f"stopped by {signal_name} {when}; run the same command to resume from {where}"
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

    Its handlers, for the run's phases:

    * :meth:`guarded` (the whole run, ``signal.signal`` in the main thread): before the loops
      start, the first signal abandons the start-up (raises :class:`Preempted`); after they
      ended, it lets the release finish;
    * :meth:`installed` (while the loops run, on the run's event loop): the first signal
      requests the stop, which the loops act on.

    In every phase the first signal arms the grace timer and a second one exits at once.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.signal_name: Optional[str] = None
        #: whether the run's loops have started (:meth:`installed`): before, a signal has no
        #: step to finish and abandons the start-up
        self.loops_started = False
        self._grace: Optional[threading.Timer] = None
        self._guarded = False

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def request(self, signal_name: str) -> None:
        if self.signal_name is None:
            self.signal_name = signal_name
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()

    def check_start(self) -> None:
        """In the start-up, between its phases: raise :class:`Preempted` if a signal came.
        (:meth:`guarded`'s handler raised it already where the signal found the main thread,
        but Python drops an exception raised in some places -- an at-fork hook while Ray
        starts its processes, a finalizer -- and the start-up would go on.)"""
        if self.requested and not self.loops_started:
            raise Preempted(str(self.signal_name), None, checkpoint=None)

    @contextmanager
    def guarded(self, settings: PreemptionSettings) -> Iterator[None]:
        """Handle ``settings.signals`` while the block runs -- the whole run, its start-up and
        its release included (:meth:`installed` takes over while the loops run and gives them
        back). Before the loops start, the first signal raises :class:`Preempted` where the
        main thread is (and :meth:`check_start` again, where that was lost): the ``finally``
        blocks on the way release Ray and the engines, within the grace period. After they
        ended, it only arms the grace timer. A second signal exits at once. Outside the main
        thread (no signal handlers there) this does nothing.

        The handler writes nothing: it may run in the middle of a write to the console."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, frame: object) -> None:
            sig = signal.Signals(signum)
            if self.requested:
                _exit_now(f"a second {sig.name}")
            self._arm_grace(settings)
            self.signal_name = sig.name  # first: the exception below may be lost
            self.check_start()

        previous = {sig: signal.getsignal(sig) for sig in settings.signals}
        for sig in settings.signals:
            signal.signal(sig, on_signal)
        self._guarded = True
        try:
            yield
        finally:
            self._guarded = False
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._disarm_grace()

    @contextmanager
    def installed(self, settings: PreemptionSettings) -> Iterator[None]:
        """Handle ``settings.signals`` on the running loop while the block runs (the run's
        loops): the first one requests the stop and arms the grace timer, a second one exits
        at once. Afterwards the handlers from before the block (:meth:`guarded`'s) are back."""
        loop = asyncio.get_running_loop()

        def on_signal(sig: signal.Signals) -> None:
            if self.requested:
                _exit_now(f"a second {sig.name}")
            logger.warning(
                "%s received: stopping the run with a checkpoint (at most %.0f s; a second "
                "signal exits at once)",
                sig.name,
                settings.grace_s,
            )
            print(
                f"{sig.name} received: stopping with a checkpoint (grace {settings.grace_s:.0f} s)",
                file=_console(),
                flush=True,
            )
            self.request(sig.name)
            self._arm_grace(settings)

        previous = {sig: signal.getsignal(sig) for sig in settings.signals}
        try:
            for sig in settings.signals:
                loop.add_signal_handler(sig, on_signal, sig)
            self.check_start()  # a signal in the start-up: no loop starts
            self.loops_started = True
            yield
        finally:
            for sig, handler in previous.items():
                loop.remove_signal_handler(sig)  # (leaves the default action)
                if handler is not None:
                    signal.signal(sig, handler)
            if not self._guarded:  # else the release is bounded by the grace period too
                self._disarm_grace()

    def _arm_grace(self, settings: PreemptionSettings) -> None:
        """Exit with :data:`EXIT_PREEMPTED` ``settings.grace_s`` from now, whatever the run is
        doing then (armed once)."""
        if self._grace is not None:
            return
        grace = threading.Timer(
            settings.grace_s, _exit_now, (f"the {settings.grace_s:.0f} s grace period",)
        )
        grace.daemon = True
        grace.start()
        self._grace = grace

    def _disarm_grace(self) -> None:
        if self._grace is not None:
            self._grace.cancel()


def _exit_now(why: str) -> None:
    """Leave without the checkpoint: the previous one is what the same command resumes from.
    (Called from a signal handler too, which may have interrupted a write to the console: the
    message is best effort, the exit is not.)"""
    try:
        print(
            f"preempted: {why} ended the run before its checkpoint was written; the same "
            "command resumes from the previous checkpoint",
            file=_console(),
            flush=True,
        )
    finally:
        os._exit(EXIT_PREEMPTED)


def _console() -> TextIO:
    """The console's error stream (``trinity-launch`` sends engine output to a log file)."""
    from trinity.launcher.logs import console_err

    return console_err()
