"""Policy-loss math as pure tensor functions; the registered classes are thin wrappers.

Keeping the math here (no ``self``, no config, no ``.item()``) lets the parity tests compare
each formula with verl's directly, and lets other code reuse a loss without the registry.

Shapes, for every function: ``logprob``, ``old_logprob``, ``ref_logprob``, ``advantages`` and
``mask`` are ``[batch, response_len]``; ``mask`` is 1/True on trained tokens (bool or float).
Every function returns ``(loss, metrics)``: ``loss`` a scalar tensor (with grad through
``logprob``), ``metrics`` a dict of detached scalar tensors (turn them into floats with
:func:`metrics_to_floats`). Every loss reduces its per-token matrix with
:func:`trinity.algorithm.utils.aggregate_loss`, so an empty mask gives a loss of 0, not NaN.
The ratio losses also take ``rollout_is_weights`` (``algorithm.rollout_correction``'s IS
weights), multiplied into the per-token loss before aggregation, as in verl.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from trinity.algorithm.utils import aggregate_loss, masked_mean, masked_sum

__all__ = [
    "LOG_RATIO_CLAMP",
    "chord_mu",
    "cispo_loss",
    "dpo_loss",
    "gspo_loss",
    "importance_sampling_loss",
    "m2po_loss",
    "m2po_mask",
    "metrics_to_floats",
    "opmd_loss",
    "ppo_clip_loss",
    "rec_loss",
    "sapo_loss",
    "sft_is_loss",
    "sft_loss",
    "sft_phi_loss",
    "sppo_loss",
    "topr_loss",
]

#: Token log-ratios are clamped to ``[-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP]`` before ``exp`` (as
#: verl does) so one stale token cannot overflow the ratio.
LOG_RATIO_CLAMP = 20.0


def metrics_to_floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Detach tensors and turn every metric into a Python float (what loggers expect)."""
    return {
        k: float(v.detach().item()) if isinstance(v, Tensor) else float(v)
        for k, v in metrics.items()
    }


def _log_ratio(logprob: Tensor, old_logprob: Tensor, clamp: bool = True) -> Tensor:
    log_ratio = logprob - old_logprob
    if clamp:
        log_ratio = torch.clamp(log_ratio, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    return log_ratio


def _weighted(losses: Tensor, rollout_is_weights: Optional[Tensor]) -> Tensor:
    """Per-token losses times the rollout-correction IS weights, if any.

    ``rollout_is_weights`` (``[batch, response_len]``, detached) are
    :func:`trinity.algorithm.rollout_correction.rollout_is_weights`: they reweight each token's
    loss by ``pi_train / pi_rollout`` before aggregation, as verl's losses do with theirs
    (the aggregation's denominators are unchanged).
    """
    return losses if rollout_is_weights is None else losses * rollout_is_weights


def ppo_clip_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: Optional[float] = 3.0,
    loss_agg_mode: str = "token-mean",
    sequence_mask_delta: Optional[float] = None,
    truncate_pos_low: Optional[float] = None,
    truncate_neg_high: Optional[float] = None,
    rollout_is_weights: Optional[Tensor] = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate with separate low/high ranges (DAPO clip-higher) and dual-clip.

    ``ratio = exp(logprob - old_logprob)``; per token
    ``max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))``, and where ``A < 0``
    that value is further capped at ``-A * clip_ratio_c`` (dual-clip, arXiv:1912.09729) so a
    huge ratio on a bad token cannot produce an unbounded loss. ``clip_ratio_c=None`` turns
    dual-clip off. Equal to verl's ``compute_policy_loss_vanilla`` (tested).

    ``sequence_mask_delta`` (Trinity-RFT's ``enable_sequence_masking``/``delta``): drop the
    negative-advantage tokens of sequences whose mean token KL to the old policy exceeds it.

    ``truncate_pos_low`` / ``truncate_neg_high`` (Trinity-RFT's ``truncate_adv_pos_is`` /
    ``truncate_adv_neg_is`` with ``truncate_is_range_low`` / ``_high``): after clipping, cap
    the per-token loss at ``-A * truncate_pos_low`` where ``A > 0`` and at
    ``-A * truncate_neg_high`` where ``A < 0``, i.e. bound the importance ratio's effect when
    rollout and training engines disagree on a token's probability. Metrics
    ``is_truncate_frac_pos`` / ``is_truncate_frac_neg``: the share of trained tokens capped.

    Metrics: ``pg_clipfrac``, ``pg_clipfrac_lower`` (dual-clip active), ``ppo_kl``, ``pg_loss``
    (and ``seq_mask/*`` with sequence masking).
    """
    log_ratio = _log_ratio(logprob, old_logprob)
    ratio = torch.exp(log_ratio)
    ppo_kl = masked_mean(-log_ratio, mask)

    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).to(logprob.dtype), mask)

    negative = advantages < 0
    if clip_ratio_c is not None:
        if clip_ratio_c <= 1.0:
            raise ValueError(f"clip_ratio_c must be > 1.0 for dual-clip PPO, got {clip_ratio_c}")
        pg_losses3 = -advantages * clip_ratio_c
        clip_pg_losses2 = torch.minimum(pg_losses3, clip_pg_losses1)
        pg_clipfrac_lower = masked_mean(
            (torch.gt(clip_pg_losses1, pg_losses3) & negative).to(logprob.dtype), mask
        )
        pg_losses = torch.where(negative, clip_pg_losses2, clip_pg_losses1)
    else:
        pg_clipfrac_lower = torch.zeros((), dtype=logprob.dtype, device=logprob.device)
        pg_losses = clip_pg_losses1

    metrics: dict[str, Tensor] = {}
    if truncate_pos_low is not None:
        capped = -advantages * truncate_pos_low
        hit = torch.lt(capped, pg_losses) & (advantages > 0)
        metrics["is_truncate_frac_pos"] = masked_mean(hit.to(logprob.dtype), mask).detach()
        pg_losses = torch.where(advantages > 0, torch.minimum(pg_losses, capped), pg_losses)
    if truncate_neg_high is not None:
        capped = -advantages * truncate_neg_high
        hit = torch.lt(capped, pg_losses) & negative
        metrics["is_truncate_frac_neg"] = masked_mean(hit.to(logprob.dtype), mask).detach()
        pg_losses = torch.where(negative, torch.minimum(pg_losses, capped), pg_losses)
    if sequence_mask_delta is not None:
        seq_kl = masked_mean(-log_ratio, mask, axis=-1)  # [batch]
        drop = negative & (seq_kl > sequence_mask_delta).unsqueeze(-1)  # [batch, len]
        pg_losses = pg_losses * (~drop).to(pg_losses.dtype)
        # Trinity-RFT's ratio: masked positions over trained tokens (a padding position with a
        # negative advantage counts too; padding carries advantage 0 in a real batch)
        trained = mask.to(logprob.dtype).sum().clamp(min=1e-10)
        metrics["seq_mask/masked_tokens"] = (drop.to(logprob.dtype).sum() / trained).detach()
        metrics["seq_mask/mean_sequence_kl"] = (
            seq_kl.mean().detach() if seq_kl.numel() else torch.zeros((), dtype=logprob.dtype)
        )

    pg_losses = _weighted(pg_losses, rollout_is_weights)
    pg_loss = aggregate_loss(pg_losses, mask, loss_agg_mode=loss_agg_mode)
    metrics.update(
        pg_clipfrac=pg_clipfrac.detach(),
        pg_clipfrac_lower=pg_clipfrac_lower.detach(),
        ppo_kl=ppo_kl.detach(),
        pg_loss=pg_loss.detach(),
    )
    return pg_loss, metrics


def gspo_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.0003,
    clip_high: float = 0.0004,
    loss_agg_mode: str = "seq-mean-token-mean",
    rollout_is_weights: Optional[Tensor] = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO (arXiv:2507.18071): PPO clipping on a *sequence-level* importance ratio.

    ``s_i = exp(mean_t log(pi/pi_old))`` over the sequence's trained tokens; the token ratio
    is ``sg[s_i] * pi / sg[pi]`` (GSPO-token), so its value is ``s_i`` for every token while
    the gradient still flows per token. Clipping a length-normalised ratio needs far smaller
    ranges than token PPO (defaults ``3e-4``/``4e-4``). The log-ratio is clamped at 10 before
    ``exp`` as in verl; equal to verl's ``compute_policy_loss_gspo`` (tested).

    Metrics: ``pg_clipfrac``, ``ppo_kl`` (token), ``ppo_kl_seq`` (mean over rows), ``pg_loss``.
    """
    mask_f = mask.to(logprob.dtype)
    log_ratio = logprob - old_logprob
    seq_lengths = mask_f.sum(dim=-1).clamp(min=1)
    log_ratio_seq = (log_ratio * mask_f).sum(dim=-1) / seq_lengths  # [batch]
    log_seq_ratio = logprob - logprob.detach() + log_ratio_seq.detach().unsqueeze(-1)
    seq_ratio = torch.exp(torch.clamp(log_seq_ratio, max=10.0))

    pg_losses1 = -advantages * seq_ratio
    pg_losses2 = -advantages * torch.clamp(seq_ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg_losses = torch.maximum(pg_losses1, pg_losses2)
    pg_losses = _weighted(pg_losses, rollout_is_weights)
    pg_loss = aggregate_loss(pg_losses, mask, loss_agg_mode=loss_agg_mode)

    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).to(logprob.dtype), mask)
    ppo_kl = masked_mean(-log_ratio, mask)
    ppo_kl_seq = (
        (-log_ratio_seq).mean() if log_ratio_seq.numel() else torch.zeros((), dtype=logprob.dtype)
    )
    return pg_loss, {
        "pg_clipfrac": pg_clipfrac.detach(),
        "ppo_kl": ppo_kl.detach(),
        "ppo_kl_seq": ppo_kl_seq.detach(),
        "pg_loss": pg_loss.detach(),
    }


def cispo_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 1.0,
    clip_high: float = 0.28,
    loss_agg_mode: str = "token-mean",
    mask_truncated: bool = True,
    rollout_is_weights: Optional[Tensor] = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO (MiniMax-M1, arXiv:2506.13585): REINFORCE weighted by a clipped, stop-grad IS ratio.

    Per token ``-sg(clip(ratio, 1 - clip_low, 1 + clip_high)) * A * logprob``: unlike PPO,
    clipping bounds the *weight* instead of zeroing the gradient, so rare high-ratio tokens
    keep contributing.

    ``mask_truncated=True`` (Trinity-RFT's implementation, the paper's "unified" form with a
    token mask): tokens with ``ratio > 1 + clip_high`` and ``A > 0``, or ``ratio < 1 - clip_low``
    and ``A < 0``, are dropped. ``mask_truncated=False`` is verl's ``compute_policy_loss_cispo``
    (tested equal); Trinity-RFT's default ``clip_low=1.0`` makes the lower mask inactive.

    Metrics: ``pg_clipfrac`` (weight clipped), ``masked_frac`` (fraction of trained tokens the
    mask dropped; Trinity-RFT logged the kept fraction under this name), ``ppo_kl``, ``pg_loss``.
    """
    log_ratio = _log_ratio(logprob, old_logprob)
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    if mask_truncated:
        drop = ((ratio > 1.0 + clip_high) & (advantages > 0)) | (
            (ratio < 1.0 - clip_low) & (advantages < 0)
        )
    else:
        drop = torch.zeros_like(ratio, dtype=torch.bool)
    weight = (clipped_ratio * (~drop).to(ratio.dtype)).detach()
    pg_losses = -weight * advantages * logprob
    pg_losses = _weighted(pg_losses, rollout_is_weights)
    pg_loss = aggregate_loss(pg_losses, mask, loss_agg_mode=loss_agg_mode)
    return pg_loss, {
        "pg_clipfrac": masked_mean((ratio != clipped_ratio).to(logprob.dtype), mask).detach(),
        "masked_frac": masked_mean(drop.to(logprob.dtype), mask).detach(),
        "ppo_kl": masked_mean(-log_ratio, mask).detach(),
        "pg_loss": pg_loss.detach(),
    }


def sapo_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    loss_agg_mode: str = "token-mean",
    trinity_rft_surrogate: bool = False,
    rollout_is_weights: Optional[Tensor] = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """SAPO (arXiv:2511.20347): a smooth sigmoid gate on the ratio instead of a hard clip.

    Per token ``-f(ratio) * A`` with ``f(x) = sigmoid(tau * (x - 1)) * 4 / tau``,
    ``tau = tau_pos`` where ``A > 0`` else ``tau_neg``. ``f(1) = 2 / tau`` and ``f'(1) = 1``,
    so on-policy the gradient equals the policy gradient, and it decays smoothly as the ratio
    leaves 1 (faster for negative advantages when ``tau_neg > tau_pos``).

    This is the paper's objective, which Trinity-RFT's docstring states and verl implements
    (``compute_policy_loss_sapo``, tested equal for ``seq-mean-token-mean``; verl always uses
    that mode, we honour ``loss_agg_mode``). Trinity-RFT's code instead uses the surrogate
    ``-A * sg(f(ratio)) * logprob``, whose gradient is weighted by ``f`` rather than ``f' * ratio``;
    we follow the formula. ``trinity_rft_surrogate=True`` computes Trinity-RFT's surrogate
    instead (its loss value and gradient), for reproducing its runs.

    Metrics: ``ppo_kl``, ``avg_soft_gate``, ``avg_ratio``, ``pos_adv_frac``, ``pg_loss``.
    """
    log_ratio = _log_ratio(logprob, old_logprob)
    ratio = torch.exp(log_ratio)
    pos = torch.as_tensor(tau_pos, dtype=ratio.dtype, device=ratio.device)
    neg = torch.as_tensor(tau_neg, dtype=ratio.dtype, device=ratio.device)
    taus = torch.where(advantages > 0, pos, neg)
    gates = torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus)
    if trinity_rft_surrogate:
        pg_losses = -advantages * gates.detach() * logprob
    else:
        pg_losses = -gates * advantages
    pg_losses = _weighted(pg_losses, rollout_is_weights)
    pg_loss = aggregate_loss(pg_losses, mask, loss_agg_mode=loss_agg_mode)
    return pg_loss, {
        "ppo_kl": masked_mean(-log_ratio, mask).detach(),
        "avg_soft_gate": masked_mean(gates, mask).detach(),
        "avg_ratio": masked_mean(ratio, mask).detach(),
        "pos_adv_frac": masked_mean((advantages > 0).to(logprob.dtype), mask).detach(),
        "pg_loss": pg_loss.detach(),
    }


def topr_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    advantage_threshold: float = 0.0,
    loss_agg_mode: str = "token-mean",
    rollout_is_weights: Optional[Tensor] = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """TOPR (arXiv:2503.14286): tapered off-policy REINFORCE.

    Per token ``-sg(alpha) * A * logprob`` with ``alpha = clip(ratio, 0, 1)`` where
    ``A <= advantage_threshold`` and ``alpha = 1`` otherwise: positive examples get the plain
    SFT-like gradient, negative ones are down-weighted when off-policy, which keeps the
    negative gradient from blowing up without clipping positives. ``advantages`` play the
    paper's rewards (a baseline is allowed).

    Metrics: ``topr_loss``, ``avg_alpha``, ``avg_ratio``.
    """
    ratio = torch.exp(logprob - old_logprob)
    alpha = torch.where(
        advantages <= advantage_threshold, torch.clamp(ratio, 0.0, 1.0), torch.ones_like(ratio)
    )
    losses = -alpha.detach() * advantages * logprob
    loss = aggregate_loss(_weighted(losses, rollout_is_weights), mask, loss_agg_mode=loss_agg_mode)
    return loss, {
        "topr_loss": loss.detach(),
        "avg_alpha": masked_mean(alpha, mask).detach(),
        "avg_ratio": masked_mean(ratio, mask).detach(),
    }


def opmd_loss(
    logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    tau: float = 1.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[Tensor, dict[str, Tensor]]:
    """OPMD (the algorithm guide's example): ``aggregate(-A * logprob) / (1 + tau)``.

    The ``1 / (1 + tau)`` factor is the mirror-descent regularisation towards the current
    policy; OPMD needs no old log-probs. Metrics: ``opmd_loss``.
    """
    loss = aggregate_loss(-advantages * logprob, mask, loss_agg_mode=loss_agg_mode) / (1.0 + tau)
    return loss, {"opmd_loss": loss.detach()}


def importance_sampling_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    loss_agg_mode: str = "token-mean",
    rollout_is_weights: Optional[Tensor] = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Unclipped importance-sampling loss ``-A * exp(logprob - old_logprob)``.

    Used for on-policy distillation, where advantages are per-token teacher/student gaps
    and there is nothing to clip. Metrics: ``pg_loss``, ``ratio/mean``, ``approx_kl``.
    """
    log_ratio = _log_ratio(logprob, old_logprob)
    ratio = torch.exp(log_ratio)
    losses = _weighted(-advantages * ratio, rollout_is_weights)
    loss = aggregate_loss(losses, mask, loss_agg_mode=loss_agg_mode)
    return loss, {
        "pg_loss": loss.detach(),
        "ratio/mean": masked_mean(ratio, mask).detach(),
        "approx_kl": masked_mean(-log_ratio, mask).detach(),
    }


def sft_loss(
    logprob: Tensor, mask: Tensor, loss_agg_mode: str = "token-mean"
) -> tuple[Tensor, dict[str, Tensor]]:
    """Negative log-likelihood of the trained tokens. Metrics: ``sft_loss``."""
    loss = aggregate_loss(-logprob, mask, loss_agg_mode=loss_agg_mode)
    return loss, {"sft_loss": loss.detach()}


def sft_is_loss(
    logprob: Tensor, mask: Tensor, loss_agg_mode: str = "token-mean"
) -> tuple[Tensor, dict[str, Tensor]]:
    """SFT weighted by the token's own probability (CHORD's ``sft_is``):
    ``aggregate(-sg(p) * logprob)`` with ``p = exp(logprob)``.

    The gradient of each token is ``p`` times the NLL's, i.e. that of ``-p`` itself: tokens the
    policy already finds unlikely (where imitating an expert would pull it far from its own
    distribution) are down-weighted. Metrics: ``sft_is_loss``.
    """
    weight = torch.exp(logprob).detach()
    loss = aggregate_loss(-logprob * weight, mask, loss_agg_mode=loss_agg_mode)
    return loss, {"sft_is_loss": loss.detach()}


def sft_phi_loss(
    logprob: Tensor, mask: Tensor, loss_agg_mode: str = "token-mean", cutoff_prob: float = 1.0
) -> tuple[Tensor, dict[str, Tensor]]:
    """SFT weighted by ``phi(p) = p * (1 - p)`` (CHORD's ``sft_phi``, arXiv:2508.11408):
    ``aggregate(-sg(phi(p)) * min(logprob, log(cutoff_prob)))`` with ``p = exp(logprob)``.

    ``phi`` vanishes at both ends: tokens the policy already predicts (``p`` near 1) and tokens
    it finds very unlikely (``p`` near 0) get little weight, so expert data refines the policy
    without overwriting it. With ``cutoff_prob < 1`` the log-prob is capped, so tokens above
    that probability get no gradient at all. Metrics: ``sft_phi_loss``.
    """
    prob = torch.exp(logprob)
    if cutoff_prob < 1.0:
        logprob = torch.clamp(logprob, max=math.log(cutoff_prob))
    weight = (prob * (1.0 - prob)).detach()
    loss = aggregate_loss(-logprob * weight, mask, loss_agg_mode=loss_agg_mode)
    return loss, {"sft_phi_loss": loss.detach()}


def chord_mu(step: int, warmup_steps: int, decay_steps: int, peak: float, valley: float) -> float:
    """CHORD's weight of the SFT part at train step ``step``: a linear warm-up from 0 to
    ``peak`` over ``warmup_steps``, a cosine decay to ``valley`` over ``decay_steps``, then
    ``valley`` (so with no warm-up and no decay it is ``valley`` throughout)."""
    if step < warmup_steps:
        return step / warmup_steps * peak
    if step >= warmup_steps + decay_steps:
        return valley
    progress = (step - warmup_steps) / decay_steps
    return valley + (peak - valley) * 0.5 * (1.0 + math.cos(math.pi * progress))


def sppo_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    epsilon: float = 0.3,
    loss_agg_mode: str = "token-mean",
    rollout_is_weights: Optional[Tensor] = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """sPPO (token level, arXiv:2108.05828): ``-A * log(pi / pi_old)`` on tokens whose ratio is
    in ``[1 / (1 + epsilon), 1 + epsilon]``, 0 elsewhere.

    The log-ratio surrogate has the policy gradient's gradient on-policy, and dropping tokens
    outside a range symmetric in log space bounds the update multiplicatively in both
    directions (PPO's ``[1 - eps, 1 + eps]`` is not). Metrics: ``pg_clipfrac`` (share of
    trained tokens outside the range), ``pg_loss``.
    """
    log_ratio = logprob - old_logprob
    ratio = torch.exp(_log_ratio(logprob, old_logprob)).detach()
    in_range = (ratio >= 1.0 / (1.0 + epsilon)) & (ratio <= 1.0 + epsilon)
    losses = torch.where(in_range, -advantages * log_ratio, torch.zeros_like(log_ratio))
    loss = aggregate_loss(_weighted(losses, rollout_is_weights), mask, loss_agg_mode=loss_agg_mode)
    return loss, {
        "pg_clipfrac": masked_mean((~in_range).to(logprob.dtype), mask).detach(),
        "pg_loss": loss.detach(),
    }


def _rec_in_range(
    ratio: Tensor,
    seq_ratio: Tensor,
    advantages: Tensor,
    clip_mode: str,
    bounds: tuple[float, float, float, float],
) -> Tensor:
    """REC's token mask ``[B, R]`` (True: the token trains); see :func:`rec_loss`."""
    low, high, low_prime, high_prime = bounds
    pos, neg = advantages >= 0, advantages <= 0
    if clip_mode == "none":
        return torch.ones_like(ratio, dtype=torch.bool)
    if clip_mode == "two-side":
        return (ratio >= 1.0 - low) & (ratio <= 1.0 + high)
    if clip_mode == "one-side":
        return (pos & (ratio <= 1.0 + high)) | (neg & (ratio >= 1.0 - low))
    if clip_mode == "gspo-one-side":
        return (pos & (seq_ratio <= 1.0 + high)) | (neg & (seq_ratio >= 1.0 - low))
    if clip_mode == "ring":
        inside = (ratio >= 1.0 - low) & (ratio <= 1.0 + high)
        return inside | (pos & (ratio <= 1.0 - low_prime)) | (neg & (ratio >= 1.0 + high_prime))
    raise ValueError(f"unknown REC clip_mode {clip_mode!r}")


def rec_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    epsilon_low_prime: float = 0.6,
    epsilon_high_prime: float = 2.0,
    clip_mode: str = "none",
    weight: str = "none",
    regularizer: str = "none",
    regularizer_coef: float = 0.0,
    temp: float = 1.0,
    loss_agg_mode: str = "token-mean",
    rollout_is_weights: Optional[Tensor] = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """REC (Trinity-RFT's REINFORCE-with-clipping family): ``-w * A * logprob`` on the tokens a
    clip mode keeps, plus an optional regulariser.

    ``ratio = sg(pi / pi_old)`` per token; ``seq_ratio = sg(exp(mean_t log(pi / pi_old)))`` per
    row (GSPO's length-normalised ratio). The token trains when (``A >= 0`` is "positive",
    ``A <= 0`` "negative"; ``low``/``high`` are ``epsilon_low``/``epsilon_high``):

    * ``none``: always;
    * ``two-side``: ``1 - low <= ratio <= 1 + high``;
    * ``one-side``: positive and ``ratio <= 1 + high``, or negative and ``ratio >= 1 - low``
      (only the side that would move the ratio further out is cut, as PPO);
    * ``gspo-one-side``: ``one-side`` on ``seq_ratio``;
    * ``ring``: inside ``two-side``, or positive with ``ratio <= 1 - epsilon_low_prime``, or
      negative with ``ratio >= 1 + epsilon_high_prime`` (far-off tokens whose update pulls them
      back stay in).

    ``weight``: ``none`` (``w = 1``), ``importance_sampling`` (``w = ratio``),
    ``gspo_importance_sampling`` (``w = seq_ratio``), ``advantage`` (``w = exp(A / temp)``).
    ``regularizer``: ``forward-kl`` adds ``-regularizer_coef * logprob`` per token, ``k2`` adds
    ``regularizer_coef * (logprob - old_logprob)^2`` (Kimi's, its 1/2 absorbed in the coef).

    Metrics: ``pg_clipfrac`` (share of trained tokens cut), ``pg_loss``.
    """
    log_ratio = _log_ratio(logprob, old_logprob)
    ratio = torch.exp(log_ratio).detach()
    seq_log_ratio = masked_mean(log_ratio, mask.to(logprob.dtype), axis=-1).detach()
    seq_ratio = torch.exp(seq_log_ratio.clamp(max=LOG_RATIO_CLAMP)).unsqueeze(-1)
    bounds = (epsilon_low, epsilon_high, epsilon_low_prime, epsilon_high_prime)
    in_range = _rec_in_range(ratio, seq_ratio, advantages, clip_mode, bounds)
    if weight == "importance_sampling":
        advantages = advantages * ratio
    elif weight == "gspo_importance_sampling":
        advantages = advantages * seq_ratio
    elif weight == "advantage":
        advantages = advantages * torch.exp(advantages / temp)
    elif weight != "none":
        raise ValueError(f"unknown REC weight {weight!r}")
    losses = -advantages * logprob * in_range.to(logprob.dtype)
    if regularizer == "forward-kl":
        losses = losses - regularizer_coef * logprob
    elif regularizer == "k2":
        losses = losses + regularizer_coef * (logprob - old_logprob).square()
    elif regularizer != "none":
        raise ValueError(f"unknown REC regularizer {regularizer!r}")
    losses = torch.where(mask.to(torch.bool), losses, torch.zeros_like(losses))
    loss = aggregate_loss(_weighted(losses, rollout_is_weights), mask, loss_agg_mode=loss_agg_mode)
    return loss, {
        "pg_clipfrac": masked_mean((~in_range).to(logprob.dtype), mask).detach(),
        "pg_loss": loss.detach(),
    }


def m2po_mask(
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, threshold: float, trust_region_only: bool
) -> tuple[Tensor, dict[str, Tensor]]:
    """M2PO's token mask ``[B, R]`` (True: the token trains) and its statistics.

    The constrained tokens ``T`` are the trained ones, or with ``trust_region_only`` those PPO
    would clip (``A > 0`` and ``log r > 0``, or ``A < 0`` and ``log r < 0``). While the mean
    of ``(log r)^2`` over ``T`` exceeds ``threshold``, the token of ``T`` with the largest
    ``(log r)^2`` is removed: in one pass, sort ``T`` by ``(log r)^2`` and keep the longest
    prefix whose running mean is ``<= threshold`` (the running mean of ascending values only
    grows, so this is where the removal loop stops). Ties go in index order.

    Metrics: ``m2_before`` / ``m2_after`` (mean second moment over ``T`` before and after),
    ``masked_fraction`` and ``trust_region_fraction`` (shares of the trained tokens removed and
    constrained).
    """
    m = mask.to(torch.bool)
    lr = log_ratio.detach().to(torch.float64)
    constrained = m
    if trust_region_only:
        constrained = m & (((advantages > 0) & (lr > 0)) | ((advantages < 0) & (lr < 0)))
    flat = torch.nonzero(constrained.reshape(-1)).flatten()
    second = lr.reshape(-1)[flat].square()
    zero = torch.zeros((), dtype=torch.float64)
    m2_before = second.mean() if second.numel() else zero
    keep = torch.ones_like(m).reshape(-1)
    m2_after = m2_before
    if second.numel() and float(m2_before) > threshold:
        values, order = torch.sort(second, stable=True)
        running = torch.cumsum(values, 0) / torch.arange(1, values.numel() + 1)
        n_keep = int((running <= threshold).sum())
        keep[flat[order[n_keep:]]] = False
        m2_after = running[n_keep - 1] if n_keep else zero
    keep = keep.reshape(m.shape)
    trained = m.sum().clamp_min(1).to(torch.float64)
    return keep, {
        "m2_before": m2_before,
        "m2_after": m2_after,
        "masked_fraction": (m & ~keep).sum() / trained,
        "trust_region_fraction": constrained.sum() / trained,
    }


def m2po_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    m2_threshold: float = 0.04,
    trust_region_only: bool = True,
    loss_agg_mode: str = "token-mean",
    rollout_is_weights: Optional[Tensor] = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """M2PO (Second-Moment Trust Policy Optimization, arXiv:2510.01161): the unclipped
    importance-sampled objective ``-A * pi / pi_old`` on the tokens :func:`m2po_mask` keeps.

    Stale (off-policy) data makes some tokens' ratios extreme; PPO's per-token clip then cuts
    many informative high-entropy tokens. M2PO instead bounds the batch's second moment of the
    log-ratio, ``M2 = mean((log r)^2) <= m2_threshold`` (it bounds the chi-square divergence
    between the two policies), removing only the few most extreme tokens until it holds.
    Removed tokens still count in the aggregation's denominators (the paper averages over all
    tokens, to behave like PPO's clipping). The constraint is taken over the tokens of the
    batch this function sees (in the trainer, one micro-batch).

    Metrics: those of :func:`m2po_mask`, ``ppo_kl``, ``ratio/mean``, ``pg_loss``.
    """
    log_ratio = _log_ratio(logprob, old_logprob)
    keep, metrics = m2po_mask(log_ratio, advantages, mask, m2_threshold, trust_region_only)
    ratio = torch.exp(log_ratio)
    losses = torch.where(keep, -advantages * ratio, torch.zeros_like(ratio))
    loss = aggregate_loss(_weighted(losses, rollout_is_weights), mask, loss_agg_mode=loss_agg_mode)
    out = {k: v.detach() for k, v in metrics.items()}
    out.update(
        ppo_kl=masked_mean(-log_ratio, mask).detach(),
        pg_loss=loss.detach(),
    )
    out["ratio/mean"] = masked_mean(ratio, mask).detach()
    return loss, out


def _dpo_pair_loss(z: Tensor, beta: float, label_smoothing: float) -> Tensor:
    """``-(1 - ls) * logsigmoid(beta * z) - ls * logsigmoid(-beta * z)`` of each pair's
    log-ratio margin ``z`` (conservative DPO when ``ls > 0``)."""
    chosen_wins = -F.logsigmoid(beta * z) * (1.0 - label_smoothing)
    return chosen_wins - F.logsigmoid(-beta * z) * label_smoothing


def dpo_loss(
    logprob: Tensor,
    ref_logprob: Tensor,
    mask: Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    sum_pairs_over_batch: bool = False,
) -> tuple[Tensor, dict[str, Tensor]]:
    """DPO (arXiv:2305.18290) on rows interleaved ``[chosen_0, rejected_0, chosen_1, ...]``.

    ``collate_experiences`` lays DPO pairs out this way, so even rows are chosen and odd rows
    rejected. Per pair, ``z = (log pi(c) - log ref(c)) - (log pi(r) - log ref(r))`` with
    sequence log-probs summed over ``mask``; the loss is
    ``-(1 - ls) * logsigmoid(beta * z) - ls * logsigmoid(-beta * z)`` (conservative DPO when
    ``label_smoothing > 0``), averaged over pairs (0 for no pairs).

    Metrics: ``chosen_reward``, ``rejected_reward`` (``beta`` times the mean log-ratio),
    ``accuracy_mean`` (chosen log-ratio > rejected), ``dpo_loss``.

    ``sum_pairs_over_batch=True`` reproduces Trinity-RFT's ``DPOLossFn``, which sums the
    log-ratios of *all* chosen rows and of *all* rejected rows of the batch before the
    sigmoid, i.e. treats the whole micro-batch as one pair (identical to per-pair DPO only for
    a batch of one pair). It accepts an odd batch (the extra chosen row joins the sum).

    Raises:
        ValueError: an odd number of rows (a pair was split), unless ``sum_pairs_over_batch``.
    """
    if sum_pairs_over_batch:
        fmask = mask.to(logprob.dtype)
        chosen_sum = masked_sum(logprob[0::2] - ref_logprob[0::2], fmask[0::2])
        rejected_sum = masked_sum(logprob[1::2] - ref_logprob[1::2], fmask[1::2])
        loss = _dpo_pair_loss(chosen_sum - rejected_sum, beta, label_smoothing)
        return loss, {
            "chosen_reward": beta * chosen_sum.detach(),
            "rejected_reward": beta * rejected_sum.detach(),
            "accuracy_mean": (chosen_sum.detach() > rejected_sum.detach()).to(logprob.dtype),
            "dpo_loss": loss.detach(),
        }
    if logprob.shape[0] % 2:
        raise ValueError(
            f"DPO needs rows [chosen, rejected] * n_pairs, got an odd batch of {logprob.shape[0]}"
        )
    log_ratio = masked_sum(logprob - ref_logprob, mask.to(logprob.dtype), axis=-1)  # [batch]
    chosen, rejected = log_ratio[0::2], log_ratio[1::2]  # [n_pairs]
    losses = _dpo_pair_loss(chosen - rejected, beta, label_smoothing)
    pairs = torch.ones_like(losses).unsqueeze(-1)  # [n_pairs, 1]: every pair counts once
    loss = aggregate_loss(losses.unsqueeze(-1), pairs, loss_agg_mode="token-mean")
    c, r = chosen.detach().unsqueeze(-1), rejected.detach().unsqueeze(-1)
    return loss, {
        "chosen_reward": beta * masked_mean(c, pairs),
        "rejected_reward": beta * masked_mean(r, pairs),
        "accuracy_mean": masked_mean((c > r).to(logprob.dtype), pairs),
        "dpo_loss": loss.detach(),
    }
