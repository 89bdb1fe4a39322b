"""Reward functions: the :class:`RewardFn` contract and the ``REWARD_FUNCTIONS`` registry.

Built-in reward functions live in ``trinity-workflows`` and register through the
``trinity.reward_functions`` entry-point group; their class names (``MathRewardFn`` ...) resolve
here too.
"""

from typing import Any

from trinity.common.rewards.reward_fn import REWARD_FUNCTIONS, RewardFn

__all__ = ["REWARD_FUNCTIONS", "RewardFn"]


def __getattr__(name: str) -> Any:
    return REWARD_FUNCTIONS.module_getattr(__name__, name)
