"""Advantage functions: :class:`AdvantageFn`, :class:`GroupAdvantage`, ``ADVANTAGE_FN``.

Two places compute advantages:

* in the experience pipeline, before the trainer (``compute_in_trainer() -> False``): the function
  receives the list of :class:`~trinity.common.experience.Experience` of one explore step and
  sets ``advantages`` / ``returns`` on each (group-based methods: GRPO, OPMD, RLOO ...);
* in the trainer (``compute_in_trainer() -> True``): the function receives the collated batch
  (:class:`~trinity.common.experience.Experiences`, with critic ``values`` where used) and returns
  it with ``advantages`` / ``returns`` ``[batch, response_len]`` (GAE for PPO).

The math lives in pure tensor functions (``trinity.algorithm.advantage_fn.functional``); the
classes only group, call them, and write results back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trinity.common.experience import Experience
from trinity.utils.monitor import gather_metrics
from trinity.utils.registry import Registry

__all__ = [
    "ADVANTAGE_FN",
    "GROUP_METRICS_PREFIX",
    "AdvantageFn",
    "GroupAdvantage",
    "gather_group_metrics",
]

#: Per-group metrics are reported as ``group_advantages/<key>/mean|max|min`` (Trinity-RFT).
GROUP_METRICS_PREFIX = "group_advantages"


def gather_group_metrics(per_group: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """``group_advantages/<key>/mean|max|min`` over the groups' metric dicts.

    Values are rounded to float32 first, as Trinity-RFT computes them, so a metric reads the
    same there and here (``reward_std/mean == torch.std(rewards_float32).item()``).
    """
    rounded = [{k: float(np.float32(v)) for k, v in m.items()} for m in per_group]
    return gather_metrics(rounded, GROUP_METRICS_PREFIX)


ADVANTAGE_FN: Registry[type[AdvantageFn]] = Registry("advantage_fn")


class AdvantageFn(ABC):
    """Base class of advantage functions."""

    def __init__(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)

    @abstractmethod
    def __call__(self, exps: Any, **kwargs: Any) -> tuple[Any, dict]:
        """Compute advantages and returns; return the input with them set, and metrics."""

    @classmethod
    def default_args(cls) -> dict:
        """Initialization arguments used where the config gives none."""
        return {}

    @classmethod
    def compute_in_trainer(cls) -> bool:
        """Whether the trainer computes these advantages (on the collated batch)."""
        return True


class GroupAdvantage(AdvantageFn):
    """Advantages computed per group of experiences (e.g. the runs of one task).

    Subclasses say how to group (:meth:`group_experiences`) and how to score one group
    (:meth:`calculate_group_advantage`); ``__call__`` does the rest and averages the groups'
    metrics (:func:`gather_group_metrics`: ``group_advantages/<key>/mean|max|min``). The
    built-ins score all groups of a step at once instead (``BatchedGroupAdvantage`` in
    ``_vectorized``), and their ``calculate_group_advantage`` runs that same code on one group.
    """

    @abstractmethod
    def group_experiences(self, exps: list[Experience]) -> dict[str, list[Experience]]:
        """Split one step's experiences into groups keyed by a group id."""

    @abstractmethod
    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience]
    ) -> tuple[list[Experience], dict]:
        """Set ``advantages`` / ``returns`` on the experiences of one group; return metrics."""

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict]:
        """Trinity-RFT's entry point (its group advantages are experience operators): the
        same as calling the function."""
        return self(exps)

    def __call__(self, exps: list[Experience], **kwargs: Any) -> tuple[list[Experience], dict]:
        out: list[Experience] = []
        per_group: list[Mapping[str, float]] = []
        for group_id, group in self.group_experiences(exps).items():
            done, metrics = self.calculate_group_advantage(group_id, group)
            out.extend(done)
            per_group.append(metrics or {})
        return out, gather_group_metrics(per_group)

    @classmethod
    def compute_in_trainer(cls) -> bool:
        return False
