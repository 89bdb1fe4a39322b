"""SAPO policy loss (``sapo``): a smooth, temperature-controlled gate instead of hard clipping."""

from __future__ import annotations

from typing import Any

from trinity.algorithm.args import Field, PolicyLossArgs, PosFloat
from trinity.algorithm.policy_loss_fn.functional import sapo_loss
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, RatioPolicyLossFn
from trinity.common.config import model_validator

__all__ = ["SAPOPolicyLossFn"]


@POLICY_LOSS_FN.register_module("sapo")
class SAPOPolicyLossFn(RatioPolicyLossFn):
    """SAPO; see :func:`~trinity.algorithm.policy_loss_fn.functional.sapo_loss`.

    Follows the paper's objective (verl's implementation), not Trinity-RFT's surrogate; see
    the function's docstring for the difference.

    Args:
        tau_pos / tau_neg: gate temperatures for positive / non-positive advantages;
            ``tau_neg >= tau_pos`` (damp negative updates faster) is required.
        loss_agg_mode: see :func:`trinity.algorithm.utils.aggregate_loss` (the paper uses
            ``seq-mean-token-mean``; Trinity-RFT's default is ``token-mean``).
        trinity_rft_surrogate: use Trinity-RFT's surrogate ``-A * sg(gate) * logprob``
            instead of the paper's ``-gate * A`` (different loss value and gradient weight;
            see docs/compat.md).
    """

    class Args(PolicyLossArgs):
        """``policy_loss_fn_args`` of ``sapo`` (``tau_neg >= tau_pos``)."""

        tau_pos: PosFloat = Field(1.0, description="Gate temperature, positive advantages.")
        tau_neg: PosFloat = Field(1.05, description="Gate temperature, other advantages.")
        trinity_rft_surrogate: bool = Field(
            False, description="Trinity-RFT's surrogate -A * sg(gate) * logprob (docs/compat.md)."
        )

        @model_validator(mode="after")
        def _neg_damps_faster(self) -> Any:
            if self.tau_neg < self.tau_pos:
                raise ValueError(f"tau_neg ({self.tau_neg}) must be >= tau_pos ({self.tau_pos})")
            return self

    loss_fn = staticmethod(sapo_loss)

    def __init__(
        self,
        backend: str = "verl",
        tau_pos: float = 1.0,
        tau_neg: float = 1.05,
        loss_agg_mode: str = "token-mean",
        trinity_rft_surrogate: bool = False,
    ) -> None:
        super().__init__(backend=backend)
        self.trinity_rft_surrogate = trinity_rft_surrogate
        if tau_pos <= 0 or tau_neg <= 0:
            raise ValueError(f"tau_pos and tau_neg must be > 0, got {tau_pos}, {tau_neg}")
        if tau_neg < tau_pos:
            raise ValueError(f"tau_neg ({tau_neg}) should be >= tau_pos ({tau_pos})")
        self.tau_pos = tau_pos
        self.tau_neg = tau_neg
        self.loss_agg_mode = loss_agg_mode

    def loss_settings(self) -> dict[str, Any]:
        return {
            "tau_pos": self.tau_pos,
            "tau_neg": self.tau_neg,
            "trinity_rft_surrogate": self.trinity_rft_surrogate,
        }

    @classmethod
    def default_args(cls) -> dict:
        return {"tau_pos": 1.0, "tau_neg": 1.05, "loss_agg_mode": "token-mean"}
