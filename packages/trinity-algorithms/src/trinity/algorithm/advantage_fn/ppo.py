"""PPO advantage (``"ppo"``): Generalized Advantage Estimation with critic values.

Runs in the trainer (``compute_in_trainer() -> True``) on the collated
:class:`~trinity.common.experience.Experiences` batch, after the critic has produced
``values [B, R]``. Numerically verl's ``compute_gae_advantage_return`` (tested), vectorized
(:func:`~trinity.algorithm.advantage_fn.functional.gae_advantages_returns`).
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
from trinity.algorithm.advantage_fn.functional import gae_advantages_returns
from trinity.algorithm.args import ComponentArgs, Field, Probability
from trinity.common.experience import Experiences

__all__ = ["PPOAdvantageFn"]


@ADVANTAGE_FN.register_module("ppo")
class PPOAdvantageFn(AdvantageFn):
    """GAE advantages and returns.

    Args:
        gamma: discount factor.
        lam: GAE lambda (bias/variance trade-off; 1 = Monte-Carlo returns minus values).

    ``__call__(batch, values=None)``: ``values [B, R]`` come from the keyword, else
    ``batch.values``, else ``batch.custom_fields["values"]``. Token-level rewards are
    ``batch.token_level_rewards`` or, if unset, ``batch.rewards`` on each row's last response
    token. Sets ``batch.advantages`` (whitened over the action mask) and ``batch.returns``
    (``advantages + values`` before whitening), both ``[B, R]``.
    """

    class Args(ComponentArgs):
        """``advantage_fn_args`` of ``ppo`` (GAE)."""

        gamma: Probability = Field(1.0, description="Discount factor.")
        lam: Probability = Field(1.0, description="GAE lambda.")

    def __init__(self, gamma: float = 1.0, lam: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gamma = float(gamma)
        self.lam = float(lam)

    def __call__(  # type: ignore[override]
        self, exps: Experiences, values: Optional[Tensor] = None, **kwargs: Any
    ) -> tuple[Experiences, dict]:
        vals = require_batch_field(
            exps,
            "values",
            values,
            what="critic value",
            missing="ppo advantage needs critic values [B, R]: pass values=..., or set "
            "batch.values / batch.custom_fields['values']",
        )
        advantages, returns = gae_advantages_returns(
            batch_token_level_rewards(exps), vals, exps.action_mask, gamma=self.gamma, lam=self.lam
        )
        return set_batch_advantages(exps, advantages, returns)

    @classmethod
    def default_args(cls) -> dict:
        return {"gamma": 1.0, "lam": 1.0}
