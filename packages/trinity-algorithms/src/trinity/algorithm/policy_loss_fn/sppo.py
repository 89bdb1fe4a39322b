"""sPPO policy loss (``sppo``): the log-ratio surrogate on tokens inside a log-symmetric range."""

from __future__ import annotations

from typing import Any

from trinity.algorithm.args import Field, PolicyLossArgs, PosFloat
from trinity.algorithm.policy_loss_fn.functional import sppo_loss
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, RatioPolicyLossFn

__all__ = ["SPPOPolicyLossFn"]


@POLICY_LOSS_FN.register_module("sppo")
class SPPOPolicyLossFn(RatioPolicyLossFn):
    """sPPO; see :func:`~trinity.algorithm.policy_loss_fn.functional.sppo_loss`
    (Trinity-RFT's ``sPPOPolicyLossFn``).

    Args:
        epsilon: tokens train while ``1 / (1 + epsilon) <= pi / pi_old <= 1 + epsilon``.
        loss_agg_mode: see :func:`trinity.algorithm.utils.aggregate_loss`.
    """

    class Args(PolicyLossArgs):
        """``policy_loss_fn_args`` of ``sppo``."""

        epsilon: PosFloat = Field(0.3, description="Ratio range [1 / (1 + eps), 1 + eps].")

    loss_fn = staticmethod(sppo_loss)

    def __init__(
        self, backend: str = "verl", epsilon: float = 0.3, loss_agg_mode: str = "token-mean"
    ) -> None:
        super().__init__(backend=backend)
        if not epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}")
        self.epsilon = float(epsilon)
        self.loss_agg_mode = loss_agg_mode

    def loss_settings(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon}

    @classmethod
    def default_args(cls) -> dict:
        return {"epsilon": 0.3, "loss_agg_mode": "token-mean"}
