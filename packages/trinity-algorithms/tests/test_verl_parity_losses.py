"""Numerical parity of our losses with verl 0.9.1 (``verl.trainer.ppo.core_algos``).

Random inputs with mixed response lengths and a fully masked row; every loss_agg_mode.
float64 inputs are compared at ``atol=rtol=1e-10`` unless said otherwise, float32 at 1e-6.
Gradients with respect to ``logprob`` are compared too: the stop-gradients are part of the
algorithm (GSPO, CISPO).
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch

with warnings.catch_warnings():  # verl warns about optional engines (megatron, ...) it lacks
    warnings.simplefilter("ignore")
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    verl_F = pytest.importorskip("verl.utils.torch_functional")
    from verl.workers.config.actor import ActorConfig

from trinity.algorithm.entropy_loss_fn import DefaultEntropyLossFn, entropy_from_logits  # noqa: E402
from trinity.algorithm.kl_fn import KL_FN, compute_kl  # noqa: E402
from trinity.algorithm.policy_loss_fn import (  # noqa: E402
    CISPOPolicyLossFn,
    GSPOLossFn,
    PPOPolicyLossFn,
    SAPOPolicyLossFn,
)
from trinity.algorithm.policy_loss_fn.functional import (  # noqa: E402
    cispo_loss,
    ppo_clip_loss,
    sapo_loss,
)
from trinity.algorithm.utils import LOSS_AGG_MODES, aggregate_loss  # noqa: E402
from trinity.algorithm.value_loss import compute_value_loss  # noqa: E402

TOL64 = dict(atol=1e-10, rtol=1e-10)
TOL32 = dict(atol=1e-6, rtol=1e-6)
MTOL = 1e-8  # metrics: verl divides masked means by (count + 1e-8), we by max(count, 1e-8)
LENGTHS = [9, 5, 1, 0, 7, 3]  # mixed lengths, one fully masked row


def make_inputs(dtype: torch.dtype = torch.float64, seed: int = 0, noise: float = 0.8):
    """logprob, old_logprob, advantages (one value per row, both signs), float mask."""
    g = torch.Generator().manual_seed(seed)
    b, t = len(LENGTHS), max(LENGTHS)
    logprob = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    old_logprob = logprob + torch.randn(b, t, generator=g, dtype=torch.float64) * noise
    advantages = torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, t).clone()
    advantages[0] = advantages[0].abs() + 0.5  # make sure both signs occur
    advantages[1] = -advantages[1].abs() - 0.5
    mask = (torch.arange(t)[None, :] < torch.tensor(LENGTHS)[:, None]).to(torch.float64)
    return [x.to(dtype) for x in (logprob, old_logprob, advantages, mask)]


def actor_config(**kw) -> ActorConfig:
    """An ActorConfig the way verl's own tests build one (fsdp, one micro-batch per GPU)."""
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, **kw)


def loss_and_grad(fn, logprob, *args, **kwargs):
    lp = logprob.clone().requires_grad_(True)
    loss, metrics = fn(lp, *args, **kwargs)
    (grad,) = torch.autograd.grad(loss, lp)
    return loss.detach(), metrics, grad


def verl_call(name, old_logprob, logprob, advantages, mask, mode, config):
    fn = core_algos.get_policy_loss_fn(name)
    lp = logprob.clone().requires_grad_(True)
    loss, metrics = fn(
        old_log_prob=old_logprob,
        log_prob=lp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode=mode,
        config=config,
    )
    (grad,) = torch.autograd.grad(loss, lp)
    return loss.detach(), metrics, grad


# ----------------------------------------------------------------------------- aggregation


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_aggregate_loss_matches_agg_loss(mode):
    logprob, _, _, mask = make_inputs()
    torch.testing.assert_close(
        aggregate_loss(logprob, mask, mode), core_algos.agg_loss(logprob, mask, mode), **TOL64
    )


# ----------------------------------------------------------------------------- PPO

PPO_CLIPS = [  # (clip_low, clip_high, clip_ratio_c): symmetric, DAPO clip-higher, tight dual-clip
    (0.2, 0.2, 3.0),
    (0.2, 0.28, 3.0),
    (0.1, 0.3, 1.5),
]


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("clip_low,clip_high,clip_c", PPO_CLIPS)
def test_ppo_matches_verl_vanilla(mode, clip_low, clip_high, clip_c):
    logprob, old, adv, mask = make_inputs()
    config = actor_config(
        clip_ratio=0.2,
        clip_ratio_low=clip_low,
        clip_ratio_high=clip_high,
        clip_ratio_c=clip_c,
        loss_agg_mode=mode,
    )
    v_loss, v_metrics, v_grad = verl_call("vanilla", old, logprob, adv, mask, mode, config)
    fn = PPOPolicyLossFn(
        clip_range_low=clip_low, clip_range_high=clip_high, clip_ratio_c=clip_c, loss_agg_mode=mode
    )
    loss, metrics, grad = loss_and_grad(
        lambda lp: fn(logprob=lp, old_logprob=old, action_mask=mask, advantages=adv), logprob
    )
    torch.testing.assert_close(loss, v_loss, **TOL64)
    torch.testing.assert_close(grad, v_grad, **TOL64)
    for key in ("pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"):
        assert metrics[key] == pytest.approx(v_metrics[f"actor/{key}"], abs=MTOL)
    # the inputs really exercise the clip (and the dual-clip with the tight bound)
    assert metrics["pg_clipfrac"] > 0
    if clip_c < 2:
        assert metrics["pg_clipfrac_lower"] > 0


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_ppo_matches_verl_float32(mode):
    logprob, old, adv, mask = make_inputs(torch.float32, seed=3)
    config = actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28, loss_agg_mode=mode)
    v_loss, v_metrics, v_grad = verl_call("vanilla", old, logprob, adv, mask, mode, config)
    loss, metrics, grad = loss_and_grad(
        ppo_clip_loss, logprob, old, adv, mask, 0.2, 0.28, 3.0, mode
    )
    torch.testing.assert_close(loss, v_loss, **TOL32)
    torch.testing.assert_close(grad, v_grad, **TOL32)
    assert metrics["ppo_kl"].item() == pytest.approx(v_metrics["actor/ppo_kl"], abs=1e-6)


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_ppo_matches_deprecated_compute_policy_loss(mode):
    """verl's older functional API (explicit cliprange arguments) agrees as well."""
    logprob, old, adv, mask = make_inputs(seed=5)
    v_loss, v_clipfrac, v_kl, v_lower = core_algos.compute_policy_loss(
        old, logprob, adv, mask, cliprange=0.2, cliprange_high=0.28, clip_ratio_c=3.0,
        loss_agg_mode=mode,
    )  # fmt: skip
    loss, metrics = ppo_clip_loss(logprob, old, adv, mask, 0.2, 0.28, 3.0, mode)
    torch.testing.assert_close(loss, v_loss, **TOL64)
    for ours, theirs in ((metrics["pg_clipfrac"], v_clipfrac), (metrics["ppo_kl"], v_kl)):
        assert ours.item() == pytest.approx(theirs.item(), abs=MTOL)
    assert metrics["pg_clipfrac_lower"].item() == pytest.approx(v_lower.item(), abs=MTOL)


# ----------------------------------------------------------------------------- GSPO


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("clip_low,clip_high", [(0.0003, 0.0004), (0.1, 0.2)])
def test_gspo_matches_verl(mode, clip_low, clip_high):
    logprob, old, adv, mask = make_inputs(seed=1, noise=0.05)
    config = actor_config(clip_ratio_low=clip_low, clip_ratio_high=clip_high, loss_agg_mode=mode)
    v_loss, v_metrics, v_grad = verl_call("gspo", old, logprob, adv, mask, mode, config)
    fn = GSPOLossFn(clip_range_low=clip_low, clip_range_high=clip_high, loss_agg_mode=mode)
    loss, metrics, grad = loss_and_grad(
        lambda lp: fn(logprob=lp, old_logprob=old, action_mask=mask, advantages=adv), logprob
    )
    torch.testing.assert_close(loss, v_loss, **TOL64)
    torch.testing.assert_close(grad, v_grad, **TOL64)
    assert metrics["pg_clipfrac"] == pytest.approx(v_metrics["actor/pg_clipfrac"], abs=MTOL)
    assert metrics["ppo_kl"] == pytest.approx(v_metrics["actor/ppo_kl"], abs=MTOL)


# ----------------------------------------------------------------------------- CISPO


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("clip_low,clip_high", [(1.0, 0.28), (0.2, 0.28)])
def test_cispo_unmasked_matches_verl(mode, clip_low, clip_high):
    """``mask_truncated=False`` is verl's CISPO; the default (masked) is Trinity-RFT's."""
    logprob, old, adv, mask = make_inputs(seed=2)
    config = actor_config(clip_ratio_low=clip_low, clip_ratio_high=clip_high, loss_agg_mode=mode)
    v_loss, v_metrics, v_grad = verl_call("cispo", old, logprob, adv, mask, mode, config)
    fn = CISPOPolicyLossFn(
        clip_range_low=clip_low, clip_range_high=clip_high, loss_agg_mode=mode,
        mask_truncated=False,
    )  # fmt: skip
    loss, metrics, grad = loss_and_grad(
        lambda lp: fn(logprob=lp, old_logprob=old, action_mask=mask, advantages=adv), logprob
    )
    torch.testing.assert_close(loss, v_loss, **TOL64)
    torch.testing.assert_close(grad, v_grad, **TOL64)
    assert metrics["pg_clipfrac"] == pytest.approx(v_metrics["actor/pg_clipfrac"], abs=MTOL)
    assert metrics["pg_clipfrac"] > 0


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_cispo_masked_is_trinity_formula(mode):
    """Trinity-RFT's CISPO: verl's per-token terms, zeroed where the clip and A agree."""
    logprob, old, adv, mask = make_inputs(seed=2)
    ratio = torch.exp(logprob - old)
    keep = ~(((ratio > 1.28) & (adv > 0)) | ((ratio < 0.8) & (adv < 0)))
    expected = core_algos.agg_loss(
        -torch.clamp(ratio, 0.8, 1.28) * adv * logprob * keep, mask, mode
    )
    loss, _ = cispo_loss(logprob, old, adv, mask, 0.2, 0.28, mode, mask_truncated=True)
    torch.testing.assert_close(loss, expected, **TOL64)
    assert not keep[mask.bool()].all()


# ----------------------------------------------------------------------------- SAPO


@pytest.mark.parametrize("tau_pos,tau_neg", [(1.0, 1.05), (0.5, 2.0)])
def test_sapo_matches_verl(tau_pos, tau_neg):
    """verl always aggregates SAPO with seq-mean-token-mean; compare in that mode."""
    mode = "seq-mean-token-mean"
    logprob, old, adv, mask = make_inputs(seed=4)
    config = actor_config(tau_pos=tau_pos, tau_neg=tau_neg, loss_agg_mode=mode)
    v_loss, v_metrics, v_grad = verl_call("sapo", old, logprob, adv, mask, mode, config)
    fn = SAPOPolicyLossFn(tau_pos=tau_pos, tau_neg=tau_neg, loss_agg_mode=mode)
    loss, metrics, grad = loss_and_grad(
        lambda lp: fn(logprob=lp, old_logprob=old, action_mask=mask, advantages=adv), logprob
    )
    torch.testing.assert_close(loss, v_loss, **TOL64)
    torch.testing.assert_close(grad, v_grad, **TOL64)
    assert metrics["ppo_kl"] == pytest.approx(v_metrics["actor/ppo_kl"], abs=MTOL)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_sapo_other_modes_follow_the_formula(mode):
    """In the other modes: the paper's per-token term, aggregated by verl's agg_loss."""
    logprob, old, adv, mask = make_inputs(seed=4)
    ratio = torch.exp(logprob - old)
    tau = torch.where(
        adv > 0, torch.tensor(1.0, dtype=adv.dtype), torch.tensor(1.05, dtype=adv.dtype)
    )
    expected = core_algos.agg_loss(-torch.sigmoid(tau * (ratio - 1)) * 4 / tau * adv, mask, mode)
    loss, _ = sapo_loss(logprob, old, adv, mask, 1.0, 1.05, mode)
    torch.testing.assert_close(loss, expected, **TOL64)


# ----------------------------------------------------------------------------- KL

# (ours, verl's names): verl accepts kl/k1, mse/k2, abs, low_var_kl/k3
KL_PAIRS = [
    ("k1", "kl"),
    ("k1", "k1"),
    ("k2", "mse"),
    ("k2", "k2"),
    ("abs", "abs"),
    ("low_var_kl", "low_var_kl"),
    ("low_var_kl", "k3"),
    ("k3", "k3"),  # our k3 is unclamped; equal where verl's clamps are inactive (these inputs)
]


@pytest.mark.parametrize("ours,theirs", KL_PAIRS)
def test_kl_estimators_match_verl(ours, theirs):
    logprob, ref, _, _ = make_inputs(seed=6)
    expected = core_algos.kl_penalty(logprob, ref, kl_penalty=theirs)
    torch.testing.assert_close(compute_kl(logprob, ref, ours), expected, **TOL64)
    fn = KL_FN.get(ours)()
    torch.testing.assert_close(fn.calculate_kl(logprob, ref), expected, **TOL64)


def test_low_var_kl_matches_verl_even_where_it_clamps():
    logprob = torch.tensor([[0.0, -30.0, -1.0, 0.0]], dtype=torch.float64)
    ref = torch.tensor([[-30.0, 0.0, -1.0, -15.0]], dtype=torch.float64)
    torch.testing.assert_close(
        compute_kl(logprob, ref, "low_var_kl"), core_algos.kl_penalty(logprob, ref, "low_var_kl")
    )
    # Trinity-RFT's k3 is not clamped: it departs from verl's k3 exactly there
    assert compute_kl(logprob, ref, "k3")[0, 1] > 10


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("ours,theirs", KL_PAIRS)
def test_kl_loss_matches_verl_actor(mode, ours, theirs):
    """verl's actor: ``kl_loss = agg_loss(kl_penalty(logprob, ref), mask, mode)``; loss += coef * kl."""
    logprob, ref, _, mask = make_inputs(seed=7)
    coef = 0.05
    expected = core_algos.agg_loss(core_algos.kl_penalty(logprob, ref, theirs), mask, mode)
    loss, metrics = KL_FN.get(ours)(kl_coef=coef).calculate_kl_loss(logprob, ref, mask, mode)
    torch.testing.assert_close(loss, expected * coef, **TOL64)
    assert metrics["kl_loss"] == pytest.approx(expected.item(), abs=MTOL)


class _VerlBatch(dict):
    """The parts of a TensorDict that verl's ``apply_kl_penalty`` touches."""

    @property
    def batch_size(self):
        return (next(iter(self.values())).shape[0],)


def verl_apply_kl_penalty(batch: dict, ctrl, kl_penalty: str):
    """verl's ``ray_trainer.apply_kl_penalty`` on a DataProto-like object.

    Importing ``verl.trainer.ppo.ray_trainer`` (and ``verl.DataProto``) needs packages this
    test env lacks (``cachetools``); then the function is transcribed from verl 0.9.1 using
    verl's own ``kl_penalty``, ``masked_mean`` and the controller.
    """
    data = SimpleNamespace(batch=_VerlBatch(batch))
    try:
        from verl.trainer.ppo.ray_trainer import apply_kl_penalty
    except ImportError:
        mask = data.batch["response_mask"]
        kld = core_algos.kl_penalty(
            data.batch["old_log_probs"], data.batch["ref_log_prob"], kl_penalty=kl_penalty
        )
        kld = kld * mask
        beta = ctrl.value
        rewards = data.batch["token_level_scores"] - beta * kld
        current_kl = torch.mean(verl_F.masked_mean(kld, mask=mask, axis=-1), dim=0).item()
        ctrl.update(current_kl=current_kl, n_steps=data.batch.batch_size[0])
        data.batch["token_level_rewards"] = rewards
        return data, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}
    return apply_kl_penalty(data, ctrl, kl_penalty=kl_penalty)


@pytest.mark.filterwarnings("ignore")  # importing verl's trainer warns about absent engines
@pytest.mark.parametrize("ours,theirs", KL_PAIRS)
def test_kl_reward_penalty_and_adaptive_controller_match_verl(ours, theirs):
    """Several steps of verl's ``apply_kl_penalty`` with an AdaptiveKLController."""
    fn = KL_FN.get(ours)(adaptive=True, kl_coef=0.1, target_kl=0.05, horizon=100)
    ctrl = core_algos.AdaptiveKLController(init_kl_coef=0.1, target_kl=0.05, horizon=100)
    for step in range(4):
        logprob, ref, scores, mask = make_inputs(seed=10 + step, noise=0.3)
        fields = {
            "response_mask": mask,
            "token_level_scores": scores,
            "old_log_probs": logprob,
            "ref_log_prob": ref,
        }
        data, v_metrics = verl_apply_kl_penalty(dict(fields), ctrl, theirs)
        batch, metrics = fn.apply_kl_penalty_to_reward(dict(fields))
        # after the first update the coefficients differ by verl's masked-mean epsilon (~1e-9)
        torch.testing.assert_close(
            batch["token_level_rewards"], data.batch["token_level_rewards"], atol=MTOL, rtol=MTOL
        )
        assert metrics["kl"] == pytest.approx(v_metrics["actor/reward_kl_penalty"], abs=MTOL)
        assert metrics["kl_coef"] == pytest.approx(
            v_metrics["actor/reward_kl_penalty_coeff"], rel=MTOL
        )
        assert fn.kl_coef == pytest.approx(ctrl.value, rel=MTOL)
    assert fn.kl_coef != 0.1  # the controller moved


# ----------------------------------------------------------------------------- entropy, value


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_entropy_loss_matches_verl(mode):
    g = torch.Generator().manual_seed(8)
    _, _, _, mask = make_inputs()
    logits = torch.randn(*mask.shape, 11, generator=g, dtype=torch.float64) * 3
    expected = core_algos.compute_entropy_loss(logits, mask, loss_agg_mode=mode)
    entropy = entropy_from_logits(logits)
    torch.testing.assert_close(entropy, verl_F.entropy_from_logits(logits), **TOL64)
    loss, metrics = DefaultEntropyLossFn(entropy_coef=0.01)(entropy, mask, loss_agg_mode=mode)
    torch.testing.assert_close(loss, expected * 0.01, **TOL64)
    assert metrics["entropy_loss"] == pytest.approx(expected.item(), abs=MTOL)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("cliprange_value", [0.05, 0.5])
def test_value_loss_matches_verl(mode, cliprange_value):
    g = torch.Generator().manual_seed(9)
    _, _, _, mask = make_inputs()
    values = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    vpreds = values + torch.randn(mask.shape, generator=g, dtype=torch.float64) * 0.3
    returns = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    v_loss, v_clipfrac = core_algos.compute_value_loss(
        vpreds, returns, values, mask, cliprange_value, loss_agg_mode=mode
    )
    vp = vpreds.clone().requires_grad_(True)
    loss, clipfrac = compute_value_loss(vp, returns, values, mask, cliprange_value, mode)
    vp_ref = vpreds.clone().requires_grad_(True)
    v_loss_g, _ = core_algos.compute_value_loss(
        vp_ref, returns, values, mask, cliprange_value, loss_agg_mode=mode
    )
    torch.testing.assert_close(loss, v_loss, **TOL64)
    assert clipfrac.item() == pytest.approx(v_clipfrac.item(), abs=MTOL)
    torch.testing.assert_close(
        torch.autograd.grad(loss, vp)[0], torch.autograd.grad(v_loss_g, vp_ref)[0], **TOL64
    )
