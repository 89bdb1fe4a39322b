"""Pure importance-sampling policy loss (``importance_sampling``), for on-policy distillation."""

from __future__ import annotations

from trinity.algorithm.args import PolicyLossArgs
from trinity.algorithm.policy_loss_fn.functional import (
    importance_sampling_loss,
)
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, RatioPolicyLossFn

__all__ = ["ImportanceSamplingLossFn"]


@POLICY_LOSS_FN.register_module("importance_sampling")
class ImportanceSamplingLossFn(RatioPolicyLossFn):
    """``-advantages * exp(logprob - old_logprob)``, no clipping.

    See :func:`~trinity.algorithm.policy_loss_fn.functional.importance_sampling_loss`.
    """

    class Args(PolicyLossArgs):
        """``policy_loss_fn_args`` of ``importance_sampling``: only the aggregation."""

    loss_fn = staticmethod(importance_sampling_loss)

    def __init__(self, backend: str = "verl", loss_agg_mode: str = "token-mean") -> None:
        super().__init__(backend=backend)
        self.loss_agg_mode = loss_agg_mode

    @classmethod
    def default_args(cls) -> dict:
        return {"loss_agg_mode": "token-mean"}
