"""Trinity-RFT's module path of its RLCR calibration reward (``RLCRRewardFn``, ``rlcr_reward``):
the class ships in ``trinity-workflows`` and resolves here through the
``trinity.reward_functions`` entry points, so core imports no sibling."""

from typing import Any

from trinity.common.rewards.reward_fn import REWARD_FUNCTIONS


def __getattr__(name: str) -> Any:
    return REWARD_FUNCTIONS.module_getattr(__name__, name)
