"""REINFORCE++ advantage (``"reinforceplusplus"``): discounted token returns, batch-whitened.

REINFORCE++ (https://arxiv.org/abs/2501.03262) needs no critic: each token's return
``G_t = r_t + gamma * G_{t+1}`` (over generated tokens) is whitened across the whole batch,
which plays the role of the baseline. Runs in the trainer on the collated batch, where
token-level rewards (with the KL penalty folded in) exist. Numerically verl's
``compute_reinforce_plus_plus_outcome_advantage`` (tested).
"""

from __future__ import annotations

from typing import Any

from trinity.algorithm.advantage_fn._trainer import (
    batch_token_level_rewards,
    set_batch_advantages,
)
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN, AdvantageFn
from trinity.algorithm.advantage_fn.functional import reinforce_plus_plus_advantages_returns
from trinity.algorithm.args import ComponentArgs, Field, Probability
from trinity.common.experience import Experiences

__all__ = ["REINFORCEPLUSPLUSAdvantageFn"]


@ADVANTAGE_FN.register_module("reinforceplusplus")
class REINFORCEPLUSPLUSAdvantageFn(AdvantageFn):
    """REINFORCE++ advantages and returns.

    Args:
        gamma: discount factor of the token returns.

    Sets ``batch.advantages`` (whitened returns times the action mask) and ``batch.returns``
    ``[B, R]``.
    """

    class Args(ComponentArgs):
        """``advantage_fn_args`` of ``reinforceplusplus``."""

        gamma: Probability = Field(1.0, description="Discount factor.")

    def __init__(self, gamma: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gamma = float(gamma)

    def __call__(self, exps: Experiences, **kwargs: Any) -> tuple[Experiences, dict]:  # type: ignore[override]
        advantages, returns = reinforce_plus_plus_advantages_returns(
            batch_token_level_rewards(exps), exps.action_mask, gamma=self.gamma
        )
        return set_batch_advantages(exps, advantages, returns)

    @classmethod
    def default_args(cls) -> dict:
        return {"gamma": 1.0}
