"""Trinity-RFT's module path of its math reward functions (``MathRewardFn``,
``MathBoxedRewardFn``): the classes ship in ``trinity-workflows`` and resolve here through the
``trinity.reward_functions`` entry points, so core imports no sibling."""

from typing import Any

from trinity.common.rewards.reward_fn import REWARD_FUNCTIONS


def __getattr__(name: str) -> Any:
    return REWARD_FUNCTIONS.module_getattr(__name__, name)
