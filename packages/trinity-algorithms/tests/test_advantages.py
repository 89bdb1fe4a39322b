"""Advantage functions: registry, Trinity-RFT formulas, edges (the per-group oracle and the
property tests against it are in test_advantage_oracle.py)."""

from __future__ import annotations

import copy
import math
import random

import pytest
import torch

from trinity.algorithm.advantage_fn import (
    ADVANTAGE_FN,
    ASYMREGroupAdvantage,
    GroupAdvantage,
    GRPOGroupedAdvantage,
    OPMDGroupAdvantage,
    REINFORCEGroupAdvantage,
    RLOOAdvantageFn,
    StepWiseGRPOAdvantageFn,
)
from trinity.algorithm.advantage_fn import functional as F
from trinity.algorithm.utils import build_component
from trinity.common.experience import EID, Experience, collate_experiences

NAMES = {
    "ppo": True,
    "grpo": False,
    "opmd": False,
    "rloo": False,
    "reinforceplusplus": True,
    "reinforce": False,
    "remax": True,
    "asymre": False,
    "step_wise_grpo": False,
    "grpo_verl": True,
    "opmd_verl": True,
    "asymre_verl": True,
    "rec": False,
    "gigpo": False,
    "clipb": True,
    "clipv": True,
    "on_policy_distill": True,
    "jsd": True,
}
GROUP_CLASSES = [
    GRPOGroupedAdvantage,
    OPMDGroupAdvantage,
    RLOOAdvantageFn,
    ASYMREGroupAdvantage,
    REINFORCEGroupAdvantage,
]


def exp(task, run, reward, n=4, step=0, mask=None, logprobs=None, batch=0):
    return Experience(
        eid=EID(batch=batch, task=task, run=run, step=step),
        tokens=torch.arange(2 + n),
        prompt_length=2,
        reward=reward,
        action_mask=mask,
        logprobs=logprobs,
    )


def random_step(sizes, seed=0, logprobs=False, max_len=9):
    """Experiences of one explore step: task ``t`` has ``sizes[t]`` runs, shuffled."""
    rng = random.Random(seed)
    out = []
    for t, size in enumerate(sizes):
        for r in range(size):
            n = rng.randint(0, max_len)
            mask = torch.tensor([rng.random() > 0.2 for _ in range(n)], dtype=torch.bool)
            lp = torch.tensor([-rng.random() for _ in range(n)]) if logprobs else None
            out.append(exp(t, r, rng.gauss(0, 1), n=n, mask=mask, logprobs=lp))
    rng.shuffle(out)
    return out


def by_uid(exps):
    return {e.eid.uid: e for e in exps}


# ------------------------------------------------------------------------------ registry


def test_registered_names_and_placement():
    for name, in_trainer in NAMES.items():
        cls = ADVANTAGE_FN.get(name)
        assert cls.compute_in_trainer() is in_trainer, name
        obj = build_component(cls)
        assert isinstance(obj, cls)


def test_default_args_are_trinity_rft_ones():
    assert GRPOGroupedAdvantage.default_args() == {
        "epsilon": 1e-6,
        "std_threshold": None,
        "duplicate_experiences": False,
        "rank_penalty": None,
        "std_cal_level": "group",
    }
    assert OPMDGroupAdvantage.default_args() == {"opmd_baseline": "mean", "tau": 1.0}
    assert ASYMREGroupAdvantage.default_args() == {"baseline_shift": -0.1}
    assert ADVANTAGE_FN.get("ppo").default_args() == {"gamma": 1.0, "lam": 1.0}
    assert ADVANTAGE_FN.get("reinforceplusplus").default_args() == {"gamma": 1.0}
    assert StepWiseGRPOAdvantageFn.default_args() == {
        "epsilon": 1e-6,
        "enable_step_norm": False,
        "std_threshold": None,
        "std_cal_level": "group",
    }


def test_bad_options_rejected():
    with pytest.raises(ValueError, match="std_cal_level"):
        GRPOGroupedAdvantage(std_cal_level="tokens")
    with pytest.raises(ValueError, match="opmd_baseline"):
        OPMDGroupAdvantage(opmd_baseline="median")
    with pytest.raises(ValueError, match="std_cal_level"):
        StepWiseGRPOAdvantageFn(std_cal_level="x")


def test_grpo_std_threshold_drops_flat_groups_and_singletons():
    exps = [exp(0, r, 1.0) for r in range(4)] + [exp(1, 0, 0.5)]
    exps += [exp(2, r, float(r)) for r in range(3)]
    out, metrics = GRPOGroupedAdvantage(std_threshold=0.0)(exps)
    assert {e.eid.task for e in out} == {2}
    assert metrics["filtered_count"] == 5.0
    assert metrics["skipped_group_ratio"] == pytest.approx(2 / 3)


def test_grpo_duplicate_experiences_refills_the_step():
    exps = [exp(0, r, 1.0) for r in range(4)] + [exp(1, r, float(r)) for r in range(4)]
    out, _ = GRPOGroupedAdvantage(std_threshold=0.0, duplicate_experiences=True)(exps)
    assert len(out) == 8
    assert all(e.eid.task == 1 for e in out)
    out[4].advantages += 1  # duplicates own their tensors
    assert not torch.equal(out[0].advantages, out[4].advantages)


def test_output_order_is_group_order():
    exps = random_step([3, 2, 4], seed=9)
    out, _ = GRPOGroupedAdvantage()(copy.deepcopy(exps))
    tasks = [e.eid.task for e in out]
    assert tasks == sorted(tasks, key=[e.eid.task for e in exps].index)


# ------------------------------------------------------------------------------ formulas


def test_grpo_formula_by_hand():
    rewards = [1.0, 0.0, 0.5, 0.25]
    exps = [exp("t", r, x) for r, x in enumerate(rewards)]
    GRPOGroupedAdvantage()(exps)
    t = torch.tensor(rewards)
    expected = (t - t.mean()) / (t.std() + 1e-6)
    for e, v in zip(exps, expected, strict=True):
        assert torch.allclose(e.advantages, v * torch.ones(4), atol=1e-6)
        assert torch.equal(e.returns, e.advantages)
        assert e.returns.data_ptr() != e.advantages.data_ptr()


def test_opmd_formulas_by_hand():
    rewards = [1.0, 0.0, 2.0]
    tau = 0.5
    exps = [exp("t", r, x) for r, x in enumerate(rewards)]
    OPMDGroupAdvantage(opmd_baseline="logavgexp", tau=tau)(exps)
    t = torch.tensor(rewards, dtype=torch.float64)
    base = tau * (torch.logsumexp(t / tau, 0) - math.log(3))
    for e, x in zip(exps, rewards, strict=True):
        assert e.advantages[0].item() == pytest.approx(x - float(base), abs=1e-6)
    exps = [exp("t", r, x) for r, x in enumerate(rewards)]
    _, metrics = OPMDGroupAdvantage()(exps)
    assert metrics["group_advantages/group_baseline/mean"] == pytest.approx(1.0)
    assert [e.advantages[0].item() for e in exps] == [0.0, -1.0, 1.0]


def test_opmd_logavgexp_is_stable_for_large_rewards():
    exps = [exp("t", r, x) for r, x in enumerate([1000.0, 999.0, 998.0])]
    OPMDGroupAdvantage(opmd_baseline="logavgexp", tau=0.01)(exps)
    assert all(torch.isfinite(e.advantages).all() for e in exps)
    assert exps[0].advantages[0].item() == pytest.approx(0.01 * math.log(3), abs=1e-5)


def test_asymre_and_reinforce_and_rloo_by_hand():
    rewards = [1.0, 0.0, 0.5]
    exps = [exp("t", r, x) for r, x in enumerate(rewards)]
    ASYMREGroupAdvantage(baseline_shift=-0.1)(exps)
    assert [round(e.advantages[0].item(), 6) for e in exps] == [0.6, -0.4, 0.1]
    exps = [exp("t", r, x) for r, x in enumerate(rewards)]
    _, m = REINFORCEGroupAdvantage()(exps)
    assert [e.advantages[0].item() for e in exps] == rewards and m[
        "group_advantages/reward_mean/mean"
    ] == 0.5
    exps = [exp("t", r, x) for r, x in enumerate(rewards)]
    RLOOAdvantageFn()(exps)
    assert [round(e.advantages[0].item(), 6) for e in exps] == [0.75, -0.75, 0.0]


def test_advantages_follow_the_action_mask():
    mask = torch.tensor([1, 0, 1, 1, 0], dtype=torch.bool)
    exps = [exp("t", 0, 1.0, n=5, mask=mask), exp("t", 1, 0.0, n=5, mask=mask)]
    GRPOGroupedAdvantage()(exps)
    assert exps[0].advantages.shape == (5,)
    assert torch.all(exps[0].advantages[~mask] == 0)
    assert torch.all(exps[0].advantages[mask] > 0)


# ------------------------------------------------------------------------------ edge cases


@pytest.mark.parametrize("cls", GROUP_CLASSES[:4])
def test_group_of_one_is_zero_when_asked(cls):
    exps = [exp("alone", 0, 0.7)]
    out, metrics = build_component(cls, {"zero_singletons": True})(exps)
    assert len(out) == 1
    assert torch.all(out[0].advantages == 0)
    assert all(math.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("cls", GROUP_CLASSES[:4])
def test_group_of_one_has_baseline_zero_by_default(cls):
    """verl / Trinity-RFT / the guide: no sibling, baseline 0, finite advantage."""
    exps = [exp("alone", 0, 0.7)]
    out, metrics = cls()(exps)
    assert len(out) == 1
    adv = out[0].advantages[out[0].action_mask.bool()]
    assert torch.all(torch.isfinite(adv)) and torch.all(adv != 0)
    assert all(math.isfinite(v) for v in metrics.values())


def test_group_of_one_trinity_rft_value_by_default():
    fn = build_component(GRPOGroupedAdvantage, {})
    exps = [exp("alone", 0, 0.7)]
    fn(exps)
    assert exps[0].advantages[0].item() == pytest.approx(0.7 / (1 + 1e-6))


@pytest.mark.parametrize(
    "fn",
    [
        GRPOGroupedAdvantage(),
        GRPOGroupedAdvantage(epsilon=0.0),
        OPMDGroupAdvantage(),
        OPMDGroupAdvantage(opmd_baseline="logavgexp"),
        RLOOAdvantageFn(),
    ],
    ids=lambda f: type(f).__name__,
)
@pytest.mark.parametrize("value", [0.1, 1.0, 0.0, -3.3, 1e6 + 0.1])
def test_all_equal_rewards_give_exact_zero(fn, value):
    exps = [exp("t", r, value) for r in range(7)]
    out, metrics = fn(exps)
    for e in out:
        assert torch.all(e.advantages == 0) and torch.all(e.returns == 0)
    assert all(math.isfinite(v) for v in metrics.values())


def test_all_equal_rewards_asymre_gives_minus_shift():
    exps = [exp("t", r, 0.1) for r in range(3)]
    ASYMREGroupAdvantage(baseline_shift=-0.1)(exps)
    assert all(e.advantages[0].item() == pytest.approx(0.1) for e in exps)


@pytest.mark.parametrize("cls", GROUP_CLASSES + [StepWiseGRPOAdvantageFn])
def test_empty_action_masks(cls):
    exps = [
        exp("t", 0, 1.0, n=0, mask=torch.zeros(0, dtype=torch.bool)),
        exp("t", 1, 0.0, n=3, mask=torch.zeros(3, dtype=torch.bool)),
        exp("t", 2, 0.5, n=2),
    ]
    out, _ = cls()(exps)
    assert out[0].advantages.shape == (0,)
    assert torch.all(out[1].advantages == 0)
    assert all(torch.isfinite(e.advantages).all() for e in out)


@pytest.mark.parametrize("cls", GROUP_CLASSES + [StepWiseGRPOAdvantageFn])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_rewards_rejected_naming_the_eid(cls, bad):
    exps = [exp("t", 0, 1.0), exp("t", 1, bad), exp("t", 2, 0.0)]
    with pytest.raises(ValueError) as err:
        cls()(exps)
    msg = str(err.value)
    assert exps[1].eid.uid in msg and str(bad) in msg
    with pytest.raises(ValueError, match=exps[1].eid.uid):  # per-group path too
        GroupAdvantage.__call__(cls(), exps)


@pytest.mark.parametrize("cls", GROUP_CLASSES + [StepWiseGRPOAdvantageFn])
def test_reward_none_rejected_naming_the_eid(cls):
    exps = [exp("t", 0, 1.0), exp("t", 1, None)]
    with pytest.raises(ValueError, match=f"{exps[1].eid.uid}.*reward None"):
        cls()(exps)


def test_empty_input():
    for name, in_trainer in NAMES.items():
        if not in_trainer:
            assert ADVANTAGE_FN.get(name)()([]) == ([], {})


def test_mixed_lengths_and_serialization_round_trip():
    exps = random_step([3, 5], seed=4, max_len=30)
    out, _ = GRPOGroupedAdvantage()(exps)
    data = Experience.serialize_many(out)
    back = Experience.deserialize_many(data)
    for x, y in zip(out, back, strict=True):
        assert torch.equal(x.advantages, y.advantages) and torch.equal(x.returns, y.returns)
        assert x.advantages.shape == x.action_mask.shape


def test_group_class_on_collated_batch_equals_list_path():
    exps = random_step([3, 4, 2], seed=12)
    listed, _ = RLOOAdvantageFn()(copy.deepcopy(exps))
    batch, _ = RLOOAdvantageFn()(collate_experiences(exps))
    got = by_uid(listed)
    for row, eid in enumerate(batch.eids):
        n = got[eid.uid].advantages.shape[0]
        torch.testing.assert_close(batch.advantages[row, :n], got[eid.uid].advantages)
        assert torch.all(batch.advantages[row, n:] == 0)


def test_batch_nan_token_reward_rejected():
    exps = [exp("t", 0, 1.0), exp("t", 1, 0.0)]
    batch = collate_experiences(exps)
    batch.token_level_rewards = torch.zeros_like(batch.action_mask, dtype=torch.float32)
    batch.token_level_rewards[1, 2] = float("nan")
    with pytest.raises(ValueError, match=exps[1].eid.uid):
        GRPOGroupedAdvantage()(batch)
    with pytest.raises(ValueError, match=exps[1].eid.uid):
        ADVANTAGE_FN.get("reinforceplusplus")()(batch)


# ------------------------------------------------------------------------------ trainer-side


def test_ppo_needs_values_and_handles_empty_masks():
    exps = [exp("t", 0, 1.0, n=3, mask=torch.zeros(3, dtype=torch.bool)), exp("t", 1, 0.0, n=3)]
    batch = collate_experiences(exps)
    with pytest.raises(ValueError, match="values"):
        ADVANTAGE_FN.get("ppo")()(batch)
    batch.custom_fields["values"] = torch.randn(2, 3)
    batch, metrics = ADVANTAGE_FN.get("ppo")(gamma=0.9, lam=0.9)(batch)
    assert torch.isfinite(batch.advantages).all() and torch.isfinite(batch.returns).all()
    empty = collate_experiences([exp("t", 0, 1.0, n=2, mask=torch.zeros(2, dtype=torch.bool))])
    empty, metrics = ADVANTAGE_FN.get("ppo")()(empty, values=torch.zeros(1, 2))
    assert torch.isfinite(empty.advantages).all() and metrics == {}


def test_ppo_outcome_reward_goes_on_last_response_token():
    exps = [exp("t", 0, 2.0, n=3), exp("t", 1, 1.0, n=1)]
    batch = collate_experiences(exps)
    batch, _ = ADVANTAGE_FN.get("ppo")()(batch, values=torch.zeros(2, 3))
    # gamma = lam = 1, zero values: return = reward on every token up to the end
    torch.testing.assert_close(batch.returns, torch.tensor([[2.0, 2.0, 2.0], [1.0, 0.0, 0.0]]))


def test_remax_needs_baselines():
    batch = collate_experiences([exp("t", 0, 1.0), exp("t", 1, 0.0)])
    with pytest.raises(ValueError, match="reward_baselines"):
        ADVANTAGE_FN.get("remax")()(batch)
    batch, _ = ADVANTAGE_FN.get("remax")()(batch, reward_baselines=torch.tensor([0.5, 0.5]))
    assert batch.advantages[0, -1].item() == pytest.approx(0.5)


def test_whiten_with_fewer_than_two_tokens_does_not_explode():
    values = torch.tensor([[3.0, 5.0]])
    assert torch.equal(F.masked_whiten(values, torch.tensor([[1, 0]])), values - 3.0)
    assert torch.isfinite(F.masked_whiten(values, torch.zeros(1, 2))).all()


# ------------------------------------------------------------------------------ step-wise GRPO


def multi_step(task_runs, seed=0, none_before_last=True):
    """task_runs[t] = list of step counts per run; reward only on the last step."""
    rng = random.Random(seed)
    out = []
    for t, runs in enumerate(task_runs):
        for r, steps in enumerate(runs):
            ret = rng.gauss(0, 1)
            for s in range(steps):
                last = s == steps - 1
                reward = ret if last else (None if none_before_last else rng.random())
                out.append(exp(t, r, reward, n=rng.randint(1, 6), step=s))
    return out


def test_step_wise_broadcasts_run_advantage_to_every_step():
    exps = multi_step([[3, 2, 4]], seed=5)
    fn = StepWiseGRPOAdvantageFn(enable_step_norm=True)
    out, metrics = fn(exps)
    last = {}
    for e in exps:
        last[e.eid.run] = e.reward
    t = torch.tensor([last[r] for r in sorted(last)], dtype=torch.float64)
    scores = (t - t.mean()) / (t.std() + 1e-6)
    lengths = {0: 3, 1: 2, 2: 4}
    for e in out:
        expected = float(scores[e.eid.run]) / lengths[e.eid.run]
        assert torch.allclose(e.advantages, torch.full_like(e.advantages, expected), atol=1e-6)
    assert metrics["experience_count"] == 9.0 and metrics["filtered_count"] == 0.0


def test_step_wise_single_run_task_is_zero_and_threshold_drops_it():
    exps = multi_step([[3], [2, 2]], seed=2)
    out, _ = StepWiseGRPOAdvantageFn(zero_singletons=True)(copy.deepcopy(exps))
    assert all(torch.all(e.advantages == 0) for e in out if e.eid.task == 0)
    out, metrics = StepWiseGRPOAdvantageFn(std_threshold=0.0)(copy.deepcopy(exps))
    assert {e.eid.task for e in out} == {1} and metrics["filtered_count"] == 3.0


# ------------------------------------------------------------------------------ functional


def test_as_group_index_first_appearance_order():
    idx, n = F.as_group_index(["b", "a", "b", "c", "a"])
    assert n == 3 and idx.tolist() == [0, 1, 0, 2, 1]
    idx2, n2 = F.as_group_index(torch.tensor([7, 3, 7, 9, 3]))
    assert n2 == 3 and idx2.tolist() == [0, 1, 0, 2, 1]


def test_check_finite_message():
    with pytest.raises(ValueError, match="row 1 has a non-finite reward \\(nan\\)"):
        F.check_finite(torch.tensor([0.0, float("nan")]))


def test_reverse_linear_scan_matches_loop():
    a, c = torch.randn(5, 17, dtype=torch.float64), torch.rand(5, 17, dtype=torch.float64)
    y = F.reverse_linear_scan(a, c)
    ref = torch.zeros(5, dtype=torch.float64)
    for t in range(16, -1, -1):
        ref = a[:, t] + c[:, t] * ref
        torch.testing.assert_close(y[:, t], ref)
    assert F.reverse_linear_scan(torch.zeros(3, 0), torch.zeros(3, 0)).shape == (3, 0)
