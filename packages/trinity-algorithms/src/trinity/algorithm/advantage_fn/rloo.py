"""RLOO advantage (``"rloo"``): reward minus the mean reward of the group's other members.

REINFORCE Leave-One-Out (https://arxiv.org/abs/2402.14740):
``A_i = r_i - mean_{j != i} r_j = (r_i - mean_g) * n / (n - 1)``, an unbiased baseline (it does
not depend on sample ``i``). Numerically verl's ``compute_rloo_outcome_advantage`` (tested).

Trinity-RFT computes RLOO in the trainer on the collated batch; here it is a group advantage
computed in the experience pipeline, and ``__call__`` also accepts a collated
:class:`~trinity.common.experience.Experiences` batch, so either placement works.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from trinity.algorithm.advantage_fn._vectorized import (
    REWARD_DTYPE,
    VectorizedGroupAdvantage,
    experience_rewards,
)
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.advantage_fn.functional import group_stats, rloo_advantages
from trinity.algorithm.args import GroupAdvantageArgs
from trinity.common.experience import Experience

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

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience]
    ) -> tuple[list[Experience], dict]:
        """One group, written plainly; same numbers as ``__call__``."""
        with torch.no_grad():
            rewards = experience_rewards(exps, self.algorithm_name)
            n = len(exps)
            if n == 1:
                scores = torch.zeros(1, dtype=REWARD_DTYPE) if self.zero_singletons else rewards
            elif bool(rewards.max() == rewards.min()):
                scores = torch.zeros_like(rewards)
            else:
                scores = (rewards - rewards.mean()) * (n / (n - 1))
            for exp, score in zip(exps, scores.float(), strict=True):
                exp.advantages = score * exp.action_mask
                exp.returns = exp.advantages.clone()
            std = float(rewards.std()) if n > 1 else 0.0
        return exps, {"reward_mean": float(rewards.mean()), "reward_std": std}

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
