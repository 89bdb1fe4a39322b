"""PPO policy loss (``ppo``): clip, clip-higher (DAPO) and dual-clip."""

from __future__ import annotations

from typing import Any, Optional

from trinity.algorithm.args import ClipRangeArgs, Field, NonNegFloat, PosFloat
from trinity.algorithm.policy_loss_fn.functional import ppo_clip_loss
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, RatioPolicyLossFn

__all__ = ["PPOPolicyLossFn", "resolve_clip_range"]


def resolve_clip_range(
    clip_range: Optional[float],
    clip_range_low: Optional[float],
    clip_range_high: Optional[float],
) -> tuple[float, float]:
    """``(low, high)``: each side defaults to ``clip_range`` (Trinity-RFT's convention).

    Raises:
        ValueError: a side is left unset with no ``clip_range`` to fall back on.
    """
    low = clip_range if clip_range_low is None else clip_range_low
    high = clip_range if clip_range_high is None else clip_range_high
    if low is None or high is None:
        raise ValueError(
            "Set clip_range, or both clip_range_low and clip_range_high "
            f"(got clip_range={clip_range}, clip_range_low={clip_range_low}, "
            f"clip_range_high={clip_range_high})"
        )
    return float(low), float(high)


@POLICY_LOSS_FN.register_module("ppo")
class PPOPolicyLossFn(RatioPolicyLossFn):
    """PPO clipped surrogate; see :func:`~trinity.algorithm.policy_loss_fn.functional.ppo_clip_loss`.

    Args:
        clip_range: symmetric clip epsilon, used for a side not given explicitly.
        clip_range_low / clip_range_high: asymmetric ranges ``[1 - low, 1 + high]``
            (DAPO's clip-higher sets ``high > low`` to keep exploration alive).
        clip_ratio_c: dual-clip bound (> 1) on the loss of negative-advantage tokens (verl's
            and Trinity-RFT's later default 3.0); ``None`` turns dual-clip off, which is what
            Trinity-RFT's own ``policy_loss_test.py`` numbers assume (see docs/compat.md).
        loss_agg_mode: see :func:`trinity.algorithm.utils.aggregate_loss`.
        enable_sequence_masking / delta_sequence_masking: drop negative-advantage tokens of
            sequences whose mean KL to the old policy exceeds ``delta_sequence_masking``
            (``delta`` is Trinity-RFT's older name of the same setting, still accepted).
        truncate_adv_pos_is / truncate_is_range_low: where the advantage is positive, cap the
            per-token loss at ``-A * truncate_is_range_low`` (must be in
            ``[0, 1 - clip_range_low)``).
        truncate_adv_neg_is / truncate_is_range_high: where the advantage is negative, cap it
            at ``-A * truncate_is_range_high`` (must exceed ``1 + clip_range_high``).
    """

    class Args(ClipRangeArgs):
        """``policy_loss_fn_args`` of ``ppo``."""

        clip_ratio_c: Optional[float] = Field(
            3.0,
            gt=1.0,
            description="Dual-clip bound on the loss of negative-advantage tokens (null: none).",
        )
        enable_sequence_masking: bool = Field(
            False, description="Drop negative-advantage tokens of sequences far from pi_old."
        )
        delta: NonNegFloat = Field(0.1, description="Mean-KL threshold of sequence masking.")
        delta_sequence_masking: Optional[NonNegFloat] = Field(
            None, description="Trinity-RFT's name of delta (set one of the two)."
        )
        truncate_adv_pos_is: bool = Field(
            False,
            description="Trinity-RFT: cap the loss of positive-advantage tokens at "
            "-A * truncate_is_range_low.",
        )
        truncate_adv_neg_is: bool = Field(
            False,
            description="Trinity-RFT: cap the loss of negative-advantage tokens at "
            "-A * truncate_is_range_high.",
        )
        truncate_is_range_low: Optional[NonNegFloat] = Field(
            0.0, description="Cap for positive advantages (in [0, 1 - clip_range_low))."
        )
        truncate_is_range_high: Optional[PosFloat] = Field(
            2.0, description="Cap for negative advantages (above 1 + clip_range_high)."
        )

    loss_fn = staticmethod(ppo_clip_loss)

    def __init__(
        self,
        backend: str = "verl",
        clip_range: Optional[float] = None,
        clip_range_low: Optional[float] = None,
        clip_range_high: Optional[float] = None,
        clip_ratio_c: Optional[float] = 3.0,
        loss_agg_mode: str = "token-mean",
        enable_sequence_masking: bool = False,
        delta_sequence_masking: Optional[float] = None,
        delta: Optional[float] = None,
        truncate_adv_pos_is: bool = False,
        truncate_adv_neg_is: bool = False,
        truncate_is_range_low: Optional[float] = 0.0,
        truncate_is_range_high: Optional[float] = 2.0,
    ) -> None:
        super().__init__(backend=backend)
        self.clip_range_low, self.clip_range_high = resolve_clip_range(
            clip_range, clip_range_low, clip_range_high
        )
        if clip_ratio_c is not None and clip_ratio_c <= 1.0:
            raise ValueError(
                f"clip_ratio_c must be > 1.0 (or None: no dual-clip), got {clip_ratio_c}"
            )
        self.clip_ratio_c = clip_ratio_c
        self.loss_agg_mode = loss_agg_mode
        self.enable_sequence_masking = enable_sequence_masking
        if (
            delta is not None
            and delta_sequence_masking is not None
            and delta != delta_sequence_masking
        ):
            raise ValueError(
                f"delta ({delta}) and delta_sequence_masking ({delta_sequence_masking}) name the "
                "same setting; set only delta_sequence_masking"
            )
        self.delta_sequence_masking = (
            delta_sequence_masking if delta_sequence_masking is not None else delta
        )
        if self.delta_sequence_masking is None:
            self.delta_sequence_masking = 0.1
        self.truncate_adv_pos_is = truncate_adv_pos_is
        self.truncate_adv_neg_is = truncate_adv_neg_is
        self.truncate_is_range_low = truncate_is_range_low
        self.truncate_is_range_high = truncate_is_range_high
        if truncate_adv_pos_is and not (
            truncate_is_range_low is not None
            and 0.0 <= truncate_is_range_low < 1.0 - self.clip_range_low
        ):
            raise ValueError(
                f"truncate_is_range_low must be in [0, 1 - clip_range_low = "
                f"{1.0 - self.clip_range_low}) with truncate_adv_pos_is, got {truncate_is_range_low}"
            )
        if truncate_adv_neg_is and not (
            truncate_is_range_high is not None
            and truncate_is_range_high > 1.0 + self.clip_range_high
        ):
            raise ValueError(
                f"truncate_is_range_high must be > 1 + clip_range_high = "
                f"{1.0 + self.clip_range_high} with truncate_adv_neg_is, got {truncate_is_range_high}"
            )

    @property
    def delta(self) -> float:
        """Trinity-RFT's older name of :attr:`delta_sequence_masking`."""
        return float(self.delta_sequence_masking)  # type: ignore[arg-type]

    def loss_settings(self) -> dict[str, Any]:
        return {
            "clip_low": self.clip_range_low,
            "clip_high": self.clip_range_high,
            "clip_ratio_c": self.clip_ratio_c,
            "sequence_mask_delta": self.delta if self.enable_sequence_masking else None,
            "truncate_pos_low": self.truncate_is_range_low if self.truncate_adv_pos_is else None,
            "truncate_neg_high": self.truncate_is_range_high if self.truncate_adv_neg_is else None,
        }

    @classmethod
    def default_args(cls) -> dict:
        return {
            "clip_range": 0.2,
            "clip_ratio_c": 3.0,
            "loss_agg_mode": "token-mean",
            "enable_sequence_masking": False,
            "truncate_adv_pos_is": False,
            "truncate_adv_neg_is": False,
            "truncate_is_range_low": 0.0,
            "truncate_is_range_high": 2.0,
        }
