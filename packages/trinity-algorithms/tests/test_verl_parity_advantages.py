"""Numerical parity of ``advantage_fn.functional`` (and the classes) with verl 0.9.1.

verl's ``core_algos`` is the reference: both sides get the same ``token_level_rewards [B, R]``,
``response_mask [B, R]`` and group ``index`` (a numpy array of ids, verl's ``uid``), built with
several group sizes and mixed response lengths (some with masked-out "environment" spans).
Tolerance: 1e-6 absolute on float32 outputs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")

from trinity.algorithm.advantage_fn import (  # noqa: E402
    ADVANTAGE_FN,
    GRPOGroupedAdvantage,
    RLOOAdvantageFn,
)
from trinity.algorithm.advantage_fn import functional as F  # noqa: E402
from trinity.common.experience import EID, Experience, collate_experiences  # noqa: E402

ATOL = 1e-6


class _Cfg:
    """The bits of verl's AlgoConfig the REINFORCE++ estimator reads."""

    def __init__(self, gamma: float = 1.0) -> None:
        self.gamma = gamma


def make_batch(
    group_sizes: list[int],
    max_len: int = 12,
    seed: int = 0,
    dense: bool = False,
    holes: bool = False,
):
    """Random verl-style inputs.

    Returns ``(token_level_rewards [B, R], response_mask [B, R] float, index np.ndarray,
    lengths [B])``. Outcome rewards sit on each row's last response token unless ``dense``;
    ``holes`` masks out random interior spans (multi-turn environment tokens).
    """
    gen = torch.Generator().manual_seed(seed)
    index = np.array([f"g{g}" for g, n in enumerate(group_sizes) for _ in range(n)], dtype=object)
    perm = torch.randperm(len(index), generator=gen).numpy()
    index = index[perm]  # groups interleaved, as verl sees them after shuffles
    b = len(index)
    lengths = torch.randint(1, max_len + 1, (b,), generator=gen)
    lengths[0] = max_len
    cols = torch.arange(max_len)
    mask = (cols[None, :] < lengths[:, None]).float()
    if holes:
        hole = torch.rand(b, max_len, generator=gen) < 0.25
        hole[:, 0] = False
        mask = mask * (~hole).float()
    if dense:
        tlr = torch.randn(b, max_len, generator=gen) * mask
    else:
        scores = torch.randn(b, generator=gen)
        tlr = torch.zeros(b, max_len)
        tlr[torch.arange(b), lengths - 1] = scores
    return tlr, mask, index, lengths


SIZES = [
    [2, 2, 2],
    [3, 5, 8, 2],
    [4] * 16,
    [8, 16, 5, 7],
]


def _gidx(index: np.ndarray) -> torch.Tensor:
    return F.as_group_index(index)[0]


# ------------------------------------------------------------------------------ GRPO


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_matches_verl(sizes, norm):
    tlr, mask, index, _ = make_batch(sizes, seed=len(sizes))
    ref, ref_ret = core_algos.compute_grpo_outcome_advantage(
        tlr.clone(), mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=norm
    )
    adv = F.grpo_advantages(tlr.sum(-1), _gidx(index), epsilon=1e-6, norm_by_std=norm)
    ours = F.broadcast_to_tokens(adv, mask)
    torch.testing.assert_close(ours, ref, atol=ATOL, rtol=0)
    torch.testing.assert_close(ours, ref_ret, atol=ATOL, rtol=0)


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_singletons_match_verl_by_default(norm):
    tlr, mask, index, _ = make_batch([1, 3, 1, 4, 2], seed=7)
    ref, _ = core_algos.compute_grpo_outcome_advantage(
        tlr.clone(), mask, index, norm_adv_by_std_in_grpo=norm
    )
    adv = F.grpo_advantages(tlr.sum(-1), _gidx(index), norm_by_std=norm)
    torch.testing.assert_close(F.broadcast_to_tokens(adv, mask), ref, atol=ATOL, rtol=0)
    # zero_singletons=True: singletons are 0, everything else unchanged
    adv0 = F.grpo_advantages(tlr.sum(-1), _gidx(index), norm_by_std=norm, zero_singletons=True)
    single = torch.tensor([(index == i).sum() == 1 for i in index])
    assert torch.all(adv0[single] == 0)
    torch.testing.assert_close(adv0[~single], adv[~single], atol=ATOL, rtol=0)


def test_grpo_vectorized_verl_agrees_too():
    tlr, mask, index, _ = make_batch([3, 5, 8, 2], seed=3)
    ref, _ = core_algos.compute_grpo_vectorized_outcome_advantage(tlr.clone(), mask, index)
    adv = F.grpo_advantages(tlr.sum(-1), _gidx(index))
    torch.testing.assert_close(F.broadcast_to_tokens(adv, mask), ref, atol=ATOL, rtol=0)


def _experiences(tlr, mask, index, lengths):
    """One Experience per row (same rewards / masks / groups) for the class paths."""
    exps = []
    for i in range(tlr.shape[0]):
        n = int(lengths[i])
        exps.append(
            Experience(
                eid=EID(batch=0, task=str(index[i]), run=i),
                tokens=torch.arange(3 + n),
                prompt_length=3,
                reward=float(tlr[i].sum()),
                action_mask=mask[i, :n].bool(),
            )
        )
    return exps


@pytest.mark.parametrize("sizes", SIZES)
def test_grpo_class_on_experiences_matches_verl(sizes):
    tlr, mask, index, lengths = make_batch(sizes, seed=11 + len(sizes), holes=True)
    ref, _ = core_algos.compute_grpo_outcome_advantage(tlr.clone(), mask, index)
    exps = _experiences(tlr, mask, index, lengths)
    out, metrics = GRPOGroupedAdvantage()(exps)
    assert len(out) == len(exps)
    for i, e in enumerate(exps):
        n = int(lengths[i])
        torch.testing.assert_close(e.advantages, ref[i, :n], atol=ATOL, rtol=0)
        torch.testing.assert_close(e.returns, ref[i, :n], atol=ATOL, rtol=0)
    assert all(isinstance(v, float) for v in metrics.values())


def test_grpo_class_on_collated_batch_matches_verl():
    tlr, mask, index, lengths = make_batch([3, 5, 8, 2], seed=5)
    ref, _ = core_algos.compute_grpo_outcome_advantage(tlr.clone(), mask, index)
    batch = collate_experiences(_experiences(tlr, mask, index, lengths))
    batch, _ = GRPOGroupedAdvantage()(batch)
    torch.testing.assert_close(batch.advantages, ref, atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------ RLOO


@pytest.mark.parametrize("sizes", SIZES + [[1, 3, 1, 2]])
def test_rloo_matches_verl(sizes):
    tlr, mask, index, lengths = make_batch(sizes, seed=20 + len(sizes))
    ref, _ = core_algos.compute_rloo_outcome_advantage(tlr.clone(), mask, index)
    adv = F.rloo_advantages(tlr.sum(-1), _gidx(index))  # default: verl's loop version
    torch.testing.assert_close(F.broadcast_to_tokens(adv, mask), ref, atol=ATOL, rtol=0)
    # verl's vectorized RLOO zeroes singletons: zero_singletons=True
    ref_vec, _ = core_algos.compute_rloo_vectorized_outcome_advantage(tlr.clone(), mask, index)
    adv0 = F.rloo_advantages(tlr.sum(-1), _gidx(index), zero_singletons=True)
    torch.testing.assert_close(F.broadcast_to_tokens(adv0, mask), ref_vec, atol=ATOL, rtol=0)
    # class (experience list), default singleton handling = the loop version
    exps = _experiences(tlr, mask, index, lengths)
    RLOOAdvantageFn()(exps)
    for i, e in enumerate(exps):
        torch.testing.assert_close(e.advantages, ref[i, : int(lengths[i])], atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------ GAE


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0), (0.5, 0.7)])
@pytest.mark.parametrize("holes", [False, True])
def test_gae_matches_verl(gamma, lam, holes):
    tlr, mask, index, _ = make_batch([4] * 8, max_len=40, seed=31, dense=True, holes=holes)
    values = torch.randn(tlr.shape, generator=torch.Generator().manual_seed(2))
    ref_adv, ref_ret = core_algos.compute_gae_advantage_return(tlr, values, mask, gamma, lam)
    adv, ret = F.gae_advantages_returns(tlr, values, mask, gamma=gamma, lam=lam)
    torch.testing.assert_close(ret, ref_ret, atol=ATOL, rtol=0)
    torch.testing.assert_close(adv, ref_adv, atol=ATOL, rtol=0)


def test_ppo_class_matches_verl():
    tlr, mask, index, lengths = make_batch([2] * 10, max_len=16, seed=41, holes=True)
    exps = _experiences(tlr, mask, index, lengths)
    batch = collate_experiences(exps)
    # outcome rewards go on the last response token: the same tlr as make_batch built
    values = torch.randn(tlr.shape, generator=torch.Generator().manual_seed(3))
    ref_adv, ref_ret = core_algos.compute_gae_advantage_return(
        tlr, values, batch.action_mask.float(), 0.99, 0.95
    )
    fn = ADVANTAGE_FN.get("ppo")(gamma=0.99, lam=0.95)
    assert fn.compute_in_trainer()
    batch, metrics = fn(batch, values=values)
    torch.testing.assert_close(batch.returns, ref_ret, atol=ATOL, rtol=0)
    torch.testing.assert_close(batch.advantages, ref_adv, atol=ATOL, rtol=0)
    assert all(isinstance(v, float) for v in metrics.values())


# ------------------------------------------------------------------------------ REINFORCE++


@pytest.mark.parametrize("gamma", [1.0, 0.99, 0.5])
@pytest.mark.parametrize("holes", [False, True])
def test_reinforce_plus_plus_matches_verl(gamma, holes):
    tlr, mask, _, _ = make_batch([3] * 10, max_len=30, seed=51, dense=True, holes=holes)
    ref_adv, ref_ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(
        tlr, mask, config=_Cfg(gamma)
    )
    adv, ret = F.reinforce_plus_plus_advantages_returns(tlr, mask, gamma=gamma)
    torch.testing.assert_close(ret, ref_ret, atol=ATOL, rtol=0)
    torch.testing.assert_close(adv, ref_adv, atol=ATOL, rtol=0)
    batch_fn = ADVANTAGE_FN.get("reinforceplusplus")(gamma=gamma)
    assert batch_fn.compute_in_trainer()


def test_reinforce_plus_plus_class_matches_verl():
    tlr, mask, index, lengths = make_batch([2] * 12, max_len=20, seed=52)
    batch = collate_experiences(_experiences(tlr, mask, index, lengths))
    batch.token_level_rewards = tlr.clone()
    ref_adv, ref_ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(
        tlr, mask, config=_Cfg(0.9)
    )
    batch, _ = ADVANTAGE_FN.get("reinforceplusplus")(gamma=0.9)(batch)
    torch.testing.assert_close(batch.advantages, ref_adv, atol=ATOL, rtol=0)
    torch.testing.assert_close(batch.returns, ref_ret, atol=ATOL, rtol=0)


@pytest.mark.parametrize("sizes", SIZES + [[1, 4, 1, 3]])
def test_reinforce_plus_plus_baseline_matches_verl(sizes):
    tlr, mask, index, _ = make_batch(sizes, seed=60 + len(sizes))
    ref, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(
        tlr.clone(), mask, index
    )
    ours = F.reinforce_plus_plus_baseline_advantages(tlr, mask, _gidx(index), zero_singletons=False)
    torch.testing.assert_close(ours, ref, atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------ ReMax


@pytest.mark.parametrize("holes", [False, True])
def test_remax_matches_verl(holes):
    tlr, mask, index, lengths = make_batch([1] * 20, max_len=25, seed=71, dense=True, holes=holes)
    base = torch.randn(tlr.shape[0], generator=torch.Generator().manual_seed(4))
    ref_adv, ref_ret = core_algos.compute_remax_outcome_advantage(tlr, base, mask)
    adv, ret = F.remax_advantages_returns(tlr, base, mask)
    torch.testing.assert_close(ret, ref_ret, atol=ATOL, rtol=0)
    torch.testing.assert_close(adv, ref_adv, atol=ATOL, rtol=0)
    # class on a collated batch, baselines as a custom field
    batch = collate_experiences(_experiences(tlr, mask, index, lengths))
    batch.token_level_rewards = tlr.clone()
    batch.custom_fields["reward_baselines"] = base
    batch, metrics = ADVANTAGE_FN.get("remax")()(batch)
    torch.testing.assert_close(batch.advantages, ref_adv, atol=ATOL, rtol=0)
    torch.testing.assert_close(batch.returns, ref_ret, atol=ATOL, rtol=0)
