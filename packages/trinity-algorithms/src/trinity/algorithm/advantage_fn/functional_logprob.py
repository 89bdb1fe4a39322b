"""Per-token advantage math that reads log-probabilities or entropies, as pure tensor functions.

The companions of :mod:`trinity.algorithm.advantage_fn.functional` for the trainer-side
estimators of Trinity-RFT 0.6 that look at the tokens themselves rather than at one reward per
sequence: on-policy distillation and JSD (a teacher's log-probs against the student's) and the
Clip_B / Clip_V token filters (entropy-based signals that drop some negative-advantage tokens
from the action mask).

Shapes: every tensor is ``[B, R]`` (rows, response tokens); ``mask`` is 1/True on trained
tokens. Values under a zero mask never reach a result: they are replaced by 0 before any
reduction, so padding holding ``-inf`` log-probs gives no NaN.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = [
    "TokenFilter",
    "clip_b_keep",
    "clip_v_keep",
    "distill_advantages",
    "jsd_advantages",
    "jsd_per_token",
    "jsd_per_token_unweighted",
    "masked_population_std",
    "row_sum_stats",
]

_STAT_DTYPE = torch.float64
#: Below this std of the filter signal every token is kept (the signal carries no outlier).
_FLAT_STD = 1e-12


def masked_population_std(values: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``(mean, std)`` of the masked entries of ``values``, population (divide by ``n``).

    Computed in float64 over the whole batch (0 and 0 for an empty mask), as the token filters
    need: their thresholds are ``mu`` standard deviations of a batch-wide signal.
    """
    m = mask.to(torch.bool)
    x = torch.where(m, values.to(_STAT_DTYPE), torch.zeros((), dtype=_STAT_DTYPE))
    n = m.sum().clamp_min(1).to(_STAT_DTYPE)
    mean = x.sum() / n
    var = (torch.where(m, x - mean, torch.zeros_like(x)) ** 2).sum() / n
    return mean, var.sqrt()


def row_sum_stats(values: Tensor, mask: Tensor) -> tuple[float, float]:
    """Mean and unbiased std over rows of each row's masked sum (std 0 for fewer than 2 rows):
    the ``kl/*`` / ``jsd/*`` metrics of the distillation advantages."""
    m = mask.to(torch.bool)
    sums = torch.where(m, values.to(_STAT_DTYPE), torch.zeros((), dtype=_STAT_DTYPE)).sum(-1)
    if sums.numel() == 0:
        return 0.0, 0.0
    std = float(sums.std()) if sums.numel() > 1 else 0.0
    return float(sums.mean()), std


def distill_advantages(
    student_logprob: Tensor, teacher_logprob: Tensor, mask: Tensor, kl_coef: float = 1.0
) -> Tensor:
    """On-policy distillation (Tinker's, Trinity-RFT's ``on_policy_distill``):
    ``A_t = kl_coef * (log p_teacher - log p_student)`` on the student's own samples.

    ``log p_student - log p_teacher`` is the single-sample estimate of the reverse KL per token,
    so maximising ``A`` with a policy-gradient loss minimises the student's reverse KL to the
    teacher on the states the student visits. 0 on masked tokens.
    """
    m = mask.to(torch.bool)
    gap = teacher_logprob - student_logprob.to(teacher_logprob.dtype)
    return torch.where(m, kl_coef * gap, torch.zeros_like(gap))


def _log_mixture(s: Tensor, t: Tensor, beta: float) -> Tensor:
    """``log m`` of the sampled token, ``m = beta * p_teacher + (1 - beta) * p_student``."""
    return torch.logaddexp(s + math.log1p(-beta), t + math.log(beta))


def jsd_per_token(student_logprob: Tensor, teacher_logprob: Tensor, beta: float = 0.5) -> Tensor:
    """Per-token single-sample estimate of the generalised Jensen-Shannon divergence, in log
    space, from a token the *student* sampled.

    ``JSD_beta = beta * KL(teacher || M) + (1 - beta) * KL(student || M)`` with the mixture
    ``M = beta * teacher + (1 - beta) * student``. From the sampled token's log-probs ``s``
    (student) and ``t`` (teacher), ``log m = logaddexp(s + log(1 - beta), t + log(beta))``:
    ``beta * exp(t - s) * (t - log m) + (1 - beta) * (s - log m)``. The teacher's term is
    importance-weighted (``exp(t - s)``) because the token was drawn from the student, so the
    estimate's mean over the student's samples is ``JSD_beta``. ``beta = 0`` and ``beta = 1``
    are the pure KLs (SWIFT's and Trinity-RFT's convention, not the limit of the mixture
    formula, which is 0): ``s - t`` (``KL(student || teacher)``) and ``exp(t - s) * (t - s)``
    (``KL(teacher || student)``).

    Trinity-RFT 0.6 leaves the weight out (``beta * (t - log m) + (1 - beta) * (s - log m)``,
    and ``t - s`` at ``beta = 1``), which is never positive for ``0 < beta < 1`` (Jensen's
    inequality: ``log m >= beta * t + (1 - beta) * s``): see :func:`jsd_advantages`.
    """
    s, t = student_logprob.to(teacher_logprob.dtype), teacher_logprob
    if beta == 0.0:
        return s - t
    weight = torch.exp(t - s)
    if beta == 1.0:
        return weight * (t - s)
    log_m = _log_mixture(s, t, beta)
    return beta * weight * (t - log_m) + (1.0 - beta) * (s - log_m)


def jsd_per_token_unweighted(
    student_logprob: Tensor, teacher_logprob: Tensor, beta: float = 0.5
) -> Tensor:
    """Trinity-RFT 0.6's per-token JSD estimate: :func:`jsd_per_token` without the teacher
    term's importance weight, ``beta * (t - log m) + (1 - beta) * (s - log m)`` (``s - t``
    and ``t - s`` at ``beta`` 0 and 1). Kept for ``jsd``'s ``trinity_rft_estimate``."""
    s, t = student_logprob.to(teacher_logprob.dtype), teacher_logprob
    if beta == 0.0:
        return s - t
    if beta == 1.0:
        return t - s
    log_m = _log_mixture(s, t, beta)
    return beta * (t - log_m) + (1.0 - beta) * (s - log_m)


def jsd_advantages(student_logprob: Tensor, teacher_logprob: Tensor, beta: float = 0.5) -> Tensor:
    """Per-token advantage whose policy gradient, on the student's samples, is the negative
    gradient of ``JSD_beta`` (see :func:`jsd_per_token`) with respect to the student.

    ``d JSD_beta / d p_student(x) = (1 - beta) * log(p_student(x) / m(x))``, so the advantage
    is ``-(1 - beta) * (s - log m)``: positive on a token the teacher likes more than the
    student does (``t > s``), negative on one it likes less, 0 where they agree, and bounded
    below by ``(1 - beta) * log(1 - beta)`` (a token the teacher rules out costs a bounded
    amount, unlike the reverse KL of ``on_policy_distill``). The pure-KL ends: ``t - s`` at
    ``beta = 0`` (``on_policy_distill``'s) and ``exp(t - s) - 1`` at ``beta = 1`` (the forward
    KL's gradient, less the baseline 1).

    Trinity-RFT 0.6 uses the negative of its per-token JSD estimate as the advantage. For
    ``0 < beta < 1`` that value is never negative and grows with ``|s - t|`` in both
    directions, so every sampled token is reinforced, a token the teacher rules out as much as
    one it prefers: the student drifts away from the teacher (on the quickstart task its reward
    fell from 0.03 to 0 in 60 steps while its KL to the teacher rose). Here the advantage is the
    objective's gradient instead.
    """
    s, t = student_logprob.to(teacher_logprob.dtype), teacher_logprob
    if beta == 0.0:
        return t - s
    if beta == 1.0:
        return torch.exp(t - s) - 1.0
    return -(1.0 - beta) * (s - _log_mixture(s, t, beta))


class TokenFilter(NamedTuple):
    """What a token filter returns: ``keep`` ``[B, R]`` bool (True on the tokens that stay;
    ``mask & keep`` is the new action mask) and the signal's batch ``mean`` / ``std``."""

    keep: Tensor
    mean: Tensor
    std: Tensor


def clip_b_keep(
    advantages: Tensor, logprob: Tensor, entropy: Tensor, mask: Tensor, mu: float = 2.5
) -> TokenFilter:
    """Clip_B (arXiv:2602.03392, Trinity-RFT's ``clipb``): drop negative-advantage tokens whose
    entropy signal is an outlier on the low side.

    ``S = p * (H + log p)`` per token (``p`` the sampled token's probability, ``H`` the
    policy's entropy at that position) is centred by its batch mean over ``mask``; a token with
    ``A < 0`` and ``S - mean(S) < -mu * std(S)`` (population std) is dropped. Positive- and
    zero-advantage tokens all stay, and so does everything when ``std(S) < 1e-12``. Such
    tokens push down a confident choice where the policy is already sharp, the update that
    collapses entropy.
    """
    m = mask.to(torch.bool)
    signal = torch.exp(logprob.to(_STAT_DTYPE)) * (entropy.to(_STAT_DTYPE) + logprob)
    mean, std = masked_population_std(signal, m)
    if float(std) < _FLAT_STD:
        return TokenFilter(torch.ones_like(m), mean, std)
    drop = m & (advantages < 0) & (signal - mean < -mu * std)
    return TokenFilter(~drop, mean, std)


def clip_v_keep(
    advantages: Tensor,
    logprob: Tensor,
    entropy: Tensor,
    necs: Tensor,
    mask: Tensor,
    mu: float = 8.5,
    max_frac: float = 1e-4,
) -> TokenFilter:
    """Clip_V (Trinity-RFT's ``clipv``): drop negative-advantage tokens whose signal
    ``D = N - S`` exceeds ``mu`` batch standard deviations, at most ``max_frac`` of the tokens.

    ``S = p * (H + log p)`` as in :func:`clip_b_keep` and ``N`` is the per-token ``necs``
    field. ``std`` is the population std of ``D`` over ``mask`` (everything stays when it is
    below 1e-12). The candidates are the trained tokens with ``A < 0`` and ``D > mu * std``;
    if there are more than ``max(int(max_frac * n_tokens), 1)`` of them, only that many with
    the largest ``D`` are dropped, so the filter can never remove a large share of the batch.

    Only negative-advantage tokens are candidates, as the method states; Trinity-RFT 0.6's
    code also drops zero-advantage tokens with a large ``D`` when the cap is not reached.
    """
    m = mask.to(torch.bool)
    signal = torch.exp(logprob.to(_STAT_DTYPE)) * (entropy.to(_STAT_DTYPE) + logprob)
    d = necs.to(_STAT_DTYPE) - signal
    mean, std = masked_population_std(d, m)
    if float(std) < _FLAT_STD:
        return TokenFilter(torch.ones_like(m), mean, std)
    candidates = m & (advantages < 0) & (d > mu * std)
    n_tokens = int(m.sum())
    cap = max(int(max_frac * max(n_tokens, 1)), 1)
    n_candidates = int(candidates.sum())
    if n_candidates > cap:
        scores = torch.where(candidates, d, torch.full_like(d, -math.inf)).reshape(-1)
        top = torch.topk(scores, cap, largest=True).indices
        capped = torch.zeros_like(candidates).reshape(-1)
        capped[top] = True
        candidates = capped.reshape(candidates.shape)
    return TokenFilter(~candidates, mean, std)
