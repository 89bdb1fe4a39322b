"""Rollout/training mismatch correction as pure tensor functions (``algorithm.rollout_correction``).

The explorer's engine (vLLM) and the trainer give a sampled token different probabilities:
other kernels and precision, and, off-policy, older weights. With ``r = pi_train / pi_rollout``
per token (``pi_train``: the trainer's old log-probs, ``pi_rollout``: the experiences'
``logprobs``) this module computes what verl 0.9's ``rollout_corr_helper`` computes, on the
same inputs and with the same numbers (tested against it):

* **importance-sampling weights** (:func:`rollout_is_weights`) to multiply into the policy
  loss per token: ``r`` per token, or the product of a sequence's ``r`` for each of its
  tokens; truncated at an upper bound (TIS) or zeroed outside ``[lower, upper]`` (IcePop);
* a **rejection mask** (:func:`rollout_rejection_mask`) to AND into the response mask: tokens
  or whole sequences whose divergence (k1 ``-log r``, k2 ``(log r)^2 / 2``, k3
  ``r - 1 - log r``; per token, or a sequence's sum / mean / max) leaves its bounds;
* **mismatch metrics** (:func:`mismatch_metrics`): KL (k1, k3), perplexities, chi-square.

:func:`compute_rollout_correction` runs all three from a
:class:`~trinity.common.config.rollout_correction.RolloutCorrectionConfig` and names the
metrics ``rollout_corr/<verl's name>``. :func:`reinforce_loss` is the policy loss verl's bypass
mode uses with ``loss_type: reinforce``.

Shapes: ``log_ratio``, log-probs, ``mask`` and weights are ``[batch, response_len]``; ``mask``
is 1/True on trained tokens (bool or float). Log-ratios are clamped to ``[-20, 20]`` before
``exp`` (:data:`SAFETY_BOUND`, verl's), so one wild token cannot overflow a weight. Masked
reductions zero the entries outside the mask before summing (an ``inf`` there cannot turn a
sum into ``nan``) and divide by ``count + 1e-8``, as verl's ``masked_mean`` does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch
from torch import Tensor

from trinity.algorithm.utils import aggregate_loss
from trinity.common.config.rollout_correction import RolloutCorrectionConfig

__all__ = [
    "METRIC_PREFIX",
    "SAFETY_BOUND",
    "RolloutCorrection",
    "compute_rollout_correction",
    "mismatch_metrics",
    "reinforce_loss",
    "rollout_is_weights",
    "rollout_rejection_mask",
]

#: Log-ratios are clamped to ``[-SAFETY_BOUND, SAFETY_BOUND]`` before ``exp`` (verl's bound).
SAFETY_BOUND = 20.0
#: Every metric of :func:`compute_rollout_correction` is logged under this prefix (verl's).
METRIC_PREFIX = "rollout_corr/"

Metrics = dict[str, Union[Tensor, float]]


@dataclass
class RolloutCorrection:
    """What :func:`compute_rollout_correction` returns.

    Attributes:
        is_weights: ``[batch, response_len]`` detached IS weights to multiply into the policy
            loss per token (0 on masked tokens), or ``None`` without ``rollout_is``.
        response_mask: ``[batch, response_len]`` the input mask (same dtype) with rejected
            tokens set to 0 (the input itself, cloned, without ``rollout_rs``).
        metrics: ``rollout_corr/<name>`` -> float, verl's names and values.
    """

    is_weights: Optional[Tensor]
    response_mask: Tensor
    metrics: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- masked reductions


def _masked_sum(values: Tensor, mask: Tensor, axis: Optional[int] = None) -> Tensor:
    """Sum of ``values`` where ``mask`` is set; entries outside it count 0 even if inf/nan."""
    kept = torch.where(mask.bool(), values, 0.0) * mask
    return kept.sum() if axis is None else kept.sum(dim=axis)


def _masked_mean(values: Tensor, mask: Tensor, axis: Optional[int] = None) -> Tensor:
    """Mean over ``mask`` (``sum / (count + 1e-8)``: 0 for an empty mask)."""
    count = mask.sum() if axis is None else mask.sum(dim=axis)
    return _masked_sum(values, mask, axis) / (count + 1e-8)


def _masked_max(values: Tensor, mask: Tensor) -> Tensor:
    return values.masked_fill(~mask.bool(), float("-inf")).max()


def _masked_min(values: Tensor, mask: Tensor) -> Tensor:
    return values.masked_fill(~mask.bool(), float("inf")).min()


def _fraction(condition: Tensor) -> Tensor:
    """Share of True entries (over all of ``condition``)."""
    return condition.float().mean()


def _std(values: Tensor) -> Union[Tensor, float]:
    """Unbiased standard deviation, 0 for fewer than two values (``torch.std`` gives nan)."""
    return values.std() if values.numel() > 1 else 0.0


def _clamped_std(values: Tensor, mask: Tensor, low: float, high: float) -> Union[Tensor, float]:
    """Standard deviation over ``mask`` of ``values`` clamped to ``[low, high]`` (verl keeps
    outliers from dominating this diagnostic); 0 unless the mask holds two or more tokens."""
    if mask.sum() <= 1:
        return 0.0
    clamped = values.clamp(min=low, max=high)
    mean = _masked_mean(clamped, mask)
    var = _masked_mean(clamped.square(), mask) - mean.square()
    return torch.sqrt(torch.clamp(var, min=0.0))


# --------------------------------------------------------------------------- IS weights


def rollout_is_weights(
    log_ratio: Tensor,
    mask: Tensor,
    level: str = "token",
    upper: float = 2.0,
    lower: Optional[float] = None,
    batch_normalize: bool = False,
) -> tuple[Tensor, Metrics]:
    """Importance-sampling weights ``pi_train / pi_rollout`` and their diagnostics.

    Args:
        log_ratio: ``[batch, response_len]`` ``log pi_train - log pi_rollout``.
        mask: ``[batch, response_len]`` trained tokens.
        level: ``token`` (each token its own ratio: biased, low variance) or ``sequence`` (each
            token the product of its sequence's ratios: unbiased, high variance).
        upper / lower: ``lower=None``: truncate the weights at ``upper`` (TIS); otherwise zero
            the weights outside ``[lower, upper]`` (IcePop), which drops a token's gradient
            without changing the response mask (the loss's denominators stay).
        batch_normalize: divide by the weights' mean (over tokens, or over sequences for
            ``sequence``) so the batch's mean weight is 1; the diagnostics are those before.

    Returns:
        ``(weights [batch, response_len], metrics)``: detached weights, 0 on masked tokens;
        metrics ``rollout_is_*`` (mean/max/min, ratio fractions outside the bounds, std, ESS,
        per-sequence statistics, ``oob_ratio`` for IcePop, ``batch_norm_factor``).
    """
    if level not in ("token", "sequence"):
        raise ValueError(f"rollout_is level {level!r} is invalid; allowed: token, sequence")
    log_ratio = log_ratio.detach()
    if level == "token":
        log_for_metrics = log_ratio
        log_weights = log_ratio
    else:  # one weight per sequence: the product of its token ratios, on each of its tokens
        log_for_metrics = _masked_sum(log_ratio, mask, axis=-1).unsqueeze(-1)  # [batch, 1]
        log_weights = log_for_metrics.expand_as(log_ratio)
    raw = torch.exp(log_weights.clamp(min=-SAFETY_BOUND, max=SAFETY_BOUND))
    raw = torch.where(mask.bool(), raw, 0.0) * mask  # 0 off the mask, even for a nan there
    if lower is None:
        weights = raw.clamp(max=upper)
    else:
        inside = (raw >= lower) & (raw <= upper)
        weights = torch.where(inside, raw, torch.zeros_like(raw))

    metrics = _is_metrics(weights, raw, log_for_metrics, mask, level, upper, lower)
    if lower is not None:
        metrics["rollout_is_oob_ratio"] = _masked_mean(
            ((raw < lower) | (raw > upper)).float(), mask
        )
    if batch_normalize:
        weights, metrics["rollout_is_batch_norm_factor"] = _normalize(weights, mask, level)
    return weights, metrics


def _normalize(weights: Tensor, mask: Tensor, level: str) -> tuple[Tensor, Tensor]:
    """Weights divided by their batch mean (per token, or per sequence for ``sequence``)."""
    if level == "token":
        mean = _masked_mean(weights, mask)
    else:
        per_sequence = _masked_mean(weights, mask, axis=-1)  # [batch]
        has_tokens = (mask.sum(dim=-1) > 0).to(weights.dtype)
        mean = (per_sequence * has_tokens).sum() / has_tokens.sum().clamp_min(1e-8)
    usable = mean > 1e-8  # all-zero weights (IcePop rejected everything) stay as they are
    factor = torch.where(usable, mean, torch.ones_like(mean))
    return weights / factor, factor


def _is_metrics(
    weights: Tensor,
    raw: Tensor,
    log_for_metrics: Tensor,
    mask: Tensor,
    level: str,
    upper: float,
    lower: Optional[float],
) -> Metrics:
    """verl's ``rollout_is_*`` diagnostics of the applied (``weights``) and raw weights."""
    low = 1.0 / upper if lower is None else lower  # TIS reports against the reciprocal
    m: Metrics = {"rollout_is_mean": _masked_mean(weights, mask)}
    if level == "sequence":  # one log-ratio per row, in log space (no overflow)
        log_upper = torch.log(torch.tensor(upper, device=weights.device))
        log_lower = torch.log(torch.tensor(low, device=weights.device))
        m["rollout_is_max"] = torch.exp(torch.clamp(log_for_metrics.max(), max=SAFETY_BOUND))
        m["rollout_is_min"] = torch.exp(log_for_metrics.min())
        m["rollout_is_ratio_fraction_high"] = _fraction(log_for_metrics > log_upper)
        m["rollout_is_ratio_fraction_low"] = _fraction(log_for_metrics < log_lower)
    else:
        m["rollout_is_ratio_fraction_high"] = _masked_mean((raw > upper).float(), mask)
        m["rollout_is_ratio_fraction_low"] = _masked_mean((raw < low).float(), mask)
        m["rollout_is_max"] = _masked_max(weights, mask)
        m["rollout_is_min"] = _masked_min(weights, mask)
    m["rollout_is_std"] = _clamped_std(weights, mask, 0.0, upper)
    bounded = weights.clamp(min=0.0, max=upper)
    relative = bounded / (_masked_mean(bounded, mask) + 1e-8)
    second_moment = _masked_mean(relative.square(), mask)
    # effective sample size 1 / E[w^2] of the mean-1 weights (0 if every weight is 0, where
    # verl divides by zero); in float64, as verl divides the Python float
    second_moment = second_moment.double()
    m["rollout_is_eff_sample_size"] = torch.where(
        second_moment > 0, 1.0 / second_moment, torch.zeros_like(second_moment)
    )

    per_sequence = _masked_mean(weights, mask, axis=-1)  # [batch]
    m["rollout_is_seq_mean"] = per_sequence.mean()
    m["rollout_is_seq_std"] = _std(per_sequence)
    m["rollout_is_seq_max"] = per_sequence.max()
    m["rollout_is_seq_min"] = per_sequence.min()
    m["rollout_is_seq_max_deviation"] = (per_sequence - 1.0).abs().max()
    # raw (before truncation) sequence means: a truncated mean can never exceed ``upper``
    raw_per_sequence = _masked_mean(raw, mask, axis=-1)
    m["rollout_is_seq_fraction_high"] = _fraction(raw_per_sequence > upper)
    m["rollout_is_seq_fraction_low"] = _fraction(raw_per_sequence < low)
    return m


# --------------------------------------------------------------------------- rejection


def _divergence(kind: str, log_ratio: Tensor) -> Tensor:
    """Per-token ``k1 = -log r``, ``k2 = (log r)^2 / 2`` or ``k3 = r - 1 - log r``."""
    if kind == "k1":
        return -log_ratio
    if kind == "k2":
        return 0.5 * log_ratio.square()
    return torch.exp(log_ratio) - 1.0 - log_ratio


def _sequence_statistic(reduce: str, token_stat: Tensor, mask: Tensor) -> Tensor:
    """``[batch]`` sum / mean / max of ``token_stat`` over each sequence's trained tokens (a
    sequence without any: sum and mean 0, max 0)."""
    if reduce == "sum":
        return _masked_sum(token_stat, mask, axis=-1)
    if reduce == "mean":
        return _masked_mean(token_stat, mask, axis=-1)
    highest = token_stat.masked_fill(~mask.bool(), float("-inf")).max(dim=-1).values
    return torch.where(torch.isneginf(highest), torch.zeros_like(highest), highest)


def rollout_rejection_mask(
    log_ratio: Tensor,
    mask: Tensor,
    bounds: Mapping[str, tuple[Optional[float], float]],
) -> tuple[Tensor, Metrics]:
    """Reject tokens or sequences whose divergence leaves its bounds (a hard trust region).

    Args:
        log_ratio: ``[batch, response_len]`` ``log pi_train - log pi_rollout``.
        mask: ``[batch, response_len]`` trained tokens.
        bounds: ``{option: (lower, upper)}`` in order, as
            :attr:`RolloutCorrectionConfig.rs_bounds` gives them. ``token_k*`` judge each
            token; ``seq_{sum,mean,max}_k*`` a sequence's sum / mean / max of the token
            divergence (the whole sequence is kept or rejected). ``k1`` options keep
            ``log(lower) <= stat <= log(upper)`` (ratio bounds on ``pi_rollout / pi_train``,
            which ``-log r`` is the log of: verl's convention); k2/k3 keep ``stat <= upper``.
            A token is kept only if every option keeps it.

    Returns:
        ``(mask, metrics)``: the input mask (same dtype) with rejected tokens 0, and verl's
        ``rollout_rs_<option>_*`` statistics plus ``rollout_rs_masked_fraction`` (tokens) and
        ``rollout_rs_seq_masked_fraction`` (rows that lost a token).
    """
    if log_ratio.shape[0] == 0:
        return mask, {}
    log_ratio = log_ratio.detach().clamp(min=-SAFETY_BOUND, max=SAFETY_BOUND)
    trained = mask.bool()
    seq_valid = mask.sum(dim=-1) > 0  # [batch]
    keep_all = torch.ones_like(mask, dtype=log_ratio.dtype)
    metrics: Metrics = {}
    for option, (lower, upper) in bounds.items():
        scope, kind = option.rsplit("_", 1)  # "token" / "seq_sum" / "seq_mean" / "seq_max"
        two_sided = kind == "k1"
        high = math.log(upper) if two_sided else upper
        low = math.log(lower) if two_sided and lower is not None else 0.0
        token_stat = _divergence(kind, log_ratio)
        seq_stat: Optional[Tensor] = None
        if scope == "token":
            stat = token_stat
        else:
            seq_stat = _sequence_statistic(scope.split("_")[1], token_stat, mask)
            stat = seq_stat.unsqueeze(-1).expand_as(log_ratio)
        keep = stat <= high
        if two_sided:
            keep = keep & (stat >= low)
        keep_f = keep.to(log_ratio.dtype)
        keep_all = keep_all * keep_f

        metrics.update(
            _rs_metrics(
                f"rollout_rs_{option}", stat, seq_stat, mask, seq_valid, high, low, two_sided
            )
        )
        metrics[f"rollout_rs_{option}_masked_fraction"] = _masked_mean(1 - keep_f, mask)
        seq_kept = (~((~keep) & trained)).all(dim=-1).to(log_ratio.dtype)
        valid_f = seq_valid.float()
        metrics[f"rollout_rs_{option}_seq_masked_fraction"] = (
            ((1.0 - seq_kept) * valid_f).sum() / valid_f.sum() if valid_f.sum() > 0 else 0.0
        )

    metrics["rollout_rs_masked_fraction"] = _masked_mean(1 - keep_all, mask)
    lost = ~((keep_all > 0.5) & trained) & trained
    metrics["rollout_rs_seq_masked_fraction"] = _fraction(lost.any(dim=-1))
    return (mask * keep_all).to(mask.dtype), metrics


def _rs_metrics(
    prefix: str,
    stat: Tensor,
    seq_stat: Optional[Tensor],
    mask: Tensor,
    seq_valid: Tensor,
    high: float,
    low: float,
    two_sided: bool,
) -> Metrics:
    """verl's per-option statistics: ``stat`` per token (a sequence option's value broadcast
    over its tokens), ``seq_stat`` ``[batch]`` for sequence options; thresholds in the
    statistic's units (log-ratio for k1)."""
    values = seq_stat if seq_stat is not None else _masked_mean(stat, mask, axis=-1)
    valid = values[seq_valid]
    per_sequence = seq_stat is not None and valid.numel() > 0
    m: Metrics = {f"{prefix}_mean": _masked_mean(stat, mask)}
    if per_sequence:
        m[f"{prefix}_max"], m[f"{prefix}_min"] = valid.max(), valid.min()
        m[f"{prefix}_fraction_high"] = _fraction(valid > high)
        m[f"{prefix}_fraction_low"] = _fraction(valid < low) if two_sided else 0.0
    else:
        m[f"{prefix}_max"], m[f"{prefix}_min"] = _masked_max(stat, mask), _masked_min(stat, mask)
        m[f"{prefix}_fraction_high"] = _masked_mean((stat > high).float(), mask)
        m[f"{prefix}_fraction_low"] = _masked_mean((stat < low).float(), mask) if two_sided else 0.0
    m[f"{prefix}_std"] = _clamped_std(stat, mask, low if two_sided else 0.0, high)
    if valid.numel() == 0:
        for name in ("mean", "std", "max", "min", "max_deviation", "fraction_high", "fraction_low"):
            m[f"{prefix}_seq_{name}"] = 0.0
        return m
    m[f"{prefix}_seq_mean"] = valid.mean()
    m[f"{prefix}_seq_std"] = _std(valid)
    m[f"{prefix}_seq_max"] = valid.max()
    m[f"{prefix}_seq_min"] = valid.min()
    m[f"{prefix}_seq_max_deviation"] = valid.abs().max()  # the ideal divergence is 0
    m[f"{prefix}_seq_fraction_high"] = _fraction(valid > high)
    if two_sided:
        m[f"{prefix}_seq_fraction_low"] = _fraction(valid < low)
    return m


# --------------------------------------------------------------------------- diagnostics


def mismatch_metrics(old_log_prob: Tensor, rollout_log_prob: Tensor, mask: Tensor) -> Metrics:
    """How far the trainer's and the rollout's log-probs are apart (verl's off-policy metrics).

    ``kl`` = ``E[log pi_rollout - log pi_train]`` (k1 estimate of KL(rollout || train)),
    ``k3_kl`` = ``E[r - log r - 1]``; ``training_ppl`` / ``rollout_ppl`` the batch mean of each
    sequence's perplexity (``*_log_ppl`` its log); ``log_ppl_diff`` (mean, abs mean, max, min
    over rows) the rollout's minus the trainer's mean token log-prob, ``ppl_ratio`` the mean of
    its exp; ``chi2_token`` = ``E[r^2] - 1``, ``chi2_seq`` = ``E_seq[(prod r)^2] - 1``. Token
    expectations are over ``mask``, sequence ones over every row (as verl).
    """
    old_log_prob, rollout_log_prob = old_log_prob.detach(), rollout_log_prob.detach()
    mean_train = _masked_mean(old_log_prob, mask, axis=-1)  # [batch]
    mean_rollout = _masked_mean(rollout_log_prob, mask, axis=-1)
    log_ratio = old_log_prob - rollout_log_prob
    log_ppl_diff = mean_rollout - mean_train  # = log(training_ppl / rollout_ppl) per row
    clamped = log_ratio.clamp(min=-SAFETY_BOUND, max=SAFETY_BOUND)
    seq_log_ratio = _masked_sum(log_ratio, mask, axis=-1).clamp(min=-SAFETY_BOUND, max=SAFETY_BOUND)
    return {
        "training_ppl": torch.exp(-mean_train).mean(),
        "training_log_ppl": (-mean_train).mean(),
        "kl": _masked_mean(rollout_log_prob - old_log_prob, mask),
        "k3_kl": _masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask),
        "rollout_ppl": torch.exp(-mean_rollout).mean(),
        "rollout_log_ppl": (-mean_rollout).mean(),
        "log_ppl_diff": log_ppl_diff.mean(),
        "log_ppl_abs_diff": log_ppl_diff.abs().mean(),
        "log_ppl_diff_max": log_ppl_diff.max(),
        "log_ppl_diff_min": log_ppl_diff.min(),
        "ppl_ratio": torch.exp(log_ppl_diff).mean(),
        "chi2_token": _masked_mean(torch.exp(clamped).square(), mask) - 1.0,
        "chi2_seq": torch.exp(2.0 * seq_log_ratio).mean() - 1.0,
    }


# --------------------------------------------------------------------------- all together


def _as_config(
    config: Union[RolloutCorrectionConfig, Mapping[str, Any]],
) -> RolloutCorrectionConfig:
    if isinstance(config, RolloutCorrectionConfig):
        return config
    return RolloutCorrectionConfig.model_validate(dict(config))


def _to_floats(metrics: Metrics) -> dict[str, float]:
    """``rollout_corr/<name>`` floats, with one device-to-host copy for all tensor values."""
    names = [k for k, v in metrics.items() if isinstance(v, Tensor)]
    values = (
        torch.stack([metrics[k].detach().to(torch.float64).reshape(()) for k in names]).tolist()
        if names
        else []
    )
    out = {f"{METRIC_PREFIX}{k}": float(v) for k, v in metrics.items() if not isinstance(v, Tensor)}
    out.update({f"{METRIC_PREFIX}{k}": v for k, v in zip(names, values, strict=True)})
    return out


def compute_rollout_correction(
    old_log_prob: Tensor,
    rollout_log_prob: Tensor,
    response_mask: Tensor,
    config: Union[RolloutCorrectionConfig, Mapping[str, Any]],
) -> RolloutCorrection:
    """IS weights, rejection mask and metrics of one batch (verl's
    ``compute_rollout_correction_and_rejection_mask``).

    Args:
        old_log_prob: ``[batch, response_len]`` the trainer's log-probs of the sampled tokens
            (recomputed old log-probs in decoupled mode; the current policy's in bypass mode).
        rollout_log_prob: ``[batch, response_len]`` the rollout engine's log-probs of them.
        response_mask: ``[batch, response_len]`` trained tokens.
        config: the ``algorithm.rollout_correction`` section (or a mapping of it).

    Returns:
        A :class:`RolloutCorrection`. The weights and rejections are computed without gradient
        (inputs are detached: the weights change the measure, not the objective). An empty
        ``response_mask`` (verl raises) gives no metrics, the mask unchanged and zero weights.

    Raises:
        ValueError: the three tensors differ in shape.
    """
    if not (old_log_prob.shape == rollout_log_prob.shape == response_mask.shape):
        raise ValueError(
            f"old_log_prob {tuple(old_log_prob.shape)}, rollout_log_prob "
            f"{tuple(rollout_log_prob.shape)} and response_mask {tuple(response_mask.shape)} "
            "must have the same shape [batch, response_len]"
        )
    cfg = _as_config(config)
    old_log_prob, rollout_log_prob = old_log_prob.detach(), rollout_log_prob.detach()
    if not bool(response_mask.any()):
        weights = None if cfg.rollout_is is None else torch.zeros_like(old_log_prob)
        return RolloutCorrection(weights, response_mask.clone(), {})
    log_ratio = old_log_prob - rollout_log_prob
    metrics: Metrics = {}
    weights: Optional[Tensor] = None
    if cfg.rollout_is is not None:
        upper, lower = cfg.is_bounds
        weights, is_metrics = rollout_is_weights(
            log_ratio, response_mask, cfg.rollout_is, upper, lower, cfg.rollout_is_batch_normalize
        )
        metrics.update(is_metrics)
    mask = response_mask.clone()
    if cfg.rollout_rs is not None:
        mask, rs_metrics = rollout_rejection_mask(log_ratio, response_mask, cfg.rs_bounds)
        metrics.update(rs_metrics)
    metrics.update(mismatch_metrics(old_log_prob, rollout_log_prob, response_mask))
    return RolloutCorrection(weights, mask, _to_floats(metrics))


def reinforce_loss(
    logprob: Tensor,
    rollout_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    is_weights: Optional[Tensor] = None,
    loss_agg_mode: str = "token-mean",
) -> tuple[Tensor, dict[str, Tensor]]:
    """REINFORCE with explicit IS weights: per token ``-w * A * logprob`` (verl's bypass-mode
    ``loss_type: reinforce``; ``w = 1`` without weights).

    No ratio and no clipping: the (truncated, detached) weight ``w = pi_train / pi_rollout``
    is the whole off-policy correction. ``mask`` should already hold the rejections.

    Returns:
        ``(loss, metrics)``: the aggregated loss (grad through ``logprob``); ``ppo_kl``
        (``E[log pi_rollout - log pi]`` over ``mask``) and ``pg_loss``, detached.
    """
    losses = -advantages * logprob
    if is_weights is not None:
        losses = losses * is_weights
    loss = aggregate_loss(losses, mask, loss_agg_mode=loss_agg_mode)
    kl = _masked_mean(rollout_logprob - logprob.detach(), mask)
    return loss, {"ppo_kl": kl.detach(), "pg_loss": loss.detach()}
