"""Reward functions: the :class:`RewardFn` contract and the ``REWARD_FUNCTIONS`` registry.

Built-in reward functions live in ``trinity-workflows`` and register through the
``trinity.reward_functions`` entry-point group; their class names (``MathRewardFn`` ...) resolve
here too.
"""

from typing import Any

from trinity.common.rewards.reward_fn import REWARD_FUNCTIONS, RewardFn

__all__ = ["REWARD_FUNCTIONS", "RewardFn"]


def __getattr__(name: str) -> Any:
    if not name.startswith("_") and name[:1].isupper():
        found = REWARD_FUNCTIONS.find_by_attr(name)
        if found is not None:
            return found
    raise AttributeError(
        f"module {__name__!r} has no attribute {name!r} "
        f"(installed reward functions: {', '.join(REWARD_FUNCTIONS.list()) or 'none'})"
    )
