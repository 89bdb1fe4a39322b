"""Masked tensor reductions and the one loss-aggregation function every loss uses.

Shapes: ``values`` / ``mask`` are ``[batch, response_len]`` unless said otherwise; ``mask`` is
1 (or True) on tokens the model generated and 0 on padding and environment tokens.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Optional, TypeVar

import torch
from torch import Tensor

__all__ = [
    "LOSS_AGG_MODES",
    "aggregate_loss",
    "build_component",
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

T = TypeVar("T")


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


def build_component(cls: type[T], args: Optional[Mapping[str, Any]] = None) -> T:
    """Instantiate an algorithm component from ``default_args()`` overridden by ``args``.

    Arguments the class's ``__init__`` does not accept (and that no ``**kwargs`` takes) are set
    as attributes after construction, so common settings such as ``loss_agg_mode`` reach a
    class written like the guide's OPMD loss, whose ``__init__`` only takes ``tau``.
    """
    merged: dict[str, Any] = {}
    default_args = getattr(cls, "default_args", None)
    if callable(default_args):
        merged.update(default_args() or {})
    merged.update(args or {})
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        accepted, extra = merged, {}
    else:
        accepted = {k: v for k, v in merged.items() if k in params}
        extra = {k: v for k, v in merged.items() if k not in params}
    try:
        obj = cls(**accepted)
    except TypeError as exc:
        raise TypeError(f"Cannot build {cls.__name__} with arguments {accepted}: {exc}") from exc
    for key, value in extra.items():
        setattr(obj, key, value)
    return obj
