"""Policies the coordinator is handed: *when* weights move (sync styles) and *whether* the
engines and the trainer take turns on shared devices (colocation).

A sync policy answers three questions from the :class:`~trinity.launcher.run.clock.SyncClock`
and nothing else, so each style is a few lines and the coordinator has no branch per style:

* :meth:`SyncPolicy.may_explore` -- may explore step ``e`` start now? ``fixed`` waits until
  the engines *serve* the weights of train step ``need(e)``; the dynamic styles only until
  that many train steps are *done* (the same bound on how far the explorer runs ahead);
* :meth:`SyncPolicy.pushes_after` -- does the trainer push its weights after train step ``s``?
  (``fixed``, ``dynamic_by_trainer``: every ``sync_interval`` steps); :meth:`SyncPolicy.may_push`
  -- may that push replace the engines' weights now? (``fixed``: only once every explore step
  that needs older weights has run, so each step runs on exactly the weights of ``need(e)``
  however fast the trainer is);
* :meth:`SyncPolicy.asks_before` -- does the explorer ask for new weights before its next
  step? (``dynamic_by_explorer``: every ``sync_interval`` explore steps; the coordinator then
  pushes the weights of the last finished train step, never during one).

and :attr:`SyncPolicy.in_flight_updates` says whether a push waits for the step that is
generating (every style but ``fully_async``: a step runs on one version) or replaces the
weights under its requests (``fully_async``: the engine pauses them, loads, and they go on).

Trinity-RFT's ``need_sync`` follows the same split of who decides. A run with only one side
(mode ``explore``: no trainer; mode ``train``: no engines) gets :class:`Unsynced`.

A turn policy wraps each train step and its weight push: :class:`SeparateDevices` (modes
``both``, ``train``) lets generation go on and only keeps a push from replacing weights under
a step that is generating; :class:`TakingTurns` (mode ``colocate``) puts the engines to sleep
for the trainer's turn (:class:`trinity.launcher.colocate.Colocation`).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from trinity.launcher.run.clock import SyncClock, required_version

__all__ = [
    "SYNC_POLICIES",
    "ExplorerDrivenSync",
    "FixedSync",
    "FullyAsyncSync",
    "SeparateDevices",
    "SyncPolicy",
    "TakingTurns",
    "TrainerDrivenSync",
    "TurnPolicy",
    "Unsynced",
    "sync_policy",
]


class SyncPolicy(ABC):
    """When weights move; see the module docstring.

    Args:
        interval: ``synchronizer.sync_interval`` (train steps, or explore steps for
            ``dynamic_by_explorer``).
        offset: ``synchronizer.sync_offset`` (explore steps the explorer may run ahead).
    """

    #: the ``synchronizer.sync_style`` value
    style: ClassVar[str] = ""
    #: the coordinator runs a task that answers the explorer's requests for weights
    serves_requests: ClassVar[bool] = False
    #: a push replaces the engines' weights under requests in flight (it does not wait for
    #: the explorer's step to finish generating)
    in_flight_updates: ClassVar[bool] = False

    def __init__(self, interval: int = 1, offset: int = 0) -> None:
        if int(interval) < 1:
            raise ValueError(f"synchronizer.sync_interval: {interval!r} must be >= 1")
        if int(offset) < 0:
            raise ValueError(f"synchronizer.sync_offset: {offset!r} must be >= 0")
        self.interval = int(interval)
        self.offset = int(offset)

    def need(self, explore_step: int) -> int:
        """The train step explore step ``explore_step`` (1-based) waits for."""
        return required_version(explore_step, self.interval, self.offset)

    @abstractmethod
    def may_explore(self, clock: SyncClock, explore_step: int) -> bool:
        """Explore step ``explore_step`` may start (also: the trainer has ended)."""

    def pushes_after(self, train_step: int) -> bool:
        """The trainer pushes its weights after train step ``train_step``."""
        return False

    def may_push(self, clock: SyncClock, version: int) -> bool:
        """The weights of train step ``version`` may replace the engines' now."""
        return True

    def asks_before(self, explored: int, synced_at: int) -> bool:
        """The explorer, ``explored`` steps done and last synced after step ``synced_at``,
        asks for new weights before its next step."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(interval={self.interval}, offset={self.offset})"


class FixedSync(SyncPolicy):
    """``fixed``: explore step ``e`` runs on exactly the weights of train step ``need(e)``."""

    style = "fixed"

    def may_explore(self, clock: SyncClock, explore_step: int) -> bool:
        return clock.trainer_done or clock.version >= self.need(explore_step)

    def pushes_after(self, train_step: int) -> bool:
        return train_step % self.interval == 0

    def may_push(self, clock: SyncClock, version: int) -> bool:
        # every explore step e <= version + offset needs weights older than ``version``
        # (need(e) < version): they must have run first (or never will)
        return clock.explorer_done or clock.explored >= version + self.offset


class TrainerDrivenSync(SyncPolicy):
    """``dynamic_by_trainer``: the trainer pushes every ``sync_interval`` steps; the explorer
    generates with whatever the engines hold (at most ``need(e)`` train steps behind)."""

    style = "dynamic_by_trainer"

    def may_explore(self, clock: SyncClock, explore_step: int) -> bool:
        return clock.trainer_done or clock.trained >= self.need(explore_step)

    def pushes_after(self, train_step: int) -> bool:
        return train_step % self.interval == 0


class ExplorerDrivenSync(SyncPolicy):
    """``dynamic_by_explorer``: every ``sync_interval`` explore steps the explorer asks for
    the weights of the trainer's last finished step and waits for them (at most
    ``sync_timeout``); they are pushed also while the trainer waits for data, never during a
    train step."""

    style = "dynamic_by_explorer"
    serves_requests = True

    def may_explore(self, clock: SyncClock, explore_step: int) -> bool:
        return clock.trainer_done or clock.trained >= self.need(explore_step)

    def asks_before(self, explored: int, synced_at: int) -> bool:
        return explored - synced_at >= self.interval


class FullyAsyncSync(SyncPolicy):
    """``fully_async``: generation never waits for a weight push. The explorer runs until it
    has ``max_inflight_batches`` batches the trainer has not trained yet; the trainer pushes
    every ``sync_interval`` steps, and the push replaces the engines' weights at once, under
    requests in flight (:attr:`in_flight_updates`: it does not wait for the explorer's step
    to finish generating). A request that spans a push records the version it started on and
    the one it ended on (``Experience.model_version`` / ``info["model_version_last"]``)."""

    style = "fully_async"
    in_flight_updates = True

    def __init__(self, interval: int = 1, offset: int = 0, max_inflight_batches: int = 2):
        super().__init__(interval, offset)
        if int(max_inflight_batches) < 1:
            raise ValueError(
                f"explorer.max_inflight_batches: {max_inflight_batches!r} must be >= 1"
            )
        self.max_inflight_batches = int(max_inflight_batches)

    def may_explore(self, clock: SyncClock, explore_step: int) -> bool:
        # steps 1 .. explore_step - 1 are explored; untrained: explore_step - 1 - trained
        return clock.trainer_done or explore_step - 1 - clock.trained < self.max_inflight_batches

    def pushes_after(self, train_step: int) -> bool:
        return train_step % self.interval == 0

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(interval={self.interval}, "
            f"max_inflight_batches={self.max_inflight_batches})"
        )


class Unsynced(SyncPolicy):
    """A run with one side only (mode ``explore`` or ``train``): nothing to wait for, no
    weights to move."""

    style = "none"

    def may_explore(self, clock: SyncClock, explore_step: int) -> bool:
        return True


#: ``synchronizer.sync_style`` -> policy class (Trinity-RFT's aliases are normalised by the
#: config schema: ``explorer_driven`` -> ``dynamic_by_explorer``, ...).
SYNC_POLICIES: dict[str, type[SyncPolicy]] = {
    cls.style: cls for cls in (FixedSync, TrainerDrivenSync, ExplorerDrivenSync, FullyAsyncSync)
}


def sync_policy(
    style: str, interval: int = 1, offset: int = 0, max_inflight_batches: int = 2
) -> SyncPolicy:
    """The policy of ``synchronizer.sync_style`` ``style`` (``max_inflight_batches``:
    ``explorer.max_inflight_batches``, read by ``fully_async`` only).

    Raises:
        ValueError: ``style`` names no policy (the message lists them).
    """
    try:
        cls = SYNC_POLICIES[style]
    except KeyError:
        raise ValueError(
            f"synchronizer.sync_style: {style!r} is not a sync style; use one of "
            f"{tuple(SYNC_POLICIES)}"
        ) from None
    if cls is FullyAsyncSync:
        return FullyAsyncSync(interval, offset, max_inflight_batches)
    return cls(interval, offset)


# ---------------------------------------------------------------------- turns
class TurnPolicy(ABC):
    """How a train step and its weight push share the devices with generation."""

    #: a weight push takes the explorer's generation lock itself (so a step never mixes
    #: versions); under :class:`TakingTurns` the turn holds it already
    push_takes_generation_lock: ClassVar[bool] = True

    @abstractmethod
    def turn(self, step: int) -> contextlib.AbstractAsyncContextManager[dict[str, Any]]:
        """The trainer's turn for train step ``step``; yields a dict for the turn's metrics."""

    def synced(self, version: int) -> None:  # noqa: B027 - most policies keep no record
        """The engines now hold ``version`` (pushed during the turn)."""


class SeparateDevices(TurnPolicy):
    """Engines and trainer on devices of their own: no turns."""

    @contextlib.asynccontextmanager
    async def turn(self, step: int) -> AsyncIterator[dict[str, Any]]:
        yield {}


class TakingTurns(TurnPolicy):
    """Mode ``colocate``: the engines sleep while the trainer steps and pushes.

    Args:
        colocation: a :class:`trinity.launcher.colocate.Colocation` (sleeps and wakes the
            engines, reports their calls).
        generation_lock: the explorer's generation lock (held for the whole turn).
    """

    push_takes_generation_lock = False

    def __init__(self, colocation: Any, generation_lock: Any) -> None:
        self.colocation = colocation
        self.generation_lock = generation_lock

    def turn(self, step: int) -> contextlib.AbstractAsyncContextManager[dict[str, Any]]:
        return self.colocation.turn(self.generation_lock, step)

    def synced(self, version: int) -> None:
        self.colocation.synced(version)
