"""GRPO advantage (``"grpo"``): each run's reward standardized within its task's group.

``A_i = (r_i - mean_g) / (std_g + epsilon)`` broadcast over the response's action mask
(https://arxiv.org/abs/2402.03300), computed in the experience pipeline before the trainer.
Numerically verl's ``compute_grpo_outcome_advantage`` (tested), with Trinity-RFT's options.
"""

from __future__ import annotations

import random
from typing import Any, Optional

import torch
from torch import Tensor

from trinity.algorithm.advantage_fn._vectorized import (
    REWARD_DTYPE,
    VectorizedGroupAdvantage,
    duplicate_experience,
)
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.advantage_fn.functional import GroupStats, group_stats, grpo_advantages
from trinity.algorithm.args import Field, GroupAdvantageArgs, NonNegFloat, PosFloat, StdLevel
from trinity.common.experience import Experience

__all__ = ["GRPOGroupedAdvantage", "check_std_cal_level", "grpo_group_scores", "step_std"]

_STD_LEVELS = ("group", "batch", "none")


def check_std_cal_level(std_cal_level: str) -> str:
    """``std_cal_level`` if it is ``"group"``, ``"batch"`` or ``"none"``; ``ValueError`` if not."""
    if std_cal_level not in _STD_LEVELS:
        raise ValueError(f"std_cal_level must be one of {_STD_LEVELS}, got {std_cal_level!r}")
    return std_cal_level


def step_std(rewards: Tensor) -> Tensor:
    """The std ``std_cal_level="batch"`` divides by: over every reward of the step (1 for one)."""
    return rewards.std() if rewards.numel() > 1 else torch.tensor(1.0)


def grpo_group_scores(
    rewards: Tensor,
    group_index: Tensor,
    num_groups: int,
    *,
    epsilon: float,
    std_cal_level: str,
    zero_singletons: bool,
    std_threshold: Optional[float],
    batch_std: Optional[Tensor] = None,
) -> tuple[Tensor, GroupStats, Tensor]:
    """GRPO scores of every group at once, with the options ``grpo`` and ``step_wise_grpo`` share.

    ``rewards`` ``[N]`` (float64) in groups ``group_index`` ``[N]``; ``std_cal_level``
    ``"group"`` divides by each group's std, ``"batch"`` by ``batch_std`` (default: the std of
    ``rewards``, :func:`step_std`), ``"none"`` not at all. A group is skipped when
    ``std_threshold`` is set and it has one member or a std ``<=`` it.

    Returns:
        ``(scores [N], the groups' stats, skipped [G] bool)``.
    """
    stats = group_stats(rewards, group_index, num_groups)
    if std_cal_level == "batch" and batch_std is None:
        batch_std = step_std(rewards)
    scores = grpo_advantages(
        rewards,
        group_index,
        epsilon=epsilon,
        norm_by_std=std_cal_level != "none",
        batch_std=batch_std if std_cal_level == "batch" else None,
        zero_singletons=zero_singletons,
        stats=stats,
    )
    skipped = torch.zeros(num_groups, dtype=torch.bool)
    if std_threshold is not None:
        skipped = (stats.count == 1) | (stats.std <= std_threshold)
    return scores, stats, skipped


@ADVANTAGE_FN.register_module("grpo")
class GRPOGroupedAdvantage(VectorizedGroupAdvantage):
    """GRPO group advantage.

    Args:
        epsilon: added to the std (no division by zero for constant groups).
        std_threshold: if set, groups whose reward std is ``<=`` it (and one-member groups) are
            dropped from the step: they carry no learning signal (Polaris / DAPO-style filter).
        duplicate_experiences: with ``std_threshold``, refill the step to its original number
            of groups by duplicating random kept groups.
        rank_penalty: if set, rewards are scaled by ``1 - rank / n * rank_penalty`` where
            ``rank`` orders the group by mean old log-prob (https://arxiv.org/pdf/2506.02355).
        std_cal_level: ``"group"`` (std per group), ``"batch"`` (mean per group, std over the
            whole step, https://arxiv.org/pdf/2508.08221) or ``"none"`` (no std division, as
            Dr. GRPO; Trinity-RFT's step-wise GRPO name for it).
        norm_adv_by_std_in_grpo: verl's switch; ``False`` is ``std_cal_level="none"``.

    One-member groups keep verl's value, ``reward / (1 + epsilon)`` (``zero_singletons=True``
    gives 0); constant groups get exactly 0.
    """

    class Args(GroupAdvantageArgs):
        """``advantage_fn_args`` of ``grpo``."""

        epsilon: PosFloat = Field(1e-6, description="Added to the std before dividing.")
        std_threshold: Optional[NonNegFloat] = Field(
            None, description="Drop groups whose reward std is at or below it."
        )
        duplicate_experiences: bool = Field(
            False, description="Refill dropped groups by duplicating kept ones."
        )
        rank_penalty: Optional[NonNegFloat] = Field(
            None, description="Scale rewards by 1 - rank / n * rank_penalty."
        )
        std_cal_level: StdLevel = Field("group", description="group, batch or none.")
        norm_adv_by_std_in_grpo: bool = Field(True, description="verl's switch; false = none.")

    algorithm_name = "grpo"

    def __init__(
        self,
        epsilon: float = 1e-6,
        std_threshold: Optional[float] = None,
        duplicate_experiences: bool = False,
        rank_penalty: Optional[float] = None,
        std_cal_level: str = "group",
        norm_adv_by_std_in_grpo: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_std_cal_level(std_cal_level)
        self.epsilon = float(epsilon)
        self.std_threshold = std_threshold
        self.duplicate_experiences = duplicate_experiences
        self.rank_penalty = rank_penalty
        self.std_cal_level = std_cal_level if norm_adv_by_std_in_grpo else "none"

    def vector_advantages(
        self,
        rewards: Tensor,
        group_index: Tensor,
        num_groups: int,
        exps: Optional[list],
        precomputed_std: Optional[Tensor] = None,
    ) -> tuple[Tensor, Optional[Tensor], dict[str, Any]]:
        """Every group's GRPO scores; ``precomputed_std`` replaces the step's std for
        ``std_cal_level="batch"`` (scoring one group of a larger step).

        Metrics per group: ``reward_mean`` / ``reward_std`` (0 / 1 for a one-member group, as
        Trinity-RFT reports them) and ``filtered_count`` (the group's size when skipped, else
        0); for the step, ``skipped_group_ratio``.
        """
        batch_std = None
        if self.std_cal_level == "batch":  # of the rewards before any rank penalty
            batch_std = precomputed_std if precomputed_std is not None else step_std(rewards)
        if self.rank_penalty is not None and exps is not None:
            rewards = rewards * (1 - self._group_ranks(exps, group_index) * self.rank_penalty)
        adv, stats, skipped_groups = grpo_group_scores(
            rewards,
            group_index,
            num_groups,
            epsilon=self.epsilon,
            std_cal_level=self.std_cal_level,
            zero_singletons=self.zero_singletons,
            std_threshold=self.std_threshold,
            batch_std=batch_std,
        )
        metrics: dict[str, Any] = dict(self.group_metric_means(stats, singleton_unit=True))
        keep = ~skipped_groups[group_index] if self.std_threshold is not None else None
        # per group (group_advantages/filtered_count/mean, Trinity-RFT's) and in total
        metrics["filtered_count"] = torch.where(
            skipped_groups,
            stats.count.to(REWARD_DTYPE),
            torch.zeros(num_groups, dtype=REWARD_DTYPE),
        )
        metrics["skipped_group_ratio"] = float(skipped_groups.float().mean()) if num_groups else 0.0
        return adv, keep, metrics

    def _group_ranks(self, exps: list[Experience], group_index: Tensor) -> Tensor:
        """``rank / n`` of each experience's mean old log-prob within its group (ascending).

        Lexicographic sort by (group, log-prob) with two stable argsorts; the rank is the
        position in the sorted order minus the group's start.
        """
        lp = torch.tensor([float(_mean_logprob(e)) for e in exps], dtype=REWARD_DTYPE)
        by_lp = torch.argsort(lp, stable=True)
        order = by_lp[torch.argsort(group_index[by_lp], stable=True)]
        counts = torch.bincount(group_index)
        starts = torch.cumsum(counts, 0) - counts
        ranks = torch.empty_like(group_index)
        ranks[order] = torch.arange(len(exps)) - starts[group_index[order]]
        n = counts[group_index].to(REWARD_DTYPE)
        # one-member groups are not rank-penalized (rank 0)
        return ranks.to(REWARD_DTYPE) / n

    def _post_filter(
        self,
        out: list[Experience],
        group_index: Tensor,
        keep: Optional[Tensor],
        exps: list[Experience],
    ) -> list[Experience]:
        if not self.duplicate_experiences or self.std_threshold is None or keep is None:
            return out
        kept_groups: dict[int, list[Experience]] = {}
        for i in torch.nonzero(keep).flatten().tolist():
            kept_groups.setdefault(int(group_index[i]), []).append(exps[i])
        n_groups = int(group_index.max()) + 1
        missing = n_groups - len(kept_groups)
        if missing == 0 or not kept_groups:
            return out
        valid = list(kept_groups.values())
        for _ in range(missing):
            out.extend(duplicate_experience(e) for e in random.choice(valid))
        return out

    @classmethod
    def default_args(cls) -> dict:
        return {
            "epsilon": 1e-6,
            "std_threshold": None,
            "duplicate_experiences": False,
            "rank_penalty": None,
            "std_cal_level": "group",
        }


def _mean_logprob(exp: Experience) -> Tensor:
    if exp.logprobs is None:
        raise ValueError(f"experience {exp.eid} has no logprobs; GRPO rank_penalty needs them")
    if exp.logprobs.numel() == 0:
        return torch.tensor(0.0)
    return exp.logprobs.float().mean()
