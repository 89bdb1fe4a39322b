"""M2PO policy loss (``m2po``): a second-moment trust region for stale, off-policy data."""

from __future__ import annotations

import math
from typing import Any

from trinity.algorithm.args import Field, NonNegFloat, PolicyLossArgs
from trinity.algorithm.policy_loss_fn.functional import m2po_loss
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, RatioPolicyLossFn

__all__ = ["M2POPolicyLossFn"]


@POLICY_LOSS_FN.register_module("m2po")
class M2POPolicyLossFn(RatioPolicyLossFn):
    """M2PO (arXiv:2510.01161); see :func:`~trinity.algorithm.policy_loss_fn.functional.m2po_loss`.

    Per token ``-A * r`` with ``r = pi / pi_old``, no clipping; the tokens with the largest
    ``(log r)^2`` are dropped until the batch satisfies ``mean((log r)^2) <= m2_threshold``::

        M2 = (1 / |T|) * sum_{t in T} (log r_t)^2 <= m2_threshold

    where ``T`` is the set of constrained tokens: those PPO would clip (``A > 0`` and ``r > 1``,
    or ``A < 0`` and ``r < 1``; the paper's final algorithm) or, with
    ``trust_region_only=false``, every trained token (its preprint's). Dropped tokens keep
    counting in the aggregation's denominator.

    Args:
        m2_threshold: ``tau_M2``, the bound on the mean second moment (the paper uses 0.04 in
            every experiment and finds it insensitive).
        trust_region_only: constrain only the tokens PPO would clip.
        loss_agg_mode: see :func:`trinity.algorithm.utils.aggregate_loss` (the paper:
            ``token-mean``).

    The constraint is evaluated on the batch the loss is called with, which in the trainer is
    one micro-batch (the paper takes it over the mini-batch: with micro-batches the masks of
    the parts can differ from the whole's).
    """

    class Args(PolicyLossArgs):
        """``policy_loss_fn_args`` of ``m2po``."""

        m2_threshold: NonNegFloat = Field(
            0.04, description="Bound on the mean of (log pi / pi_old)^2 (tau_M2)."
        )
        trust_region_only: bool = Field(
            True, description="Constrain only tokens PPO would clip (the paper's final form)."
        )

    loss_fn = staticmethod(m2po_loss)

    def __init__(
        self,
        backend: str = "verl",
        m2_threshold: float = 0.04,
        trust_region_only: bool = True,
        loss_agg_mode: str = "token-mean",
    ) -> None:
        super().__init__(backend=backend)
        if not (math.isfinite(m2_threshold) and m2_threshold >= 0):
            raise ValueError(f"m2_threshold must be finite and >= 0, got {m2_threshold}")
        self.m2_threshold = float(m2_threshold)
        self.trust_region_only = bool(trust_region_only)
        self.loss_agg_mode = loss_agg_mode

    def loss_settings(self) -> dict[str, Any]:
        return {"m2_threshold": self.m2_threshold, "trust_region_only": self.trust_region_only}

    @classmethod
    def default_args(cls) -> dict:
        return {"m2_threshold": 0.04, "trust_region_only": True, "loss_agg_mode": "token-mean"}
