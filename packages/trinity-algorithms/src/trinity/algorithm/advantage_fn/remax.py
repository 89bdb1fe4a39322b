"""ReMax advantage (``"remax"``): return minus the reward of the greedy response.

ReMax (https://arxiv.org/abs/2310.10505) uses the reward of a greedy (argmax) decode of the
same prompt as the baseline: ``A_t = sum_{k >= t} r_k - b``. Runs in the trainer on the collated
batch. Numerically verl's ``compute_remax_outcome_advantage`` (tested).
"""

from __future__ import annotations

from typing import Any, Optional

from torch import Tensor

from trinity.algorithm.advantage_fn._trainer import (
    batch_token_level_rewards,
    require_batch_field,
    set_batch_advantages,
)
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN, AdvantageFn
from trinity.algorithm.advantage_fn.functional import remax_advantages_returns
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

    def __call__(  # type: ignore[override]
        self, exps: Experiences, reward_baselines: Optional[Tensor] = None, **kwargs: Any
    ) -> tuple[Experiences, dict]:
        baselines = require_batch_field(
            exps,
            "reward_baselines",
            reward_baselines,
            what="reward baseline",
            missing="remax advantage needs reward_baselines [B] (the greedy response's reward): "
            "pass reward_baselines=..., or set batch.custom_fields['reward_baselines']",
        )
        advantages, returns = remax_advantages_returns(
            batch_token_level_rewards(exps), baselines, exps.action_mask
        )
        return set_batch_advantages(exps, advantages, returns)
