"""RLOO advantage (``"rloo"``): reward minus the mean reward of the group's other members.

REINFORCE Leave-One-Out (https://arxiv.org/abs/2402.14740):
``A_i = r_i - mean_{j != i} r_j = (r_i - mean_g) * n / (n - 1)``, an unbiased baseline (it does
not depend on sample ``i``). Numerically verl's ``compute_rloo_outcome_advantage`` (tested).

Trinity-RFT computes RLOO in the trainer on the collated batch; here it is a group advantage
computed in the experience pipeline, and ``__call__`` also accepts a collated
:class:`~trinity.common.experience.Experiences` batch, so either placement works.
"""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from trinity.algorithm.advantage_fn._vectorized import (
    VectorizedGroupAdvantage,
)
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.advantage_fn.functional import group_stats, rloo_advantages
from trinity.algorithm.args import GroupAdvantageArgs

__all__ = ["RLOOAdvantageFn"]


@ADVANTAGE_FN.register_module("rloo")
class RLOOAdvantageFn(VectorizedGroupAdvantage):
    """RLOO group advantage (no arguments). Metrics: ``reward_mean``, ``reward_std``.

    A one-member group has no "others": advantage 0 (verl's vectorized RLOO; verl's loop
    version and Trinity-RFT keep the raw reward, ``zero_singletons=False``).
    """

    class Args(GroupAdvantageArgs):
        """``advantage_fn_args`` of ``rloo``."""

    algorithm_name = "rloo"

    def vector_advantages(
        self, rewards: Tensor, group_index: Tensor, num_groups: int, exps: Optional[list]
    ) -> tuple[Tensor, Optional[Tensor], dict[str, float]]:
        stats = group_stats(rewards, group_index, num_groups)
        adv = rloo_advantages(
            rewards, group_index, zero_singletons=self.zero_singletons, stats=stats
        )
        return adv, None, self.group_metric_means(stats)

    @classmethod
    def default_args(cls) -> dict:
        return {}
