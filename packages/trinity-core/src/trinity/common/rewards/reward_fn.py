"""The reward-function contract and its registry.

A reward function scores one response and returns named components
(``{"accuracy": 1.0, "format": 0.1}``): workflows sum them into ``Experience.reward`` and log
each one as a metric, so a shaped reward stays inspectable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from trinity.utils.registry import Registry

__all__ = ["REWARD_FUNCTIONS", "RewardFn"]

REWARD_FUNCTIONS: Registry[type[RewardFn]] = Registry("reward_functions")


class RewardFn(ABC):
    """Base class of reward functions.

    Constructed once per workflow with the task set's ``reward_fn_args``; called once per
    response with keyword arguments (``response=...``, ``truth=...``, and whatever else the
    workflow passes).
    """

    def __init__(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)

    @abstractmethod
    def __call__(self, **kwargs: Any) -> dict[str, float]:
        """Return the reward components of one response (summed into the reward)."""


def __getattr__(name: str) -> Any:
    """Reward classes by name (``from trinity.common.rewards.reward_fn import MathRewardFn``,
    Trinity-RFT's older path): they ship in other distributions and resolve through the
    ``trinity.reward_functions`` entry points."""
    return REWARD_FUNCTIONS.module_getattr(__name__, name)
