"""A reward for the real-run test whose split by the guide's RewardFilter is known in advance.

A tiny random model answers arithmetic at random, so a reward from correctness would make the
number of experiences the filter keeps a matter of luck. Here rows carry ``keep`` (0 or 1):
the reward is ``keep`` plus 0.01 per response character (at most 0.09). With the guide's
``threshold: 0.1`` every run of a ``keep: 0`` row is filtered and every run of a ``keep: 1``
row is kept, while runs of one task still differ (a signal for OPMD's group baselines).
"""

from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn


@REWARD_FUNCTIONS.register_module("keep_flag_reward")
class KeepFlagReward(RewardFn):
    def __call__(self, response=None, raw_task=None, **kwargs):
        return {
            "keep": 1.0 if (raw_task or {}).get("keep") else 0.0,
            "length_bonus": 0.01 * min(len(response or ""), 9),
        }
