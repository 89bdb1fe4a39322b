"""Masked tensor reductions and the one loss-aggregation function every loss uses.

Shapes: ``values`` / ``mask`` are ``[batch, response_len]`` unless said otherwise; ``mask`` is
1 (or True) on tokens the model generated and 0 on padding and environment tokens.

:func:`build_component` (how components are built from their config arguments) is core's
:func:`trinity.utils.build.build_component`, re-exported here where the algorithms use it.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from trinity.utils.build import build_component

__all__ = [
    "LOSS_AGG_MODES",
    "aggregate_loss",
    "build_component",
    "expert_row_mask",
    "masked_loss",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
]

#: The loss aggregation modes (verl's names and semantics).
LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


def masked_sum(values: Tensor, mask: Tensor, axis: Optional[int] = None) -> Tensor:
    """Sum of ``values`` where ``mask`` is set (over ``axis``, or everything)."""
    prod = values * mask
    return prod.sum() if axis is None else prod.sum(dim=axis)


def masked_mean(values: Tensor, mask: Tensor, axis: Optional[int] = None) -> Tensor:
    """Mean of ``values`` where ``mask`` is set; 0 (not NaN) when the mask is empty."""
    return masked_sum(values, mask, axis) / (
        mask.sum() if axis is None else mask.sum(dim=axis)
    ).clamp_min(1e-8)


def masked_var(values: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of the masked entries (Bessel-corrected when ``unbiased``)."""
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        count = mask.sum()
        if count <= 1:
            return torch.zeros((), dtype=values.dtype)
        var = var * count / (count - 1)
    return var


def masked_whiten(values: Tensor, mask: Tensor, shift_mean: bool = True) -> Tensor:
    """Whiten the masked entries to zero mean, unit variance (the mean is kept if not shifting)."""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


def aggregate_loss(
    loss_mat: Tensor,
    loss_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    normalizer: Optional[float] = None,
) -> Tensor:
    """Reduce a per-token loss matrix to a scalar — the single place every loss aggregates.

    Args:
        loss_mat: ``[batch, response_len]`` per-token losses.
        loss_mask: ``[batch, response_len]`` 1 on trained tokens.
        loss_agg_mode:
            * ``token-mean``: mean over all trained tokens of the batch;
            * ``token-sum``: sum over all trained tokens (Trinity-RFT's mode; the loss scales
              with the number of tokens, so learning rates tuned for means do not carry over);
            * ``seq-mean-token-sum``: per-sequence token sum, then mean over sequences;
            * ``seq-mean-token-mean``: per-sequence token mean, then mean over sequences;
            * ``seq-mean-token-sum-norm``: per-sequence token sum, mean over sequences, divided
              by ``normalizer`` (default: ``response_len``, as in Dr. GRPO).
            Sequences with no trained token are left out of the sequence means.
        normalizer: the constant of ``seq-mean-token-sum-norm``.

    Equal to verl's ``core_algos.agg_loss`` on one data-parallel rank (tested).
    """
    mask = loss_mask.to(loss_mat.dtype)
    if loss_agg_mode == "token-mean":
        return masked_sum(loss_mat, mask) / mask.sum().clamp_min(1e-8)
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, mask)
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        seq_losses = (loss_mat * mask).sum(dim=-1)
        seq_mask = (mask.sum(dim=-1) > 0).to(loss_mat.dtype)
        loss = masked_sum(seq_losses, seq_mask) / seq_mask.sum().clamp_min(1e-8)
        if loss_agg_mode == "seq-mean-token-sum-norm":
            loss = loss / (normalizer if normalizer is not None else loss_mask.shape[-1])
        return loss
    if loss_agg_mode == "seq-mean-token-mean":
        tokens = mask.sum(dim=-1)
        seq_losses = (loss_mat * mask).sum(dim=-1) / (tokens + 1e-8)
        seq_mask = (tokens > 0).to(loss_mat.dtype)
        return masked_sum(seq_losses, seq_mask) / seq_mask.sum().clamp_min(1e-8)
    raise ValueError(
        f"Invalid loss_agg_mode {loss_agg_mode!r}; allowed: {', '.join(LOSS_AGG_MODES)}"
    )


def masked_loss(
    values: Tensor,
    mask: Tensor,
    loss_agg_mode: str = "token-mean",
    normalizer: Optional[float] = None,
) -> Tensor:
    """The guide's name for :func:`aggregate_loss` (``masked_loss(pg_losses, action_mask, ...)``)."""
    return aggregate_loss(values, mask, loss_agg_mode=loss_agg_mode, normalizer=normalizer)


def expert_row_mask(
    expert_mask: Optional[Tensor],
    rows: int,
    device: torch.device,
    owner: str,
    is_expert_mask: Optional[Tensor] = None,
) -> Tensor:
    """The bool ``[rows]`` mask of the expert (SFT) rows of a ``mix`` batch.

    ``expert_mask``, else ``is_expert_mask`` (Trinity-RFT's older name of the field), on
    ``device``. The ``mix`` policy loss and entropy term both split their batch with it.

    Raises:
        ValueError: neither mask is given (naming ``owner``), or its length is not ``rows``.
    """
    if expert_mask is None:
        expert_mask = is_expert_mask
    if expert_mask is None:
        raise ValueError(f"{owner} needs expert_mask (bool [batch]); none given")
    expert = expert_mask.to(device=device, dtype=torch.bool).reshape(-1)
    if expert.shape[0] != rows:
        raise ValueError(f"expert_mask has {expert.shape[0]} rows but the batch has {rows}")
    return expert
