"""REINFORCE advantage (``"reinforce"``): the raw reward, no baseline.

``A_i = r_i`` broadcast over the action mask. Experiences are still grouped by task so the
reported ``reward_mean`` is the mean over tasks of each task's mean reward (as Trinity-RFT).
"""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from trinity.algorithm.advantage_fn._vectorized import VectorizedGroupAdvantage
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.advantage_fn.functional import group_stats
from trinity.algorithm.args import GroupAdvantageArgs

__all__ = ["REINFORCEGroupAdvantage"]


@ADVANTAGE_FN.register_module("reinforce")
class REINFORCEGroupAdvantage(VectorizedGroupAdvantage):
    """REINFORCE group advantage (no arguments). Metric: ``reward_mean``."""

    class Args(GroupAdvantageArgs):
        """``advantage_fn_args`` of ``reinforce``."""

    algorithm_name = "reinforce"

    def vector_advantages(
        self, rewards: Tensor, group_index: Tensor, num_groups: int, exps: Optional[list]
    ) -> tuple[Tensor, Optional[Tensor], dict[str, float]]:
        stats = group_stats(rewards, group_index, num_groups)
        metrics = {"reward_mean": stats.mean} if num_groups else {}
        return rewards.clone(), None, metrics

    @classmethod
    def default_args(cls) -> dict:
        return {}
