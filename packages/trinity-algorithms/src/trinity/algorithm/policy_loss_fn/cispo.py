"""CISPO policy loss (``cispo``): REINFORCE weighted by a clipped, stop-gradient IS ratio."""

from __future__ import annotations

from typing import Any

from trinity.algorithm.args import Field, NonNegFloat, PolicyLossArgs
from trinity.algorithm.policy_loss_fn.functional import cispo_loss
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, RatioPolicyLossFn

__all__ = ["CISPOPolicyLossFn"]


@POLICY_LOSS_FN.register_module("cispo")
class CISPOPolicyLossFn(RatioPolicyLossFn):
    """CISPO; see :func:`~trinity.algorithm.policy_loss_fn.functional.cispo_loss`.

    Args:
        clip_range_low / clip_range_high: IS weight clipped to ``[1 - low, 1 + high]``; the
            paper sets no lower bound (``low=1.0``) and tunes only ``high`` (0.28).
        loss_agg_mode: see :func:`trinity.algorithm.utils.aggregate_loss` (Trinity-RFT
            always used ``token-mean``, the default).
        mask_truncated: drop tokens whose weight was clipped in the direction the advantage
            pushes (Trinity-RFT's behaviour, default); ``False`` is verl's pure CISPO.
    """

    class Args(PolicyLossArgs):
        """``policy_loss_fn_args`` of ``cispo``."""

        clip_range_low: NonNegFloat = Field(1.0, description="IS weight clipped at 1 - low.")
        clip_range_high: NonNegFloat = Field(0.28, description="IS weight clipped at 1 + high.")
        mask_truncated: bool = Field(
            True, description="Drop tokens clipped in the direction the advantage pushes."
        )

    loss_fn = staticmethod(cispo_loss)

    def __init__(
        self,
        backend: str = "verl",
        clip_range_low: float = 1.0,
        clip_range_high: float = 0.28,
        loss_agg_mode: str = "token-mean",
        mask_truncated: bool = True,
    ) -> None:
        super().__init__(backend=backend)
        if clip_range_low is None or clip_range_high is None:
            raise ValueError("clip_range_low and clip_range_high must be specified")
        self.clip_range_low = clip_range_low
        self.clip_range_high = clip_range_high
        self.loss_agg_mode = loss_agg_mode
        self.mask_truncated = mask_truncated

    def loss_settings(self) -> dict[str, Any]:
        return {
            "clip_low": self.clip_range_low,
            "clip_high": self.clip_range_high,
            "mask_truncated": self.mask_truncated,
        }

    @classmethod
    def default_args(cls) -> dict:
        return {"clip_range_low": 1.0, "clip_range_high": 0.28}
