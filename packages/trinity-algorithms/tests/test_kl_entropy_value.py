"""KL functions (penalty and loss), entropy losses and the critic's value loss."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from trinity.algorithm.entropy_loss_fn import (
    ENTROPY_LOSS_FN,
    DummyEntropyLossFn,
    MixEntropyLossFn,
    entropy_from_logits,
)
from trinity.algorithm.kl_fn import KL_FN, KL_TYPES, KLFn, compute_kl
from trinity.algorithm.utils import LOSS_AGG_MODES, aggregate_loss, build_component
from trinity.algorithm.value_loss import ValueLossFn, compute_value_loss
from trinity.common.experience import CustomField, Experience, collate_experiences

F64 = torch.float64


def make(seed: int = 0, lengths=(4, 2, 0, 3)):
    g = torch.Generator().manual_seed(seed)
    b, t = len(lengths), max(lengths)
    logprob = -torch.rand(b, t, generator=g, dtype=F64) * 2
    ref = logprob + torch.randn(b, t, generator=g, dtype=F64) * 0.5
    mask = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
    return logprob, ref, mask


# ----------------------------------------------------------------------------- KL


def test_kl_registry_and_build():
    assert set(KL_FN.list()) >= {"none", *KL_TYPES}
    for name in KL_FN.list():
        fn = build_component(KL_FN.get(name), {"kl_coef": 0.2})
        assert isinstance(fn, KLFn) and fn.kl_coef == 0.2 and not fn.adaptive


def test_kl_estimator_values():
    lp = torch.tensor([[-1.0, -2.0]], dtype=F64)
    ref = torch.tensor([[-2.0, -1.0]], dtype=F64)
    d = lp - ref  # [1, -1]
    torch.testing.assert_close(compute_kl(lp, ref, "k1"), d)
    torch.testing.assert_close(compute_kl(lp, ref, "kl"), d)  # verl alias
    torch.testing.assert_close(compute_kl(lp, ref, "k2"), 0.5 * d**2)
    torch.testing.assert_close(compute_kl(lp, ref, "mse"), 0.5 * d**2)
    torch.testing.assert_close(compute_kl(lp, ref, "abs"), d.abs())
    k3 = torch.exp(-d) - 1 + d
    torch.testing.assert_close(compute_kl(lp, ref, "k3"), k3)
    torch.testing.assert_close(compute_kl(lp, ref, "low_var_kl"), k3)
    assert (compute_kl(*make()[:2], "k3") >= 0).all()
    with pytest.raises(ValueError, match="kl_type"):
        compute_kl(lp, ref, "k9")


def test_corrected_k3_importance_weight():
    lp = torch.tensor([[-1.0, -1.0, -1.0]], dtype=F64)
    ref = torch.tensor([[-1.5, -0.5, -1.0]], dtype=F64)
    old = torch.tensor([[-1.0, -1.0 - math.log(1.5), 0.0]], dtype=F64)  # weights 1, 1.5, e^-1
    k3 = compute_kl(lp, ref, "k3")
    fn = KL_FN.get("corrected_k3")()
    torch.testing.assert_close(fn.calculate_kl(lp, ref), k3)  # no old: plain k3
    weights = torch.tensor([[1.0, 1.5, math.exp(-1)]], dtype=F64)
    torch.testing.assert_close(fn.calculate_kl(lp, ref, old), weights * k3)
    far = torch.full_like(lp, -5.0)  # ratio e^4 clipped to 2
    torch.testing.assert_close(fn.calculate_kl(lp, ref, far), 2 * k3)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("name", KL_TYPES)
def test_kl_loss_is_weighted_aggregate(name, mode):
    lp, ref, mask = make()
    fn = KL_FN.get(name)(kl_coef=0.3)
    loss, metrics = fn.calculate_kl_loss(lp, ref, mask, mode)
    expected = aggregate_loss(compute_kl(lp, ref, name), mask, mode)
    torch.testing.assert_close(loss, 0.3 * expected)
    assert metrics == {"kl_loss": pytest.approx(expected.item()), "kl_coef": 0.3}


@pytest.mark.parametrize("name", KL_TYPES)
def test_kl_loss_empty_mask_is_zero(name):
    lp, ref, mask = make()
    lp = lp.clone().requires_grad_(True)
    loss, _ = KL_FN.get(name)(kl_coef=1.0).calculate_kl_loss(
        lp, ref, torch.zeros_like(mask), "token-mean"
    )
    loss.backward()
    assert loss.item() == 0.0 and torch.isfinite(lp.grad).all()


def test_none_kl():
    lp, ref, mask = make()
    fn = KL_FN.get("none")()
    loss, metrics = fn.calculate_kl_loss(lp, ref, mask, "token-mean")
    assert loss.item() == 0.0 and metrics == {}
    scores = torch.randn(lp.shape, dtype=F64)
    batch, metrics = fn.apply_kl_penalty_to_reward({"token_level_scores": scores})
    assert batch["token_level_rewards"] is scores and metrics == {}
    assert not fn.calculate_kl(lp, ref).any()


def test_reward_penalty_on_dict_and_dataproto_like():
    lp, ref, mask = make()
    scores = torch.zeros_like(lp)
    scores[:, -1] = 1.0
    fn = KL_FN.get("k1")(kl_coef=0.1)
    expected = scores - 0.1 * (lp - ref) * mask
    batch = {
        "token_level_scores": scores,
        "old_log_probs": lp,
        "ref_log_prob": ref,
        "response_mask": mask,
    }
    out, metrics = fn.apply_kl_penalty_to_reward(batch)
    assert out is batch
    torch.testing.assert_close(batch["token_level_rewards"], expected)
    per_row = ((lp - ref) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    assert metrics["kl"] == pytest.approx(per_row.mean().item())
    assert metrics["kl_coef"] == 0.1

    data = SimpleNamespace(batch={
        "token_level_scores": scores, "old_logprob": lp, "ref_logprob": ref, "action_mask": mask,
    })  # fmt: skip
    out, _ = fn.apply_kl_penalty_to_reward(data)
    assert out is data
    torch.testing.assert_close(data.batch["token_level_rewards"], expected)


def test_reward_penalty_on_collated_experiences():
    exps = [
        Experience(
            tokens=torch.tensor([1, 2, 3, 4, 5]), prompt_length=2, reward=1.0,
            logprobs=torch.tensor([-0.1, -0.2, -0.3]),
            token_level_reward=torch.tensor([0.0, 0.0, 1.0]),
            info={"ref": 0.0},
        ),
        Experience(
            tokens=torch.tensor([1, 2, 3]), prompt_length=2, reward=0.0,
            logprobs=torch.tensor([-0.4]), token_level_reward=torch.tensor([0.5]),
            info={"ref": 0.0},
        ),
    ]  # fmt: skip
    batch = collate_experiences(exps)
    ref = batch.logprobs + 0.5  # k1 = -0.5 on every real token
    batch.custom_fields["ref_logprob"] = ref
    scores = batch.token_level_rewards.clone()
    _, metrics = KL_FN.get("k1")(kl_coef=0.2).apply_kl_penalty_to_reward(batch)
    torch.testing.assert_close(
        batch.token_level_rewards, scores + 0.2 * 0.5 * batch.action_mask.float()
    )
    assert metrics["kl"] == pytest.approx(-0.5)
    assert isinstance(CustomField, type)  # the trainer may carry ref log-probs as a custom field


def test_reward_penalty_without_reference_and_missing_fields():
    lp, _, mask = make()
    scores = torch.ones_like(lp)
    fn = KL_FN.get("k3")(kl_coef=0.5)
    batch, metrics = fn.apply_kl_penalty_to_reward(
        {"token_level_scores": scores, "old_log_probs": lp, "response_mask": mask}
    )
    torch.testing.assert_close(batch["token_level_rewards"], scores)
    assert metrics == {"kl": 0.0, "kl_coef": 0.0}
    with pytest.raises(KeyError, match="token_level_scores"):
        fn.apply_kl_penalty_to_reward({"old_log_probs": lp, "response_mask": mask})


def test_adaptive_kl_coefficient():
    with pytest.raises(ValueError, match="target_kl"):
        KL_FN.get("k1")(adaptive=True)
    fn = KL_FN.get("k1")(adaptive=True, kl_coef=0.1, target_kl=0.1, horizon=1000)
    fn.update_kl_coef(current_kl=1.0, batch_size=100)  # error clipped to +0.2
    assert fn.kl_coef == pytest.approx(0.1 * (1 + 0.2 * 100 / 1000))
    fn.update_kl_coef(current_kl=0.09, batch_size=100)  # error -0.1
    assert fn.kl_coef == pytest.approx(0.1 * 1.02 * (1 - 0.1 * 0.1))
    fixed = KL_FN.get("k1")(kl_coef=0.1)
    fixed.update_kl_coef(current_kl=5.0, batch_size=100)
    assert fixed.kl_coef == 0.1


# ----------------------------------------------------------------------------- entropy


def test_entropy_registry_and_defaults():
    assert set(ENTROPY_LOSS_FN.list()) >= {"default", "none", "mix"}
    for name in ("default", "none", "mix"):
        assert build_component(ENTROPY_LOSS_FN.get(name), {}).entropy_coef == 0.0


def test_entropy_from_logits():
    logits = torch.randn(2, 3, 7, dtype=F64) * 4
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(entropy_from_logits(logits), -(p * p.log()).sum(-1))
    uniform = torch.zeros(1, 1, 5, dtype=F64)
    assert entropy_from_logits(uniform).item() == pytest.approx(math.log(5))


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_default_entropy_loss(mode):
    ent, _, mask = make()
    fn = build_component(ENTROPY_LOSS_FN.get("default"), {"entropy_coef": 0.01})
    loss, metrics = fn(ent, mask, loss_agg_mode=mode)
    expected = aggregate_loss(ent, mask, mode)
    torch.testing.assert_close(loss, 0.01 * expected)
    assert metrics["entropy_loss"] == pytest.approx(expected.item())
    empty, _ = fn(ent, torch.zeros_like(mask), loss_agg_mode=mode)
    assert empty.item() == 0.0


def test_mix_entropy_uses_usual_rows_only():
    ent, _, mask = make()
    expert = torch.tensor([True, False, False, True])
    fn = MixEntropyLossFn(entropy_coef=1.0)
    loss, _ = fn(ent, mask, expert_mask=expert)
    torch.testing.assert_close(loss, aggregate_loss(ent[~expert], mask[~expert]))
    loss_alias, _ = fn(ent, mask, is_expert_mask=expert)
    torch.testing.assert_close(loss_alias, loss)
    only_expert, _ = fn(ent, mask, expert_mask=torch.ones(4, dtype=torch.bool))
    assert only_expert.item() == 0.0
    with pytest.raises(ValueError, match="expert_mask"):
        fn(ent, mask)
    with pytest.raises(ValueError, match="rows"):
        fn(ent, mask, expert_mask=torch.tensor([True]))


def test_none_entropy():
    ent, _, mask = make()
    loss, metrics = DummyEntropyLossFn(entropy_coef=1.0)(ent, mask)
    assert loss.item() == 0.0 and metrics == {} and loss.dtype == F64


# ----------------------------------------------------------------------------- value loss


def test_value_loss_hand_computed():
    values = torch.tensor([[0.0, 0.0, 0.0]], dtype=F64)
    vpreds = torch.tensor([[1.0, 0.1, -1.0]], dtype=F64)
    returns = torch.tensor([[2.0, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0]], dtype=torch.bool)
    loss, clipfrac = compute_value_loss(vpreds, returns, values, mask, cliprange_value=0.5)
    # token 0: unclipped (1-2)^2 = 1, clipped (0.5-2)^2 = 2.25 -> 2.25; token 1: 0.01 both
    assert loss.item() == pytest.approx(0.5 * (2.25 + 0.01) / 2)
    assert clipfrac.item() == pytest.approx(0.5)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_value_loss_fn_and_empty_mask(mode):
    v, r, mask = make()
    vp = (v + 0.3).requires_grad_(True)
    fn = build_component(ValueLossFn, {"cliprange_value": 0.2, "loss_agg_mode": mode})
    loss, metrics = fn(vp, r, v, mask)
    ref_loss, ref_clipfrac = compute_value_loss(vp, r, v, mask, 0.2, mode)
    assert metrics == {"vf_loss": ref_loss.item(), "vf_clipfrac": ref_clipfrac.item()}
    assert 0.0 < metrics["vf_clipfrac"] < 1.0
    loss.backward()
    empty, metrics = fn(vp, r, v, torch.zeros_like(mask))
    assert empty.item() == 0.0 and metrics["vf_clipfrac"] == 0.0
