"""SFT loss (``sft``): negative log-likelihood over the action mask."""

from __future__ import annotations

from typing import Any, Optional

from torch import Tensor

from trinity.algorithm.args import Field, PolicyLossArgs
from trinity.algorithm.policy_loss_fn.functional import metrics_to_floats, sft_loss
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn

__all__ = ["SFTLossFn"]


@POLICY_LOSS_FN.register_module("sft")
class SFTLossFn(PolicyLossFn):
    """``aggregate(-logprob, action_mask)``.

    Args:
        loss_agg_mode: see :func:`trinity.algorithm.utils.aggregate_loss`.
        use_token_level_loss: Trinity-RFT's older switch, kept so old configs still work:
            ``True`` means ``token-mean``, ``False`` means ``seq-mean-token-mean``; when given
            it overrides ``loss_agg_mode``.
    """

    class Args(PolicyLossArgs):
        """``policy_loss_fn_args`` of ``sft``."""

        use_token_level_loss: Optional[bool] = Field(
            None, description="Trinity-RFT's old switch: true = token-mean, false = seq-mean."
        )

    def __init__(
        self,
        backend: str = "verl",
        loss_agg_mode: str = "token-mean",
        use_token_level_loss: Optional[bool] = None,
    ) -> None:
        super().__init__(backend=backend)
        if use_token_level_loss is not None:
            loss_agg_mode = "token-mean" if use_token_level_loss else "seq-mean-token-mean"
        self.loss_agg_mode = loss_agg_mode

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        action_mask: Tensor,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, float]]:
        """``logprob``/``action_mask`` ``[batch, response_len]``; returns loss, float metrics."""
        loss, metrics = sft_loss(logprob, action_mask, loss_agg_mode=self.loss_agg_mode)
        return loss, metrics_to_floats(metrics)

    @classmethod
    def default_args(cls) -> dict:
        return {"loss_agg_mode": "token-mean"}
