"""The sync clock: which weights the engines serve, how many train steps are done, and which
weights an explore step needs. Pure: no Ray, no asyncio, no I/O -- the rules of every sync
style are functions of these counters, so they are tested in microseconds.

Schedule (``sync_style: fixed``): explore step ``e`` (1-based) runs with the weights of train
step ``need(e) = max(0, floor((e - 1 - sync_offset) / sync_interval) * sync_interval)``. With
``sync_interval: 1, sync_offset: 0`` every step is on-policy; ``sync_interval: k`` refreshes
the engines every ``k`` train steps; ``sync_offset: 1`` lets the explorer run one step ahead
of the trainer (its batch was generated one version behind), overlapping generation and
training. The dynamic styles keep the same bound on how far the explorer runs ahead, counted
in train steps *done* instead of weights *served* (:mod:`trinity.launcher.run.policies`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["SyncClock", "required_version"]


def required_version(explore_step: int, sync_interval: int, sync_offset: int) -> int:
    """The train step whose weights explore step ``explore_step`` (1-based) must use."""
    behind = explore_step - 1 - sync_offset
    if behind < sync_interval:
        return 0
    return (behind // sync_interval) * sync_interval


@dataclass
class SyncClock:
    """The counters the explore and train loops meet on.

    Attributes:
        version: the model version the rollout engines serve (the train step of their weights).
        trained: train steps done.
        explored: explore steps done (their experiences written).
        request: ``dynamic_by_explorer``: the explore step that asked for new weights and waits
            for them (``None``: no request open).
        explorer_done: the explore loop has ended (its output is closed).
        trainer_done: the train loop has ended (nothing will push weights any more).
    """

    version: int = 0
    trained: int = 0
    explored: int = 0
    request: Optional[int] = None
    explorer_done: bool = False
    trainer_done: bool = False

    @classmethod
    def at(cls, step: int) -> SyncClock:
        """A run starting (or resuming) at train step ``step``: its weights are served."""
        return cls(version=int(step), trained=int(step))

    def served(self, version: int) -> None:
        """The engines now serve ``version``."""
        self.version = int(version)

    def explored_to(self, step: int) -> None:
        """Explore step ``step`` is done."""
        self.explored = int(step)

    def trained_to(self, step: int) -> None:
        """Train step ``step`` is done."""
        self.trained = int(step)
