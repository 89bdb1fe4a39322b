"""TOPR policy loss (``topr``): tapered off-policy REINFORCE."""

from __future__ import annotations

from typing import Any

from trinity.algorithm.args import Field, PolicyLossArgs
from trinity.algorithm.policy_loss_fn.functional import topr_loss
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, RatioPolicyLossFn

__all__ = ["TOPRPolicyLossFn"]


@POLICY_LOSS_FN.register_module("topr")
class TOPRPolicyLossFn(RatioPolicyLossFn):
    """TOPR; see :func:`~trinity.algorithm.policy_loss_fn.functional.topr_loss`.

    Args:
        advantage_threshold: advantages at or below it count as negative examples, whose
            weight is the truncated ratio ``clip(pi / pi_old, 0, 1)``.
        loss_agg_mode: see :func:`trinity.algorithm.utils.aggregate_loss`.
    """

    class Args(PolicyLossArgs):
        """``policy_loss_fn_args`` of ``topr``."""

        advantage_threshold: float = Field(
            0.0, description="Advantages at or below it count as negative examples."
        )

    loss_fn = staticmethod(topr_loss)

    def __init__(
        self,
        backend: str = "verl",
        advantage_threshold: float = 0.0,
        loss_agg_mode: str = "token-mean",
    ) -> None:
        super().__init__(backend=backend)
        self.advantage_threshold = advantage_threshold
        self.loss_agg_mode = loss_agg_mode

    def loss_settings(self) -> dict[str, Any]:
        return {"advantage_threshold": self.advantage_threshold}

    @classmethod
    def default_args(cls) -> dict:
        return {"advantage_threshold": 0.0, "loss_agg_mode": "token-mean"}
