"""GSPO policy loss (``gspo``): PPO clipping on a sequence-level importance ratio."""

from __future__ import annotations

from typing import Any, Optional

from trinity.algorithm.args import ClipRangeArgs, Field, LossAggMode, NonNegFloat
from trinity.algorithm.policy_loss_fn.functional import gspo_loss
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, RatioPolicyLossFn
from trinity.algorithm.policy_loss_fn.ppo import resolve_clip_range

__all__ = ["GSPOLossFn"]


@POLICY_LOSS_FN.register_module("gspo")
class GSPOLossFn(RatioPolicyLossFn):
    """GSPO-token loss; see :func:`~trinity.algorithm.policy_loss_fn.functional.gspo_loss`.

    Defaults (``clip_range_low=3e-4``, ``clip_range_high=4e-4``, ``seq-mean-token-mean``) are
    Trinity-RFT's, after verl PR #2775: the sequence ratio is a per-token geometric mean, so
    the useful ranges are tiny.
    """

    class Args(ClipRangeArgs):
        """``policy_loss_fn_args`` of ``gspo``."""

        clip_range: Optional[NonNegFloat] = Field(None, description="Symmetric clip epsilon.")
        clip_range_low: Optional[NonNegFloat] = Field(3e-4, description="Lower clip epsilon.")
        clip_range_high: Optional[NonNegFloat] = Field(4e-4, description="Upper clip epsilon.")
        loss_agg_mode: LossAggMode = Field("seq-mean-token-mean", description="Aggregation.")

    loss_fn = staticmethod(gspo_loss)

    def __init__(
        self,
        backend: str = "verl",
        clip_range: Optional[float] = None,
        clip_range_low: Optional[float] = None,
        clip_range_high: Optional[float] = None,
        loss_agg_mode: str = "seq-mean-token-mean",
    ) -> None:
        super().__init__(backend=backend)
        self.clip_range_low, self.clip_range_high = resolve_clip_range(
            clip_range, clip_range_low, clip_range_high
        )
        self.loss_agg_mode = loss_agg_mode

    def loss_settings(self) -> dict[str, Any]:
        return {"clip_low": self.clip_range_low, "clip_high": self.clip_range_high}

    @classmethod
    def default_args(cls) -> dict:
        return {
            "clip_range_low": 0.0003,
            "clip_range_high": 0.0004,
            "loss_agg_mode": "seq-mean-token-mean",
        }
