"""The critic's clipped value loss (PPO with a value model).

Clipping the new value prediction to within ``cliprange_value`` of the old one (the values
the advantages were computed with) keeps one critic update from moving far, the value-side
analogue of the policy ratio clip. Equal to verl's ``core_algos.compute_value_loss`` for every
``loss_agg_mode`` (tested).

Shapes: ``vpreds``, ``returns``, ``values``, ``response_mask`` ``[batch, response_len]``.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from trinity.algorithm.utils import aggregate_loss, masked_mean

__all__ = ["ValueLossFn", "compute_value_loss"]


def compute_value_loss(
    vpreds: Tensor,
    returns: Tensor,
    values: Tensor,
    response_mask: Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    normalizer: Optional[float] = None,
) -> tuple[Tensor, Tensor]:
    """``0.5 * aggregate(max((v - R)^2, (clip(v, v_old ± c) - R)^2))``.

    Args:
        vpreds: current critic predictions (with grad).
        returns: regression targets (e.g. GAE returns).
        values: the critic's predictions at rollout time (``v_old``).
        response_mask: 1 on trained tokens.
        cliprange_value: ``c``.
        loss_agg_mode / normalizer: see :func:`trinity.algorithm.utils.aggregate_loss`.

    Returns:
        ``(vf_loss, vf_clipfrac)``: the scalar loss and the fraction of trained tokens where the
        clipped branch was larger (detached).
    """
    vpred_clipped = torch.maximum(
        torch.minimum(vpreds, values + cliprange_value), values - cliprange_value
    )
    vf_losses1 = (vpreds - returns) ** 2
    vf_losses2 = (vpred_clipped - returns) ** 2
    clipped = torch.maximum(vf_losses1, vf_losses2)
    vf_loss = 0.5 * aggregate_loss(
        clipped, response_mask, loss_agg_mode=loss_agg_mode, normalizer=normalizer
    )
    vf_clipfrac = masked_mean(torch.gt(vf_losses2, vf_losses1).to(vpreds.dtype), response_mask)
    return vf_loss, vf_clipfrac.detach()


class ValueLossFn:
    """The critic loss with its settings, for trainers that hold one object per loss.

    Args:
        cliprange_value: clip range around the old values (verl's default 0.5).
        loss_agg_mode: see :func:`trinity.algorithm.utils.aggregate_loss`.
    """

    def __init__(self, cliprange_value: float = 0.5, loss_agg_mode: str = "token-mean") -> None:
        self.cliprange_value = cliprange_value
        self.loss_agg_mode = loss_agg_mode

    def __call__(
        self, vpreds: Tensor, returns: Tensor, values: Tensor, response_mask: Tensor
    ) -> tuple[Tensor, dict[str, float]]:
        """Return the scalar loss and ``{"vf_loss", "vf_clipfrac"}`` as floats."""
        loss, clipfrac = compute_value_loss(
            vpreds,
            returns,
            values,
            response_mask,
            cliprange_value=self.cliprange_value,
            loss_agg_mode=self.loss_agg_mode,
        )
        return loss, {
            "vf_loss": float(loss.detach().item()),
            "vf_clipfrac": float(clipfrac.item()),
        }

    @classmethod
    def default_args(cls) -> dict:
        """Initialization arguments used where the config gives none."""
        return {"cliprange_value": 0.5, "loss_agg_mode": "token-mean"}
