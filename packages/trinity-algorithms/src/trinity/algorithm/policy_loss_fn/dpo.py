"""DPO loss (``dpo``) on interleaved ``[chosen, rejected]`` rows."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from trinity.algorithm.args import Field, PolicyLossArgs, PosFloat
from trinity.algorithm.policy_loss_fn.functional import dpo_loss, metrics_to_floats
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn

__all__ = ["DPOLossFn"]


@POLICY_LOSS_FN.register_module("dpo")
class DPOLossFn(PolicyLossFn):
    """DPO; see :func:`~trinity.algorithm.policy_loss_fn.functional.dpo_loss`.

    Rows must come as ``collate_experiences`` lays out DPO pairs:
    ``[chosen_0, rejected_0, chosen_1, rejected_1, ...]``; ``ref_logprob`` comes from the
    reference model. The loss is per pair, so ``loss_agg_mode`` does not apply.

    Args:
        beta: inverse temperature of the implicit reward.
        label_smoothing: assumed label-noise rate (conservative DPO); 0 is plain DPO.
        sum_pairs_over_batch: reproduce Trinity-RFT's DPO, which sums log-ratios over all
            chosen and all rejected rows of the batch (the batch counts as one pair; an odd
            batch is accepted). Off by default: per-pair DPO is the paper's loss. See
            docs/compat.md.
    """

    class Args(PolicyLossArgs):
        """``policy_loss_fn_args`` of ``dpo`` (``loss_agg_mode`` is accepted, unused)."""

        beta: PosFloat = Field(0.1, description="Inverse temperature of the implicit reward.")
        label_smoothing: float = Field(
            0.0, ge=0.0, le=0.5, description="Assumed label-noise rate (conservative DPO)."
        )
        sum_pairs_over_batch: bool = Field(
            False,
            description="Trinity-RFT's DPO: one pair of sums over the batch (docs/compat.md).",
        )

    def __init__(
        self,
        backend: str = "verl",
        beta: float = 0.1,
        label_smoothing: float = 0.0,
        sum_pairs_over_batch: bool = False,
    ) -> None:
        super().__init__(backend=backend)
        self.beta = beta
        self.label_smoothing = label_smoothing
        self.sum_pairs_over_batch = sum_pairs_over_batch

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        ref_logprob: Tensor,
        action_mask: Tensor,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, float]]:
        """All inputs ``[2 * n_pairs, response_len]``; returns the scalar loss, float metrics."""
        loss, metrics = dpo_loss(
            logprob,
            ref_logprob,
            action_mask,
            beta=self.beta,
            label_smoothing=self.label_smoothing,
            sum_pairs_over_batch=self.sum_pairs_over_batch,
        )
        return loss, metrics_to_floats(metrics)

    @classmethod
    def default_args(cls) -> dict:
        return {"beta": 0.1, "label_smoothing": 0.0}
