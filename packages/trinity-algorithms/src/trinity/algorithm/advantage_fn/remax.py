"""ReMax advantage (``"remax"``): return minus the reward of the greedy response.

ReMax (https://arxiv.org/abs/2310.10505) uses the reward of a greedy (argmax) decode of the
same prompt as the baseline: ``A_t = sum_{k >= t} r_k - b``. Runs in the trainer on the collated
batch. Numerically verl's ``compute_remax_outcome_advantage`` (tested).
"""

from __future__ import annotations

from typing import Any, Optional

from torch import Tensor

from trinity.algorithm.advantage_fn._trainer import (
    batch_field,
    batch_token_level_rewards,
    masked_stats,
)
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN, AdvantageFn
from trinity.algorithm.advantage_fn.functional import check_finite, remax_advantages_returns
from trinity.algorithm.args import ComponentArgs
from trinity.common.experience import Experiences

__all__ = ["REMAXAdvantageFn"]


@ADVANTAGE_FN.register_module("remax")
class REMAXAdvantageFn(AdvantageFn):
    """ReMax advantages and returns (no arguments).

    ``__call__(batch, reward_baselines=None)``: the greedy rewards ``[B]`` come from the
    keyword, else ``batch.reward_baselines``, else ``batch.custom_fields["reward_baselines"]``
    (e.g. a :class:`~trinity.common.experience.CustomField` from
    ``info["reward_baseline"]``). Sets ``batch.advantages`` / ``batch.returns`` ``[B, R]``.
    """

    class Args(ComponentArgs):
        """``advantage_fn_args`` of ``remax``: none."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

    def __call__(  # type: ignore[override]
        self, exps: Experiences, reward_baselines: Optional[Tensor] = None, **kwargs: Any
    ) -> tuple[Experiences, dict]:
        baselines = batch_field(exps, "reward_baselines", reward_baselines)
        if baselines is None:
            raise ValueError(
                "remax advantage needs reward_baselines [B] (the greedy response's reward): "
                "pass reward_baselines=..., or set batch.custom_fields['reward_baselines']"
            )
        check_finite(baselines, exps.eids, what="reward baseline")
        rewards = batch_token_level_rewards(exps)
        advantages, returns = remax_advantages_returns(rewards, baselines, exps.action_mask)
        exps.advantages = advantages
        exps.returns = returns
        return exps, masked_stats(returns, exps.action_mask, "returns")

    @classmethod
    def default_args(cls) -> dict:
        return {}

    @classmethod
    def compute_in_trainer(cls) -> bool:
        return True
