"""OPMD policy loss (``opmd``), as in the algorithm development guide."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from trinity.algorithm.args import Field, NonNegFloat, PolicyLossArgs
from trinity.algorithm.policy_loss_fn.functional import metrics_to_floats, opmd_loss
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn

__all__ = ["OPMDPolicyLossFn"]


@POLICY_LOSS_FN.register_module("opmd")
class OPMDPolicyLossFn(PolicyLossFn):
    """OPMD: ``aggregate(-advantages * logprob) / (1 + tau)``.

    Needs only ``logprob``, ``action_mask`` and ``advantages`` (the guide's signature; the
    advantages come from the ``opmd`` group advantage). See
    :func:`~trinity.algorithm.policy_loss_fn.functional.opmd_loss`.
    """

    class Args(PolicyLossArgs):
        """``policy_loss_fn_args`` of ``opmd``."""

        # the loss is divided by 1 + tau: 0 is valid (AsymRE's examples write tau: 0), a
        # negative tau would flip or blow up the loss near -1
        tau: NonNegFloat = Field(1.0, description="Regularisation temperature.")

    def __init__(
        self, backend: str = "verl", tau: float = 1.0, loss_agg_mode: str = "token-mean"
    ) -> None:
        super().__init__(backend=backend)
        self.tau = tau
        self.loss_agg_mode = loss_agg_mode

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        action_mask: Tensor,
        advantages: Tensor,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, float]]:
        """All inputs ``[batch, response_len]``; returns the scalar loss and float metrics."""
        loss, metrics = opmd_loss(
            logprob, advantages, action_mask, tau=self.tau, loss_agg_mode=self.loss_agg_mode
        )
        return loss, metrics_to_floats(metrics)

    @classmethod
    def default_args(cls) -> dict:
        return {"tau": 1.0, "loss_agg_mode": "token-mean"}
