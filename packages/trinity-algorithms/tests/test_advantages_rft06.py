"""The advantages Trinity-RFT 0.6 registers besides the core ones: ``grpo_verl``,
``opmd_verl``, ``asymre_verl``, ``rec``, ``clipb``, ``clipv``, ``gigpo``,
``on_policy_distill``, ``jsd``.

Expected values are written from Trinity-RFT's formulas by hand (``math`` on small numbers),
never from the implementation; then the edges (one-member groups, constant groups, all-masked
rows) and argument validation.
"""

from __future__ import annotations

import math

import pytest
import torch

from trinity.algorithm import resolve_algorithm
from trinity.algorithm.advantage_fn import (
    ADVANTAGE_FN,
    ClipBAdvantageFn,
    ClipVAdvantageFn,
    GiGPOAdvantageFn,
    JSDAdvantage,
    OnPolicyDistillAdvantage,
    RECGroupedAdvantage,
)
from trinity.algorithm.advantage_fn import functional as F
from trinity.algorithm.advantage_fn import functional_logprob as FL
from trinity.common.config import ConfigError
from trinity.common.experience import EID, Experience, collate_experiences

EPS = 1e-6


def exp(task, run, reward, n=3, step=0, mask=None, logprobs=None, info=None, teacher=None):
    return Experience(
        eid=EID(batch=0, task=task, run=run, step=step),
        tokens=torch.arange(2 + n),
        prompt_length=2,
        reward=reward,
        action_mask=mask,
        logprobs=logprobs,
        info=info or {},
        teacher_logprobs=teacher,
    )


def first_tokens(exps):
    return [e.advantages[0].item() for e in exps]


# ----------------------------------------------------------------------- verl-batch variants


def test_grpo_verl_runs_in_the_trainer_on_the_batch():
    exps = [exp("a", 0, 1.0), exp("a", 1, 0.0), exp("b", 0, 0.7), exp("a", 2, 2.0)]
    exps[1].action_mask = torch.tensor([True, False, True])
    fn = ADVANTAGE_FN.get("grpo_verl")()
    assert fn.compute_in_trainer() is True
    batch, _ = fn(collate_experiences(exps))
    # group a: rewards 1, 0, 2 -> mean 1, unbiased std 1; group b alone: mean 0, std 1
    expected = [0.0, -1 / (1 + EPS), 0.7 / (1 + EPS), 1 / (1 + EPS)]
    for row, value in enumerate(expected):
        mask = batch.action_mask[row]
        torch.testing.assert_close(batch.advantages[row], value * mask.float())
    torch.testing.assert_close(batch.returns, batch.advantages)


def test_grpo_verl_reads_token_level_rewards_when_set():
    batch = collate_experiences([exp("a", 0, 0.0), exp("a", 1, 0.0)])
    batch.token_level_rewards = torch.tensor([[0.0, 0.0, 3.0], [0.0, 1.0, 0.0]])
    batch, _ = ADVANTAGE_FN.get("grpo_verl")()(batch)
    std = math.sqrt(2.0)  # scores 3 and 1
    assert batch.advantages[0, 0].item() == pytest.approx(1 / (std + EPS), rel=1e-6)
    assert batch.advantages[1, 0].item() == pytest.approx(-1 / (std + EPS), rel=1e-6)


def test_opmd_verl_and_asymre_verl_by_hand():
    rewards = [1.0, 0.0, 2.0]
    tau = 0.5
    batch = collate_experiences([exp("t", r, x) for r, x in enumerate(rewards)])
    batch, _ = ADVANTAGE_FN.get("opmd_verl")(opmd_baseline="logavgexp", tau=tau)(batch)
    lse = math.log(sum(math.exp(x / tau) for x in rewards))
    base = tau * (lse - math.log(3))
    for row, x in enumerate(rewards):
        assert batch.advantages[row, 0].item() == pytest.approx(x - base, abs=1e-6)
    batch = collate_experiences([exp("t", r, x) for r, x in enumerate([1.0, 0.0, 0.5])])
    batch, _ = ADVANTAGE_FN.get("asymre_verl")(baseline_shift=-0.1)(batch)
    assert batch.advantages[:, 0].tolist() == pytest.approx([0.6, -0.4, 0.1], abs=1e-6)
    for name in ("grpo_verl", "opmd_verl", "asymre_verl"):
        assert ADVANTAGE_FN.get(name).compute_in_trainer() is True


def test_verl_batch_defaults_and_arguments():
    assert ADVANTAGE_FN.get("grpo_verl").default_args() == {"epsilon": 1e-6}
    assert ADVANTAGE_FN.get("opmd_verl").default_args() == {"opmd_baseline": "mean", "tau": 1.0}
    assert ADVANTAGE_FN.get("asymre_verl").default_args() == {"baseline_shift": -0.1}
    with pytest.raises(ValueError, match="tau"):
        ADVANTAGE_FN.get("opmd_verl")(tau=0.0)
    with pytest.raises(ValueError, match="opmd_baseline"):
        ADVANTAGE_FN.get("opmd_verl")(opmd_baseline="median")


def test_trinity_rft_import_paths():
    from trinity.algorithm.advantage_fn.gigpo_advantage import GiGPOAdvantageFn as G
    from trinity.algorithm.advantage_fn.grpo_advantage import GRPOAdvantageFn as V
    from trinity.algorithm.advantage_fn.grpo_advantage import GRPOGroupedAdvantage as Grouped

    assert G is ADVANTAGE_FN.get("gigpo") and V is ADVANTAGE_FN.get("grpo_verl")
    assert Grouped is ADVANTAGE_FN.get("grpo")
    # Trinity-RFT's group advantages are experience operators: process(exps) is the call
    out, metrics = G(gamma=0.5).process(_gigpo_case())
    reference, reference_metrics = G(gamma=0.5)(_gigpo_case())
    assert _by_run_step(out) == _by_run_step(reference) and metrics == reference_metrics


# ----------------------------------------------------------------------------------- REC


def test_rec_plain_and_std_normalized_by_hand():
    rewards = [1.0, 0.0, 0.0, 0.0]
    exps = [exp("t", r, x) for r, x in enumerate(rewards)]
    _, metrics = RECGroupedAdvantage()(exps)
    assert first_tokens(exps) == pytest.approx([0.75, -0.25, -0.25, -0.25], abs=1e-7)
    pop_std = math.sqrt((0.75**2 + 3 * 0.25**2) / 4)  # unbiased=False
    assert metrics["group_advantages/reward_std/mean"] == pytest.approx(pop_std, rel=1e-6)
    assert metrics["group_advantages/drop_balance/mean"] == 0.0
    exps = [exp("t", r, x) for r, x in enumerate(rewards)]
    RECGroupedAdvantage(std_normalize=True)(exps)
    expected = [v / (pop_std + EPS) for v in (0.75, -0.25, -0.25, -0.25)]
    assert first_tokens(exps) == pytest.approx(expected, rel=1e-6)


def test_rec_balance_drops_random_negatives_down_to_the_positives():
    rewards = [1.0, 0.0, 0.0, 0.0]  # mean 0.25: one positive, three negatives -> drop two
    exps = [exp("t", r, x) for r, x in enumerate(rewards)]
    torch.manual_seed(0)
    out, metrics = RECGroupedAdvantage(drop="balance", std_normalize=True)(exps)
    assert len(out) == 4  # dropped experiences stay, with advantage 0
    adv = first_tokens(exps)
    # kept: reward 1 and one 0 -> mean 0.5, population std 0.5
    assert adv[0] == pytest.approx(0.5 / (0.5 + EPS), rel=1e-6)
    assert sorted(adv[1:]) == pytest.approx([-0.5 / (0.5 + EPS), 0.0, 0.0], rel=1e-6)
    assert metrics["group_advantages/drop_balance/mean"] == 0.5
    assert metrics["group_advantages/reward_mean/mean"] == pytest.approx(0.5)


def test_rec_drop_choice_follows_the_noise_and_balanced_groups_keep_everyone():
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    noise = torch.tensor([0.9, 0.3, 0.1, 0.5, 0.0, 0.0, 0.0])
    res = F.rec_advantages(scores, groups, drop_balance=True, noise=noise)
    # group 0's negatives by key: row 2 (0.1), row 1 (0.3), row 3 (0.5): the first two go
    assert res.dropped.tolist() == [False, True, True, False, False, False, False]
    # group 1: mean 2/3, two positives, one negative: balanced already
    assert res.advantages.tolist() == pytest.approx([0.5, 0, 0, -0.5, 1 / 3, 1 / 3, -2 / 3])
    assert res.drop_frac.tolist() == [0.5, 0.0]


def test_rec_edges_constant_singletons_and_determinism():
    exps = [exp("t", r, 0.1) for r in range(3)]
    _, metrics = RECGroupedAdvantage(drop="balance", std_normalize=True)(exps)
    assert first_tokens(exps) == [0.0, 0.0, 0.0]
    assert metrics["group_advantages/drop_balance/mean"] == 0.0
    alone = [exp("s", 0, -0.5)]  # never dropped; baseline 0, scale 1
    RECGroupedAdvantage(drop="balance", std_normalize=True)(alone)
    assert first_tokens(alone) == pytest.approx([-0.5 / (1 + EPS)])
    RECGroupedAdvantage(zero_singletons=True)(alone)
    assert first_tokens(alone) == [0.0]
    fn = RECGroupedAdvantage(drop="balance")
    runs = []
    for _ in range(2):
        torch.manual_seed(3)
        exps = [exp("t", r, x) for r, x in enumerate([1.0] + [0.0] * 6)]
        fn(exps)
        runs.append(first_tokens(exps))
    assert runs[0] == runs[1]


def test_rec_bad_drop_is_refused():
    with pytest.raises(ValueError, match="drop"):
        RECGroupedAdvantage(drop="all")
    assert RECGroupedAdvantage.default_args() == {
        "epsilon": 1e-6,
        "std_normalize": False,
        "drop": None,
    }


# ----------------------------------------------------------------------------- Clip_B / V

P, H = 0.5, 1.0  # the ordinary token: S = p * (H + log p)
OUTLIER = (0.9, 0.0)  # S = 0.9 * log 0.9 < 0


def _clip_batch(outlier_row: int):
    """Task of two rows (rewards 1, 0 -> GRPO +-0.7071), three tokens each; token 2 of
    ``outlier_row`` has a low S (one outlier among six: z = -sqrt(5) population stds)."""
    batch = collate_experiences([exp("t", 0, 1.0), exp("t", 1, 0.0)])
    lp = torch.full((2, 3), math.log(P))
    ent = torch.full((2, 3), H)
    lp[outlier_row, 2] = math.log(OUTLIER[0])
    ent[outlier_row, 2] = OUTLIER[1]
    batch.logprobs = lp
    return batch, ent


def _signal(p, h):
    return p * (h + math.log(p))


@pytest.mark.parametrize("mu, dropped", [(2.0, True), (2.5, False)])
def test_clipb_drops_a_low_outlier_of_a_negative_row(mu, dropped):
    batch, ent = _clip_batch(outlier_row=1)
    batch, metrics = ClipBAdvantageFn(mu=mu)(batch, entropy=ent)
    values = [_signal(P, H)] * 5 + [_signal(*OUTLIER)]
    mean = sum(values) / 6
    var = sum((v - mean) ** 2 for v in values) / 6
    assert metrics["ES"] == pytest.approx(mean, rel=1e-6)
    assert metrics["varS"] == pytest.approx(var, rel=1e-5)
    assert (values[-1] - mean) / math.sqrt(var) == pytest.approx(-math.sqrt(5))
    assert bool(batch.action_mask[1, 2]) is (not dropped)
    assert batch.action_mask.sum().item() == (5 if dropped else 6)
    adv = 0.5 / (math.sqrt(0.5) + EPS)
    assert batch.advantages[0].tolist() == pytest.approx([adv] * 3, rel=1e-6)
    expected_row = [-adv, -adv, 0.0 if dropped else -adv]
    assert batch.advantages[1].tolist() == pytest.approx(expected_row, rel=1e-6)
    assert metrics["frac_clipped"] == pytest.approx(1 / 6 if dropped else 0.0)
    assert metrics["frac_clipped_neg"] == pytest.approx(1 / 3 if dropped else 0.0)
    assert metrics["frac_clipped_pos"] == 0.0


def test_clipb_keeps_positive_tokens_and_everything_on_a_flat_signal():
    batch, ent = _clip_batch(outlier_row=0)
    batch, metrics = ClipBAdvantageFn(mu=0.5)(batch, entropy=ent)
    assert bool(batch.action_mask.all()) and metrics["frac_clipped"] == 0.0
    batch = collate_experiences([exp("t", 0, 1.0), exp("t", 1, 0.0)])
    batch.logprobs = torch.full((2, 3), math.log(P))
    batch.custom_fields["entropys"] = torch.full((2, 3), H)  # Trinity-RFT's field name
    batch, metrics = ClipBAdvantageFn(mu=0.0)(batch)
    assert bool(batch.action_mask.all()) and metrics["varS"] == 0.0


def test_clipb_and_clipv_need_their_fields():
    batch = collate_experiences([exp("t", 0, 1.0), exp("t", 1, 0.0)])
    with pytest.raises(ValueError, match="entropy"):
        ClipBAdvantageFn()(batch)
    with pytest.raises(ValueError, match="necs"):
        ClipVAdvantageFn()(batch, entropy=torch.ones(2, 3))
    with pytest.raises(ValueError, match="shape"):
        ClipBAdvantageFn()(batch, entropy=torch.ones(2, 4))
    with pytest.raises(ValueError, match="mu"):
        ClipBAdvantageFn(mu=-1.0)
    with pytest.raises(ValueError, match="max_frac"):
        ClipVAdvantageFn(max_frac=1.5)


def _clipv_batch(rewards=(1.0, 0.0)):
    """Rows of five tokens with S = 0 exactly (H = -log p), so D = N = ``necs``."""
    batch = collate_experiences([exp("t", r, x, n=5) for r, x in enumerate(rewards)])
    batch.logprobs = torch.full((2, 5), math.log(0.5))
    return batch, torch.full((2, 5), math.log(2.0))


@pytest.mark.parametrize("max_frac, removed", [(0.1, [(1, 0)]), (0.2, [(1, 0), (1, 1)])])
def test_clipv_caps_the_share_of_removed_tokens(max_frac, removed):
    batch, ent = _clipv_batch()
    necs = torch.zeros(2, 5)
    necs[1, 0], necs[1, 1] = 1.0, 0.9  # both exceed 2 stds; the largest goes first
    batch, metrics = ClipVAdvantageFn(mu=2.0, max_frac=max_frac)(batch, entropy=ent, necs=necs)
    d = [0.0] * 8 + [1.0, 0.9]
    mean = sum(d) / 10
    std = math.sqrt(sum((v - mean) ** 2 for v in d) / 10)
    assert metrics["stdD"] == pytest.approx(std, rel=1e-6)
    assert 0.9 > 2.0 * std  # both are candidates
    off = {(int(r), int(c)) for r, c in torch.nonzero(~batch.action_mask).tolist()}
    assert off == set(removed)
    assert metrics["frac_clipped"] == pytest.approx(len(removed) / 10)


def test_clipv_never_removes_zero_or_positive_advantage_tokens():
    batch, ent = _clipv_batch(rewards=(0.5, 0.5))  # constant group: advantage 0
    necs = torch.zeros(2, 5)
    necs[0, 0] = 5.0
    batch, metrics = ClipVAdvantageFn(mu=0.1, max_frac=1.0)(batch, entropy=ent, necs=necs)
    assert bool(batch.action_mask.all()) and metrics["frac_clipped"] == 0.0


def test_clip_filters_functional_on_an_all_masked_batch():
    zeros = torch.zeros(2, 3)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    kept = FL.clip_b_keep(zeros - 1, zeros - 1, zeros, mask)
    assert bool(kept.keep.all()) and float(kept.std) == 0.0
    kept = FL.clip_v_keep(zeros - 1, zeros - 1, zeros, zeros, mask)
    assert bool(kept.keep.all())


# ------------------------------------------------------------------------------------ GiGPO


def _episode(task, run, states, rewards, order=None, step_key="step_reward"):
    steps = [
        exp(task, run, None, step=s, info={"env_state_hash": st, step_key: r})
        for s, (st, r) in enumerate(zip(states, rewards, strict=True))
    ]
    return [steps[i] for i in order] if order else steps


def _gigpo_case():
    """Run 0: states A, B, rewards 0, 1; run 1: states A, C, B, rewards 0, 0, 0."""
    return _episode(0, 0, ["A", "B"], [0.0, 1.0]) + _episode(
        0, 1, ["A", "C", "B"], [0.0, 0.0, 0.0], order=[2, 0, 1]
    )


def _by_run_step(exps):
    return {(e.eid.run, e.eid.step): e.advantages[0].item() for e in exps}


def test_gigpo_by_hand_without_normalisation():
    out, metrics = GiGPOAdvantageFn(gamma=0.5)(_gigpo_case())
    k = 1 / (1 + EPS)
    # A_E: returns 1 and 0 -> +-0.5; anchors: A (R_0 = 0.5 vs 0) -> +-0.25, B (1 vs 0)
    # -> +-0.5, C alone -> 0
    expected = {
        (0, 0): (0.5 + 0.25) * k,
        (0, 1): (0.5 + 0.5) * k,
        (1, 0): (-0.5 - 0.25) * k,
        (1, 1): -0.5 * k,
        (1, 2): (-0.5 - 0.5) * k,
    }
    assert _by_run_step(out) == pytest.approx(expected, rel=1e-6)
    assert [(e.eid.run, e.eid.step) for e in out] == sorted(expected)
    assert metrics["gigpo/anchor_groups_total"] == 3.0
    assert metrics["gigpo/anchor_groups_size_gt1"] == 2.0
    assert metrics["gigpo/anchor_group_hit_ratio"] == pytest.approx(2 / 3)
    assert metrics["gigpo/mean_abs_A_E"] == pytest.approx(0.5 * k)
    assert metrics["gigpo/mean_abs_A_S"] == pytest.approx(1.5 / 5 * k)
    assert metrics["gigpo/episode_reward_mean/mean"] == pytest.approx(0.5)
    assert metrics["gigpo/episode_reward_std/mean"] == 1.0
    assert metrics["experience_count"] == 5.0


def test_gigpo_std_normalisation_and_omega():
    out, metrics = GiGPOAdvantageFn(gamma=0.5, fnorm="std", omega=2.0)(_gigpo_case())
    s_e = math.sqrt(0.5)  # std of returns 1, 0
    s_a = math.sqrt(0.125)  # std of R_0 0.5, 0
    a_e = 0.5 / (s_e + EPS)
    expected = {
        (0, 0): a_e + 2 * 0.25 / (s_a + EPS),
        (0, 1): a_e + 2 * 0.5 / (s_e + EPS),
        (1, 0): -a_e - 2 * 0.25 / (s_a + EPS),
        (1, 1): -a_e,
        (1, 2): -a_e - 2 * 0.5 / (s_e + EPS),
    }
    assert _by_run_step(out) == pytest.approx(expected, rel=1e-6)
    assert metrics["gigpo/episode_reward_std/mean"] == pytest.approx(s_e, rel=1e-6)


def test_gigpo_falls_back_to_the_last_steps_reward():
    exps = _gigpo_case()
    for e in exps:
        del e.info["step_reward"]
        last = (e.eid.run, e.eid.step) in {(0, 1), (1, 2)}
        e.reward = (1.0 if e.eid.run == 0 else 0.0) if last else None
    out, _ = GiGPOAdvantageFn(gamma=0.5)(exps)
    reference, _ = GiGPOAdvantageFn(gamma=0.5)(_gigpo_case())
    assert _by_run_step(out) == pytest.approx(_by_run_step(reference))


def test_gigpo_edges():
    # one run: A_E = return / (1 + eps); no state hash: A_S = 0
    exps = _episode(0, 0, [None, None], [0.5, 0.5])
    out, metrics = GiGPOAdvantageFn()(exps)
    assert first_tokens(out) == pytest.approx([1.0 / (1 + EPS)] * 2)
    assert metrics["gigpo/anchor_groups_total"] == 0.0
    assert metrics["gigpo/anchor_group_hit_ratio"] == 0.0
    out, _ = GiGPOAdvantageFn(zero_singletons=True)(_episode(0, 0, [None], [0.5]))
    assert first_tokens(out) == [0.0]
    # anchors span tasks; all-masked responses get zeros
    exps = _episode(0, 0, ["S"], [1.0]) + _episode(1, 0, ["S"], [0.0])
    exps[1].action_mask = torch.zeros(3, dtype=torch.bool)
    out, metrics = GiGPOAdvantageFn()(exps)
    assert first_tokens(out)[0] == pytest.approx((1.0 + 0.5) / (1 + EPS))
    assert torch.all(out[1].advantages == 0)
    assert metrics["gigpo/anchor_groups_size_gt1"] == 1.0
    assert GiGPOAdvantageFn()([]) == ([], {})


def test_gigpo_bad_inputs_and_arguments():
    exps = _episode(0, 0, ["A"], [float("nan")])
    with pytest.raises(ValueError, match="non-finite step reward"):
        GiGPOAdvantageFn()(exps)
    exps = _episode(0, 0, ["A"], ["high"])
    with pytest.raises(ValueError, match="non-numeric step reward"):
        GiGPOAdvantageFn()(exps)
    with pytest.raises(ValueError, match="fnorm"):
        GiGPOAdvantageFn(fnorm="mad")
    with pytest.raises(ValueError, match="gamma"):
        GiGPOAdvantageFn(gamma=1.5)
    with pytest.raises(ValueError, match="omega"):
        GiGPOAdvantageFn(omega=-1.0)


# ----------------------------------------------------------------------------- distillation

STUDENT = [[-1.0, -2.0, -3.0], [-0.5, -0.5, -7.0]]
TEACHER = [[-1.5, -1.0, -3.0], [-0.25, -1.0, 99.0]]
MASK = [[True, True, True], [True, True, False]]


def _distill_batch():
    exps = [
        exp("t", r, 0.0, mask=torch.tensor(m), logprobs=torch.tensor(s), teacher=torch.tensor(t))
        for r, (s, t, m) in enumerate(zip(STUDENT, TEACHER, MASK, strict=True))
    ]
    return collate_experiences(exps)


def test_on_policy_distill_by_hand():
    batch, metrics = OnPolicyDistillAdvantage(kl_coef=2.0)(_distill_batch())
    expected = [[-1.0, 2.0, 0.0], [0.5, -1.0, 0.0]]  # 2 * (teacher - student), masked
    torch.testing.assert_close(batch.advantages, torch.tensor(expected))
    torch.testing.assert_close(batch.returns, batch.advantages)
    # per-row sum of student - teacher: -0.5 and 0.25
    assert metrics["kl/mean"] == pytest.approx(-0.125)
    assert metrics["kl/std"] == pytest.approx(0.75 / math.sqrt(2))
    assert metrics["advantages/mean"] == pytest.approx((1.0 - 0.5) / 2)
    assert OnPolicyDistillAdvantage.compute_in_trainer() is True


def test_distillation_needs_the_teachers_logprobs():
    batch = collate_experiences([exp("t", 0, 1.0, logprobs=torch.zeros(3))])
    for fn in (OnPolicyDistillAdvantage(), JSDAdvantage()):
        with pytest.raises(ValueError, match="teacher_logprobs"):
            fn(batch)
    batch, _ = OnPolicyDistillAdvantage()(batch, teacher_logprobs=torch.full((1, 3), -1.0))
    assert batch.advantages.tolist() == [[-1.0, -1.0, -1.0]]
    nan_teacher = torch.tensor([[0.0, float("nan"), 0.0]])
    with pytest.raises(ValueError, match="non-finite teacher log-prob"):
        OnPolicyDistillAdvantage()(batch, teacher_logprobs=nan_teacher)


def _jsd(s: float, t: float, beta: float) -> float:
    """The single-sample JSD estimate from a student sample (the teacher's term weighted by
    ``p_teacher / p_student``)."""
    ps, pt = math.exp(s), math.exp(t)
    m = beta * pt + (1 - beta) * ps
    return beta * (pt / ps) * (t - math.log(m)) + (1 - beta) * (s - math.log(m))


def _jsd_advantage(s: float, t: float, beta: float) -> float:
    """``-(1 - beta) * log(p_student / m)``: minus ``d JSD_beta / d p_student``."""
    m = beta * math.exp(t) + (1 - beta) * math.exp(s)
    return -(1 - beta) * (s - math.log(m))


@pytest.mark.parametrize("beta", [0.5, 0.25])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_jsd_by_hand(beta, temperature):
    s, t = math.log(0.2), math.log(0.6)
    batch = collate_experiences([exp("t", 0, 0.0, n=1, logprobs=torch.tensor([s]))])
    fn = JSDAdvantage(lambda_coef=beta, kl_coef=3.0, temperature=temperature)
    batch, metrics = fn(batch, teacher_logprobs=torch.tensor([[t]]))
    advantage = _jsd_advantage(s / temperature, t / temperature, beta)
    assert batch.advantages.item() == pytest.approx(3.0 * advantage, rel=1e-5)
    jsd = _jsd(s / temperature, t / temperature, beta)
    assert metrics["jsd/mean"] == pytest.approx(jsd, rel=1e-5) and metrics["jsd/std"] == 0.0


def test_jsd_estimate_is_unbiased_and_its_advantage_is_its_gradient():
    """Over the student's samples the per-token estimate averages to JSD_beta, and the
    advantage's policy gradient is minus JSD_beta's gradient (checked on a 4-token vocabulary
    against autograd through the exact divergence)."""
    beta = 0.3
    logits = torch.tensor([0.2, -1.0, 1.5, 0.0], dtype=torch.float64, requires_grad=True)
    teacher = torch.log_softmax(torch.tensor([2.0, 0.0, -1.0, 0.5], dtype=torch.float64), -1)
    student = torch.log_softmax(logits, -1)
    p_s, p_t = student.exp(), teacher.exp()
    m = beta * p_t + (1 - beta) * p_s
    exact = (
        beta * (p_t * (teacher - m.log())).sum() + (1 - beta) * (p_s * (student - m.log())).sum()
    )
    s, t = student.detach(), teacher
    expected = (p_s.detach() * FL.jsd_per_token(s, t, beta)).sum()
    assert float(expected) == pytest.approx(float(exact.detach()), rel=1e-9)
    (grad_exact,) = torch.autograd.grad(exact, logits, retain_graph=True)
    advantage = FL.jsd_advantages(s, t, beta)
    # policy gradient of the advantage: sum_x p_s(x) * A(x) * grad log p_s(x)
    surrogate = (p_s.detach() * advantage * student).sum()
    (grad_pg,) = torch.autograd.grad(surrogate, logits)
    torch.testing.assert_close(grad_pg, -grad_exact)


def test_jsd_advantage_pushes_toward_the_teacher():
    """A sampled token the teacher likes more than the student gets a positive advantage, one it
    likes less a negative one. Trinity-RFT 0.6's ``-JSD`` estimate is never negative for
    0 < beta < 1 (it reinforced the token the teacher rules out here), and its student drifted
    away from the teacher in the learning matrix."""
    student = torch.tensor([[math.log(0.2), math.log(0.6)]])
    teacher = torch.tensor([[math.log(0.9), math.log(0.001)]])
    batch = collate_experiences([exp("t", 0, 0.0, n=2, logprobs=student[0])])
    for beta in (0.5, 0.1, 0.9, 0.0, 1.0):
        out, _ = JSDAdvantage(lambda_coef=beta)(batch, teacher_logprobs=teacher)
        liked, ruled_out = out.advantages[0].tolist()
        assert liked > 0 > ruled_out, (beta, liked, ruled_out)
    # 0.6's estimate on the ruled-out token, for the record: -JSD >= 0
    s, t = math.log(0.6), math.log(0.001)
    m = 0.5 * math.exp(t) + 0.5 * math.exp(s)
    assert -(0.5 * (t - math.log(m)) + 0.5 * (s - math.log(m))) > 0


def test_jsd_pure_kl_ends_masking_and_chunk_size(monkeypatch):
    s, t = math.log(0.2), math.log(0.6)
    assert FL.jsd_per_token(torch.tensor(s), torch.tensor(t), 0.0).item() == pytest.approx(s - t)
    assert FL.jsd_per_token(torch.tensor(s), torch.tensor(t), 1.0).item() == pytest.approx(
        3.0 * (t - s)
    )
    assert FL.jsd_advantages(torch.tensor(s), torch.tensor(t), 0.0).item() == pytest.approx(t - s)
    assert FL.jsd_advantages(torch.tensor(s), torch.tensor(t), 1.0).item() == pytest.approx(2.0)
    batch, _ = JSDAdvantage()(_distill_batch())
    assert batch.advantages[1, 2].item() == 0.0
    from trinity.algorithm.advantage_fn import distill

    rows_seen = []
    real = distill.jsd_per_token

    def spy(student, teacher, beta):
        rows_seen.append(student.shape[0])
        return real(student, teacher, beta)

    monkeypatch.setattr(distill, "jsd_per_token", spy)
    other, _ = JSDAdvantage(chunk_size=1)(_distill_batch())
    torch.testing.assert_close(batch.advantages, other.advantages)
    assert rows_seen and set(rows_seen) == {1}  # one row at a time
    rows_seen.clear()
    JSDAdvantage()(_distill_batch())
    assert rows_seen == [batch.advantages.shape[0]]  # the whole batch at once
    for bad in ({"lambda_coef": 1.5}, {"temperature": 0.0}, {"chunk_size": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            JSDAdvantage(**bad)


# ---------------------------------------------------------------------- config validation


@pytest.mark.parametrize(
    "name, args, path, expected",
    [
        ("rec", {"drop": "all"}, "drop", "balance"),
        ("rec", {"epsilon": 0}, "epsilon", "> 0"),
        ("gigpo", {"fnorm": "mad"}, "fnorm", "'std'"),
        ("gigpo", {"gamma": 2.0}, "gamma", "<= 1"),
        ("clipb", {"mu": -1.0}, "mu", ">= 0"),
        ("clipv", {"max_frac": 2.0}, "max_frac", "<= 1"),
        ("jsd", {"lambda_coef": 1.5}, "lambda_coef", "<= 1"),
        ("jsd", {"chunk_size": 0}, "chunk_size", ">= 1"),
        ("on_policy_distill", {"kl_coef": -1.0}, "kl_coef", ">= 0"),
        ("opmd_verl", {"tau": 0.0}, "tau", "> 0"),
        ("grpo_verl", {"std_threshold": 0.1}, "std_threshold", "grpo_verl"),
    ],
)
def test_config_arguments_are_checked(name, args, path, expected):
    config = {"algorithm_type": "grpo", "advantage_fn": name, "advantage_fn_args": args}
    with pytest.raises(ConfigError) as info:
        resolve_algorithm(config)
    issues = [i for i in info.value.errors if i.path == f"algorithm.advantage_fn_args.{path}"]
    assert issues, [str(i) for i in info.value.errors]
    assert expected in issues[0].message, issues[0].message


def test_jsd_trinity_rft_estimate_restores_0_6_advantages():
    """``trinity_rft_estimate: true``: Trinity-RFT 0.6's advantage, minus ``kl_coef`` times
    the per-token estimate; the default is the divergence's gradient."""
    student = torch.tensor([[math.log(0.2), math.log(0.6)]])
    teacher = torch.tensor([[math.log(0.9), math.log(0.001)]])
    batch = collate_experiences([exp("t", 0, 0.0, n=2, logprobs=student[0])])
    old, _ = JSDAdvantage(lambda_coef=0.3, kl_coef=0.7, trinity_rft_estimate=True)(
        batch, teacher_logprobs=teacher
    )

    def estimate_06(s: float, t: float) -> float:  # Trinity-RFT 0.6's, no importance weight
        m = 0.3 * math.exp(t) + 0.7 * math.exp(s)
        return 0.3 * (t - math.log(m)) + 0.7 * (s - math.log(m))

    want = [
        -0.7 * estimate_06(s, t)
        for s, t in zip(student[0].tolist(), teacher[0].tolist(), strict=True)
    ]
    assert old.advantages[0].tolist() == pytest.approx(want, rel=1e-5)
    assert all(a >= 0 for a in want)  # never a push away from a token (why it does not learn)
    ours, _ = JSDAdvantage(lambda_coef=0.3, kl_coef=0.7)(batch, teacher_logprobs=teacher)
    assert ours.advantages[0, 1].item() < 0 < ours.advantages[0, 0].item()
