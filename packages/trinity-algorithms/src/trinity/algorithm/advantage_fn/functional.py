"""Advantage math as pure, vectorized tensor functions.

Every function here takes tensors and returns tensors: no :class:`Experience`, no Python loop per
group or per token. Group-relative estimators (GRPO, RLOO, OPMD, AsymRE, REC, GiGPO, REINFORCE++
with baseline) work on one scalar score per sequence, ``scores [B]``, plus an integer group id per
sequence, ``group_index [B]`` (``0 .. G-1``, from :func:`as_group_index`); per-group statistics
come from ``bincount`` / ``index_add`` / ``scatter_reduce``, so a whole explore step (thousands of
groups) costs a fixed handful of kernels. Token-level estimators (GAE, REINFORCE++, ReMax) work on
``[B, R]`` tensors (``R`` = longest response, right-padded) and scan the response axis once from
the end on a time-major copy, each step a few element-wise kernels over contiguous ``[B]`` rows
(same operations in the same order as verl's loops, so bit-identical before whitening).
Estimators that read per-token log-probabilities or entropies (on-policy distillation, JSD,
the Clip_B / Clip_V token filters) are in :mod:`.functional_logprob`.

Conventions shared with verl (``verl.trainer.ppo.core_algos``, the numerical reference; the
parity tests check each function against it within 1e-6):

* ``response_mask`` / ``action_mask`` ``[B, R]``: 1 on tokens the policy generated, 0 on padding
  and on environment tokens spliced into a multi-turn response.
* An outcome score is ``token_level_rewards.sum(-1)``; the outcome advantage of a sequence is its
  scalar broadcast over its mask (:func:`broadcast_to_tokens`).
* Standard deviations are unbiased (Bessel), as ``torch.std``.

Deliberate differences from verl, each switchable where it matters:

* **One-member groups.** verl, Trinity-RFT and the guide's OPMD example give such a group
  baseline 0 (mean 0, std 1), so its advantage is the raw reward; that is the default here too
  (``zero_singletons=False``), for parity. ``zero_singletons=True`` gives it advantage 0 instead
  — with no sibling there is nothing to compare against (verl's ``rloo_vectorized`` does this).
* **Constant groups.** When every score of a group is equal the centred score is exactly 0, not
  the rounding residue of ``x - mean(x)`` divided by ``std + epsilon`` (which verl can blow up to
  ~1e-3 for rewards like 0.1). No NaN or inf is produced even with ``epsilon=0``.
* **Masked whitening of one or zero tokens** (REINFORCE++, GAE) centres without scaling instead
  of raising (verl) or dividing by ``sqrt(1e-8)``.

Group statistics are accumulated in float64 and results returned in the dtype of the input
scores (verl keeps them in float32; on 100k bimodal rewards the two differ by up to ~1.5e-6,
verl's rounding: the float64 result is exact to the output's float32 ulp).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple, Optional, Union

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "GroupStats",
    "as_group_index",
    "broadcast_to_tokens",
    "check_finite",
    "group_stats",
    "masked_whiten",
    "reverse_linear_scan",
    "gae_advantages_returns",
    "grpo_advantages",
    "rloo_advantages",
    "opmd_advantages",
    "asymre_advantages",
    "RecResult",
    "rec_advantages",
    "GiGPOResult",
    "gigpo_advantages",
    "reinforce_plus_plus_advantages_returns",
    "reinforce_plus_plus_baseline_advantages",
    "remax_advantages_returns",
]

_STAT_DTYPE = torch.float64


# --------------------------------------------------------------------------------------
# Validation and grouping
# --------------------------------------------------------------------------------------


def check_finite(values: Tensor, ids: Optional[Sequence[Any]] = None, what: str = "reward") -> None:
    """Raise ``ValueError`` if ``values`` holds NaN or +-inf, naming the first offender.

    A NaN reward poisons every advantage of its group (mean and std become NaN) and, through
    the loss, the whole update; an inf does the same after centring. Rejecting it here gives
    the user the experience id instead of a NaN loss many steps later.

    Args:
        values: ``[B]`` or ``[B, R]`` rewards.
        ids: optional per-row ids (e.g. ``EID`` objects) used in the message.
        what: what the values are, for the message.
    """
    finite = torch.isfinite(values)
    if bool(finite.all()):
        return
    bad = (~finite).reshape(values.shape[0], -1).any(dim=-1) if values.dim() > 1 else ~finite
    row = int(torch.nonzero(bad)[0, 0])
    row_values = values[row]
    value = (
        float(row_values)
        if row_values.dim() == 0
        else float(row_values[~torch.isfinite(row_values)][0])
    )
    n_bad = int(bad.sum())
    where = f"experience {ids[row]}" if ids is not None else f"row {row}"
    raise ValueError(
        f"{where} has a non-finite {what} ({value}); {n_bad} of {values.shape[0]} rows are "
        f"non-finite. Fix the reward function: NaN/inf {what}s would turn every advantage "
        "of the group into NaN."
    )


def as_group_index(
    ids: Union[Sequence[Hashable], np.ndarray, Tensor], device: Optional[torch.device] = None
) -> tuple[Tensor, int]:
    """Map arbitrary group keys to contiguous ``int64`` ids ``0 .. G-1``.

    Ids are numbered in order of first appearance, so a stable sort by the returned index
    reproduces :func:`trinity.common.experience.group_by`'s group order.

    Args:
        ids: ``[B]`` group keys: strings (``eid.tid``), ints, a numpy array (verl's ``uid``)
            or an integer tensor.
        device: device of the result (default: CPU, or the tensor's device).

    Returns:
        ``(group_index [B] long, G)``.
    """
    if isinstance(ids, Tensor):
        if ids.is_floating_point():
            raise TypeError("group ids must be integers or hashable keys, not floats")
        uniq, inverse = torch.unique(ids, return_inverse=True)
        # re-number in first-appearance order
        first = torch.full((uniq.shape[0],), ids.shape[0], dtype=torch.long, device=ids.device)
        first.scatter_reduce_(0, inverse, torch.arange(ids.shape[0], device=ids.device), "amin")
        rank = torch.empty_like(first)
        rank[torch.argsort(first)] = torch.arange(first.shape[0], device=ids.device)
        index = rank[inverse]
        return index.to(device or ids.device), int(uniq.shape[0])
    mapping: dict[Hashable, int] = {}
    keys = ids.tolist() if isinstance(ids, np.ndarray) else ids
    codes = [mapping.setdefault(k, len(mapping)) for k in keys]
    return torch.tensor(codes, dtype=torch.long, device=device), len(mapping)


class GroupStats(NamedTuple):
    """Per-group statistics of ``scores`` (all ``[G]``, float64 except ``count``).

    ``std`` is unbiased and 0 for one-member groups; ``constant`` is True where every member has
    the same score (one-member groups included).
    """

    count: Tensor
    mean: Tensor
    std: Tensor
    constant: Tensor


def group_stats(
    scores: Tensor, group_index: Tensor, num_groups: Optional[int] = None
) -> GroupStats:
    """Count, mean, unbiased std and constancy of ``scores [B]`` per group, in O(B) kernels.

    Two passes (mean, then centred squares) rather than ``E[x^2] - E[x]^2``, which cancels
    catastrophically for rewards with a large common offset.
    """
    g = group_index.to(device=scores.device, dtype=torch.long)
    n_groups = int(num_groups) if num_groups is not None else (int(g.max()) + 1 if g.numel() else 0)
    x = scores.to(_STAT_DTYPE)
    count = torch.bincount(g, minlength=n_groups)
    sums = torch.zeros(n_groups, dtype=_STAT_DTYPE, device=x.device).index_add_(0, g, x)
    mean = sums / count.clamp_min(1)
    centred = x - mean[g]
    sq = torch.zeros_like(sums).index_add_(0, g, centred * centred)
    std = torch.sqrt(sq / (count - 1).clamp_min(1))
    gmin = torch.full_like(sums, math.inf).scatter_reduce_(0, g, x, "amin")
    gmax = torch.full_like(sums, -math.inf).scatter_reduce_(0, g, x, "amax")
    constant = gmin == gmax
    return GroupStats(count=count, mean=mean, std=std, constant=constant)


def _stats(
    scores: Tensor, group_index: Tensor, stats: Optional[GroupStats]
) -> tuple[Tensor, GroupStats]:
    g = group_index.to(device=scores.device, dtype=torch.long)
    return g, (stats if stats is not None else group_stats(scores, g))


def _centred(scores: Tensor, g: Tensor, st: GroupStats, zero_singletons: bool) -> Tensor:
    """``x - mean_g`` (float64), exactly 0 in constant groups; singleton mean is 0 unless zeroed."""
    x = scores.to(_STAT_DTYPE)
    single = st.count[g] == 1
    mean = st.mean[g]
    if not zero_singletons:
        mean = torch.where(single, torch.zeros_like(mean), mean)
    centred = x - mean
    flat = st.constant[g] if zero_singletons else st.constant[g] & ~single
    return torch.where(flat, torch.zeros_like(centred), centred)


def broadcast_to_tokens(scalars: Tensor, mask: Tensor) -> Tensor:
    """``scalars [B]`` times ``mask [B, R]`` -> ``[B, R]`` in the scalars' dtype."""
    return scalars.unsqueeze(-1) * mask.to(scalars.dtype)


# --------------------------------------------------------------------------------------
# Group-relative outcome advantages: scores [B] -> advantages [B]
# --------------------------------------------------------------------------------------


def grpo_advantages(
    scores: Tensor,
    group_index: Tensor,
    epsilon: float = 1e-6,
    norm_by_std: bool = True,
    batch_std: Optional[Union[Tensor, float]] = None,
    zero_singletons: bool = False,
    stats: Optional[GroupStats] = None,
) -> Tensor:
    """GRPO: ``(r - mean_g) / (std_g + epsilon)`` (or ``r - mean_g`` without std normalization).

    Matches verl's ``compute_grpo_outcome_advantage`` (``norm_adv_by_std_in_grpo`` is
    ``norm_by_std``) applied to ``scores = token_level_rewards.sum(-1)``.

    Args:
        scores: ``[B]`` outcome rewards.
        group_index: ``[B]`` long group ids (:func:`as_group_index`).
        epsilon: added to the std so a constant group does not divide by zero.
        norm_by_std: divide by the std (GRPO) or not (Dr. GRPO).
        batch_std: if given, divide by this (e.g. the std of the whole batch, Trinity-RFT's
            ``std_cal_level="batch"``) instead of each group's std; the mean stays per group.
        zero_singletons: one-member groups get 0 (default) instead of verl's raw reward.
        stats: precomputed :func:`group_stats` of ``scores`` (to share with metrics).

    Returns:
        ``[B]`` advantages in ``scores.dtype``.
    """
    g, st = _stats(scores, group_index, stats)
    centred = _centred(scores, g, st, zero_singletons)
    if norm_by_std:
        if batch_std is not None:
            std = torch.as_tensor(batch_std, dtype=_STAT_DTYPE, device=scores.device)
        else:
            # verl: std 1 for a singleton (its std is undefined)
            std = torch.where(st.count[g] == 1, torch.ones_like(centred), st.std[g])
        denom = std + epsilon
        centred = torch.where(centred == 0, centred, centred / denom)
    return centred.to(scores.dtype)


def rloo_advantages(
    scores: Tensor,
    group_index: Tensor,
    zero_singletons: bool = False,
    stats: Optional[GroupStats] = None,
) -> Tensor:
    """RLOO: ``r_i - mean_{j != i} r_j = (r_i - mean_g) * n / (n - 1)`` (leave-one-out baseline).

    Matches verl's ``compute_rloo_outcome_advantage`` (which keeps the raw reward for a
    one-member group: ``zero_singletons=False``) and ``compute_rloo_vectorized_outcome_advantage``
    (which gives it 0: the default).

    Shapes: ``scores``, ``group_index`` ``[B]`` -> ``[B]``.
    """
    g, st = _stats(scores, group_index, stats)
    centred = _centred(scores, g, st, zero_singletons)
    n = st.count[g].to(_STAT_DTYPE)
    factor = torch.where(n > 1, n / (n - 1).clamp_min(1), torch.ones_like(n))
    return (centred * factor).to(scores.dtype)


def opmd_advantages(
    scores: Tensor,
    group_index: Tensor,
    baseline: str = "mean",
    tau: float = 1.0,
    zero_singletons: bool = False,
    stats: Optional[GroupStats] = None,
) -> Tensor:
    """OPMD: ``r - b_g`` with ``b_g`` the group mean or ``tau * logavgexp(r / tau)``.

    ``logavgexp(x) = logsumexp(x) - log(n)``, computed per group with a max shift (scatter
    ``amax``), so large rewards / small ``tau`` do not overflow. This is Trinity-RFT's formula
    (verl has no OPMD); a one-member group has baseline 0 there, i.e. advantage = reward
    (``zero_singletons=False``); by default it gets 0.

    Shapes: ``scores``, ``group_index`` ``[B]`` -> ``[B]``.
    """
    g, st = _stats(scores, group_index, stats)
    if baseline == "mean":
        return _centred(scores, g, st, zero_singletons).to(scores.dtype)
    if baseline != "logavgexp":
        raise ValueError(f"opmd baseline must be 'mean' or 'logavgexp', got {baseline!r}")
    if tau <= 0:
        raise ValueError(f"opmd tau must be > 0, got {tau}")
    x = scores.to(_STAT_DTYPE) / tau
    n_groups = st.count.shape[0]
    gmax = torch.full((n_groups,), -math.inf, dtype=_STAT_DTYPE, device=x.device)
    gmax.scatter_reduce_(0, g, x, "amax")
    sumexp = torch.zeros_like(gmax).index_add_(0, g, torch.exp(x - gmax[g]))
    lae = gmax + torch.log(sumexp) - torch.log(st.count.clamp_min(1).to(_STAT_DTYPE))
    base = tau * lae[g]
    adv = scores.to(_STAT_DTYPE) - base
    single = st.count[g] == 1
    adv = torch.where(st.constant[g], torch.zeros_like(adv), adv)
    if not zero_singletons:
        adv = torch.where(single, scores.to(_STAT_DTYPE), adv)
    return adv.to(scores.dtype)


def asymre_advantages(
    scores: Tensor,
    group_index: Tensor,
    baseline_shift: float = -0.1,
    zero_singletons: bool = False,
    stats: Optional[GroupStats] = None,
) -> Tensor:
    """AsymRE: ``r - (mean_g + baseline_shift)``; a negative shift favours positive samples.

    Trinity-RFT's formula (verl has no AsymRE). A constant group gets ``-baseline_shift`` (the
    point of the method), a one-member group Trinity-RFT's baseline 0, i.e. the raw reward
    (``zero_singletons=True`` gives 0).

    Shapes: ``scores``, ``group_index`` ``[B]`` -> ``[B]``.
    """
    g, st = _stats(scores, group_index, stats)
    single = st.count[g] == 1
    adv = _centred(scores, g, st, zero_singletons=True) - baseline_shift
    if zero_singletons:
        adv = torch.where(single, torch.zeros_like(adv), adv)
    else:
        adv = torch.where(single, scores.to(_STAT_DTYPE), adv)
    return adv.to(scores.dtype)


class RecResult(NamedTuple):
    """What :func:`rec_advantages` returns.

    ``advantages`` ``[B]`` (in the scores' dtype) and ``dropped`` ``[B]`` bool; per group
    ``[G]`` (float64): the baseline ``mean`` and scale ``std`` the kept members were scored
    with, and ``drop_frac``, the share of the group's members dropped.
    """

    advantages: Tensor
    dropped: Tensor
    mean: Tensor
    std: Tensor
    drop_frac: Tensor


def rec_advantages(
    scores: Tensor,
    group_index: Tensor,
    epsilon: float = 1e-6,
    std_normalize: bool = False,
    drop_balance: bool = False,
    zero_singletons: bool = False,
    noise: Optional[Tensor] = None,
    num_groups: Optional[int] = None,
) -> RecResult:
    """REC (Trinity-RFT's ``rec`` advantage): reward minus the mean of the group's kept members.

    A member is *positive* when its score is at or above its group's mean (every member of a
    constant group is). With ``drop_balance`` (Trinity-RFT's ``drop="balance"``) a group with
    more negatives than positives drops ``n_neg - n_pos`` of its negatives, chosen uniformly
    at random, so the kept members are balanced and the update does not push mostly down.
    Dropped members get advantage 0 and leave the statistics. The kept members' advantage is
    ``r - mean_kept``, divided by ``std_kept + epsilon`` with ``std_normalize``, where
    ``std_kept`` is the *population* std (Trinity-RFT's ``std(unbiased=False)``); a constant
    kept set gets exactly 0.

    A one-member group is never dropped and is scored with baseline 0 and scale 1, as GRPO
    does (Trinity-RFT fails on it): advantage ``r`` (``r / (1 + epsilon)`` with
    ``std_normalize``), or 0 with ``zero_singletons``.

    Args:
        scores: ``[B]`` outcome rewards.
        group_index: ``[B]`` long group ids (:func:`as_group_index`).
        noise: ``[B]`` keys in ``[0, 1)`` choosing which negatives are dropped (the smallest
            keys of a group's negatives go); default ``torch.rand`` (the global generator),
            drawn only when a group drops something.
        num_groups: ``G`` (default: ``max(group_index) + 1``).
    """
    g = group_index.to(device=scores.device, dtype=torch.long)
    st = group_stats(scores, g, num_groups)
    n_groups = st.count.shape[0]
    x = scores.to(_STAT_DTYPE)
    positive = (x >= st.mean[g]) | st.constant[g]
    n_pos = torch.zeros_like(st.count).index_add_(0, g, positive.long())
    extra = (st.count - 2 * n_pos).clamp_min(0)  # n_neg - n_pos, where positive
    if not drop_balance:
        extra = torch.zeros_like(extra)
    extra = torch.where(st.count == 1, torch.zeros_like(extra), extra)
    dropped = torch.zeros_like(positive)
    if bool(extra.any()):
        keys = noise if noise is not None else torch.rand(x.shape[0], device=x.device)
        keys = torch.where(positive, torch.full_like(x, 2.0), keys.to(x))  # negatives first
        by_key = torch.argsort(keys, stable=True)
        order = by_key[torch.argsort(g[by_key], stable=True)]
        starts = torch.cumsum(st.count, 0) - st.count
        rank = torch.empty_like(g)
        rank[order] = torch.arange(g.shape[0], device=g.device) - starts[g[order]]
        dropped = ~positive & (rank < extra[g])
    kept = ~dropped
    ks = group_stats(x[kept], g[kept], n_groups)
    few = ks.count <= 1
    mean = torch.where(few, torch.zeros_like(ks.mean), ks.mean)
    n = ks.count.to(_STAT_DTYPE)
    pop_std = ks.std * torch.sqrt((n - 1).clamp_min(0) / n.clamp_min(1))
    std = torch.where(few, torch.ones_like(pop_std), pop_std)
    flat = ks.constant[g] & ~few[g]
    adv = torch.where(flat, torch.zeros_like(x), x - mean[g])
    if std_normalize:
        adv = torch.where(adv == 0, adv, adv / (std[g] + epsilon))
    zero = dropped | ((st.count[g] == 1) & zero_singletons)
    adv = torch.where(zero, torch.zeros_like(adv), adv)
    drop_frac = extra.to(_STAT_DTYPE) / st.count.clamp_min(1)
    return RecResult(adv.to(scores.dtype), dropped, mean, std, drop_frac)


class GiGPOResult(NamedTuple):
    """What :func:`gigpo_advantages` returns, per step ``[B]`` (float64): the combined
    ``advantages``, their ``episode`` part ``A_E`` (the step's run's) and ``step`` part
    ``A_S``; and per run ``[n_runs]``, the episode ``returns``."""

    advantages: Tensor
    episode: Tensor
    step: Tensor
    returns: Tensor


def gigpo_advantages(
    step_rewards: Tensor,
    run_index: Tensor,
    position: Tensor,
    run_group: Tensor,
    anchor_index: Tensor,
    omega: float = 1.0,
    gamma: float = 1.0,
    norm_by_std: bool = False,
    epsilon: float = 1e-6,
    zero_singletons: bool = False,
) -> GiGPOResult:
    """GiGPO (Group-in-Group Policy Optimization, arXiv:2505.10978): ``A = A_E + omega * A_S``.

    Multi-step episodes give one reward per run at best; GiGPO adds a finer, critic-free signal
    by comparing steps taken from the *same environment state* (an anchor) across runs.

    * ``A_E`` (episode level): each run's return ``sum_t r_t`` against the other runs of its
      group (``run_group``, the task): ``(R - mean) / (F + epsilon)`` with ``F`` the group's
      unbiased std (``norm_by_std``) or 1 (the paper's default for agents). A group of one run
      has mean 0 and ``F = 1`` (GRPO's convention), or gets 0 with ``zero_singletons``.
    * ``A_S`` (step level): each step's discounted return ``R_t = sum_{k>=t} gamma^(k-t) r_k``
      against the other steps of its anchor group, the same way; a step with no anchor
      (``anchor_index < 0``) or alone in its anchor group gets 0. Anchor groups span runs and
      tasks, as the anchor is the environment state.

    Args:
        step_rewards: ``[B]`` immediate reward ``r_t`` of each step.
        run_index: ``[B]`` long run id ``0 .. n_runs-1`` of each step.
        position: ``[B]`` long index ``t`` of the step within its run (``0 ..`` its length
            ``- 1``, each once).
        run_group: ``[n_runs]`` long group (task) id of each run.
        anchor_index: ``[B]`` long anchor-state id, ``-1`` where the step has none.
    """
    b = step_rewards.shape[0]
    rewards = step_rewards.to(_STAT_DTYPE)
    n_runs = int(run_group.shape[0])
    width = int(position.max()) + 1 if b else 0
    table = torch.zeros((n_runs, width), dtype=_STAT_DTYPE, device=rewards.device)
    table[run_index, position] = rewards
    returns = reverse_linear_scan(table, torch.full_like(table, gamma))[run_index, position]
    episode_returns = table.sum(dim=-1)
    scale = None if norm_by_std else 1.0
    a_e = grpo_advantages(
        episode_returns, run_group, epsilon, batch_std=scale, zero_singletons=zero_singletons
    )
    a_s = torch.zeros_like(rewards)
    anchored = anchor_index >= 0
    if bool(anchored.any()):
        anchors, _ = as_group_index(anchor_index[anchored])
        a_s[anchored] = grpo_advantages(
            returns[anchored], anchors, epsilon, batch_std=scale, zero_singletons=True
        )
    episode = a_e[run_index]
    return GiGPOResult(episode + omega * a_s, episode, a_s, episode_returns)


# --------------------------------------------------------------------------------------
# Token-level estimators: [B, R] tensors
# --------------------------------------------------------------------------------------


def reverse_linear_scan(a: Tensor, c: Tensor) -> Tensor:
    """Solve ``y[:, t] = a[:, t] + c[:, t] * y[:, t+1]`` (``y[:, R] = 0``) for all ``t``.

    The recurrence behind discounted returns and GAE. It runs over the response axis from the
    end (``R`` steps) with one multiply and one add over the whole batch per step, on a
    time-major copy so every step reads and writes contiguous rows. A closed form through
    cumulative products would divide by ``prod(c)``, which underflows for long responses.

    Shapes: ``a``, ``c`` ``[B, R]`` -> ``[B, R]``.
    """
    if a.shape[-1] == 0:
        return a.clone()
    a_t = a.transpose(0, 1).contiguous()
    c_t = c.to(a.dtype).transpose(0, 1).contiguous()
    out = torch.empty_like(a_t)
    out[-1] = a_t[-1]
    tmp = torch.empty_like(a_t[0])
    for t in range(a_t.shape[0] - 2, -1, -1):
        # multiply, then add (two roundings, not a fused multiply-add): bit-identical to the
        # step-by-step loops of verl / TRL, which the parity tests compare against.
        torch.mul(c_t[t], out[t + 1], out=tmp)
        torch.add(a_t[t], tmp, out=out[t])
    return out.transpose(0, 1)


def masked_whiten(values: Tensor, mask: Tensor) -> Tensor:
    """Whiten ``values [B, R]`` by the mean / unbiased variance of its masked entries.

    verl's ``masked_whiten`` (``(x - mean) * rsqrt(var + 1e-8)``, same reductions in the same
    order), except that with fewer than two masked entries it only centres (verl raises;
    dividing by ``sqrt(1e-8)`` would scale the values by 1e4).
    """
    x = values.clone(memory_format=torch.contiguous_format)
    return _whiten_(x, mask.to(dtype=x.dtype, copy=True).contiguous())


def _whiten_(x: Tensor, mf: Tensor) -> Tensor:
    """In-place :func:`masked_whiten` of ``x`` (owned, contiguous); ``mf`` is the float mask.

    One scratch buffer is reused for the two masked products, so a whitening of a large batch
    costs one allocation instead of verl's six full-size temporaries.
    """
    count = mf.sum()
    buf = torch.mul(x, mf)
    mean = buf.sum() / (count + 1e-8)
    x.sub_(mean)
    if float(count) < 2:
        return x
    torch.mul(x, x, out=buf).mul_(mf)
    var = buf.sum() / (count + 1e-8) * (count / (count - 1))
    return x.mul_(torch.rsqrt(var + 1e-8))


def gae_advantages_returns(
    token_level_rewards: Tensor,
    values: Tensor,
    response_mask: Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten: bool = True,
) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation (PPO), verl's ``compute_gae_advantage_return``.

    ``delta_t = r_t + gamma * V_next - V_t``, ``A_t = delta_t + gamma * lam * A_next`` where
    "next" skips masked-out (environment / padding) tokens: their value and TD error are not
    used and the running advantage is carried through them unchanged. ``returns = A + V`` (before
    whitening); the advantages are then whitened over the mask.

    Vectorized over the batch; one reverse pass over ``R`` on a time-major copy of the inputs, so
    each step's seven element-wise kernels read and write contiguous ``[B]`` rows into
    preallocated buffers (verl's loop slices strided columns and allocates a dozen temporaries
    per step). The operations and their order are verl's, so the results are bit-identical
    before whitening.

    Args:
        token_level_rewards: ``[B, R]`` per-token rewards (outcome reward on the last token).
        values: ``[B, R]`` critic values.
        response_mask: ``[B, R]`` 1 on generated tokens.
        gamma: discount.
        lam: GAE lambda.
        whiten: whiten the advantages over the mask (verl always does).

    Returns:
        ``(advantages [B, R], returns [B, R])``; nothing is multiplied by the mask (as verl).
    """
    with torch.no_grad():
        b, r = token_level_rewards.shape
        dtype = token_level_rewards.dtype
        rew_t = token_level_rewards.transpose(0, 1).contiguous()
        val_t = values.to(dtype).transpose(0, 1).contiguous()
        msk_t = response_mask.to(torch.bool).transpose(0, 1).contiguous()
        adv_t = torch.empty_like(rew_t)
        next_values = torch.zeros(b, dtype=dtype, device=rew_t.device)
        last = torch.zeros_like(next_values)
        delta = torch.empty_like(next_values)
        tmp = torch.empty_like(next_values)
        gl = gamma * lam
        for t in range(r - 1, -1, -1):
            torch.mul(next_values, gamma, out=tmp)
            torch.add(rew_t[t], tmp, out=delta)
            delta.sub_(val_t[t])  # delta = r + gamma * V_next - V
            torch.mul(last, gl, out=tmp)
            delta.add_(tmp)  # delta + gamma * lam * A_next
            torch.where(msk_t[t], delta, last, out=adv_t[t])
            torch.where(msk_t[t], val_t[t], next_values, out=next_values)
            last = adv_t[t]
        advantages = adv_t.transpose(0, 1).contiguous()
        returns = advantages + values
        if whiten:
            advantages = _whiten_(advantages, response_mask.to(dtype=dtype, copy=True))
    return advantages, returns


def reinforce_plus_plus_advantages_returns(
    token_level_rewards: Tensor, response_mask: Tensor, gamma: float = 1.0
) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (https://arxiv.org/abs/2501.03262), verl's
    ``compute_reinforce_plus_plus_outcome_advantage``.

    ``G_t = r_t + gamma * G_next`` over generated tokens (the running return is carried
    unchanged through masked-out tokens, which get return 0); advantages are the returns
    whitened over the whole batch's mask, times the mask. With ``gamma == 1`` this is a masked
    reverse cumulative sum, no scan. (Trinity-RFT's older copy did not mask the recursion; it
    agrees with this on right-padded single-turn data.)

    Shapes: ``[B, R]`` in, ``(advantages [B, R], returns [B, R])`` out.
    """
    with torch.no_grad():
        mf = response_mask.to(token_level_rewards.dtype)
        a = token_level_rewards * mf
        if gamma == 1.0:
            running = torch.flip(torch.cumsum(torch.flip(a, [1]), dim=1), [1])
        else:
            coef = torch.where(response_mask.to(torch.bool), torch.full_like(mf, gamma), 1.0)
            running = reverse_linear_scan(a, coef)
        returns = running * mf
        advantages = masked_whiten(returns, response_mask) * mf
    return advantages, returns


def reinforce_plus_plus_baseline_advantages(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    group_index: Tensor,
    zero_singletons: bool = False,
) -> Tensor:
    """REINFORCE++ with a group-mean baseline, verl's
    ``compute_reinforce_plus_plus_baseline_outcome_advantage``.

    ``s = sum_t r_t - mean_g``, broadcast over the mask, then whitened over the whole batch's
    mask and masked again. Advantages equal returns. A one-member group's score is 0 before
    whitening (verl: its raw score, ``zero_singletons=False``).

    Shapes: ``token_level_rewards``, ``response_mask`` ``[B, R]``, ``group_index`` ``[B]`` ->
    ``[B, R]``.
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        g, st = _stats(scores, group_index, None)
        centred = _centred(scores, g, st, zero_singletons).to(scores.dtype)
        tiled = broadcast_to_tokens(centred, response_mask)
        mf = response_mask.to(tiled.dtype)
        return masked_whiten(tiled, response_mask) * mf


def remax_advantages_returns(
    token_level_rewards: Tensor, reward_baselines: Tensor, response_mask: Tensor
) -> tuple[Tensor, Tensor]:
    """ReMax (https://arxiv.org/abs/2310.10505), verl's ``compute_remax_outcome_advantage``.

    ``returns_t = sum_{k >= t} r_k * m_k``; ``advantages = returns - b * mask`` where ``b [B]`` is
    the reward of the greedy response to the same prompt.

    Shapes: ``token_level_rewards``, ``response_mask`` ``[B, R]``, ``reward_baselines`` ``[B]``
    -> ``(advantages [B, R], returns [B, R])``.
    """
    with torch.no_grad():
        mf = response_mask.to(token_level_rewards.dtype)
        returns = torch.flip(torch.cumsum(torch.flip(token_level_rewards * mf, [1]), dim=1), [1])
        advantages = returns - reward_baselines.to(returns.dtype).unsqueeze(-1) * mf
    return advantages, returns
