"""Rollout correction: ``trinity.algorithm.rollout_correction`` against verl 0.9.1's
``verl.trainer.ppo.rollout_corr_helper`` on the same inputs.

For every verl preset, every rejection option alone and chained, TIS / IcePop at both levels
with and without batch normalisation, and random configs (hypothesis): the IS weights, the
rejection mask and every ``rollout_corr/*`` metric are equal (same keys, values within float32
rounding). The losses that take the weights (PPO, GSPO, CISPO, REINFORCE) and verl's bypass-mode
loss agree in value and gradient.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

with warnings.catch_warnings():  # verl warns about optional engines (megatron, ...) it lacks
    warnings.simplefilter("ignore")
    helper = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    from verl.trainer.config.algorithm import RolloutCorrectionConfig as VerlConfig
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

from trinity.algorithm.policy_loss_fn.functional import (  # noqa: E402
    cispo_loss,
    gspo_loss,
    ppo_clip_loss,
)
from trinity.algorithm.rollout_correction import (  # noqa: E402
    compute_rollout_correction,
    reinforce_loss,
)
from trinity.algorithm.utils import LOSS_AGG_MODES  # noqa: E402
from trinity.common.config.rollout_correction import (  # noqa: E402
    PRESETS,
    ROLLOUT_RS_OPTIONS,
    RolloutCorrectionConfig,
)

LENGTHS = [9, 5, 1, 0, 7, 3, 9, 2]  # mixed lengths, one row without trained tokens
#: metrics: float32 values reduced in a possibly different order than verl's
MTOL = dict(rtol=1e-5, atol=1e-6)
TOL64 = dict(rtol=1e-10, atol=1e-10)


def make_inputs(
    seed: int = 0,
    noise: float = 0.3,
    dtype: torch.dtype = torch.float32,
    lengths: list[int] = LENGTHS,
    bool_mask: bool = False,
):
    """``old_log_prob, rollout_log_prob, response_mask`` ``[B, R]``, the padding filled with
    junk (the functions must ignore it)."""
    g = torch.Generator().manual_seed(seed)
    b, t = len(lengths), max(max(lengths), 1)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    rollout = old + torch.randn(b, t, generator=g, dtype=torch.float64) * noise
    mask = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
    old = torch.where(mask, old, torch.full_like(old, -7.0))
    rollout = torch.where(mask, rollout, torch.full_like(rollout, 0.5))
    return old.to(dtype), rollout.to(dtype), mask if bool_mask else mask.to(dtype)


def verl_correction(old, rollout, mask, config: RolloutCorrectionConfig):
    weights, new_mask, metrics = helper.compute_rollout_correction_and_rejection_mask(
        old_log_prob=old,
        rollout_log_prob=rollout,
        response_mask=mask,
        rollout_is=config.rollout_is,
        rollout_is_threshold=config.rollout_is_threshold,
        rollout_is_batch_normalize=config.rollout_is_batch_normalize,
        rollout_rs=config.rollout_rs,
        rollout_rs_threshold=config.rollout_rs_threshold,
    )
    return (None if weights is None else weights.batch["rollout_is_weights"]), new_mask, metrics


def assert_matches_verl(old, rollout, mask, config: RolloutCorrectionConfig) -> dict[str, float]:
    ours = compute_rollout_correction(old, rollout, mask, config)
    try:
        v_weights, v_mask, v_metrics = verl_correction(old, rollout, mask, config)
    except ZeroDivisionError:  # IcePop zeroed every weight: verl's ESS divides by 0
        assert float(ours.is_weights.abs().sum()) == 0.0
        assert ours.metrics["rollout_corr/rollout_is_eff_sample_size"] == 0.0
        return ours.metrics
    if v_weights is None:
        assert ours.is_weights is None
    else:
        torch.testing.assert_close(ours.is_weights, v_weights)
    torch.testing.assert_close(ours.response_mask, v_mask)  # dtype too
    assert sorted(ours.metrics) == sorted(v_metrics)
    expected = {k: float(v) for k, v in v_metrics.items()}
    torch.testing.assert_close(ours.metrics, expected, **MTOL)
    return ours.metrics


# ----------------------------------------------------------------------------- the presets


def test_the_presets_are_verls():
    """Same names, same values as verl's factory methods (verl's dataclass defaults the
    unset fields; every preset sets rollout_is, so our null default does not show)."""
    for name, factory in PRESETS.items():
        ours, theirs = factory(), getattr(VerlConfig, name)()
        for key in (
            "rollout_is",
            "rollout_is_threshold",
            "rollout_is_batch_normalize",
            "rollout_rs",
            "rollout_rs_threshold",
            "bypass_mode",
            "loss_type",
        ):
            assert getattr(ours, key) == getattr(theirs, key), (name, key)


@pytest.mark.parametrize("bool_mask", [False, True], ids=["float-mask", "bool-mask"])
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_match_verl(name, bool_mask):
    config = PRESETS[name]()
    # noise large enough that the Geo-RS (+-0.1%) and K3 bounds reject and keep some rows
    for seed, noise in ((0, 0.3), (1, 0.002), (2, 0.05)):
        old, rollout, mask = make_inputs(seed, noise, bool_mask=bool_mask)
        assert_matches_verl(old, rollout, mask, config)


# ----------------------------------------------------------------------------- each mode


#: per option, bounds that reject some of :func:`make_inputs` ``(3, 0.3)``'s tokens, not all
RS_THRESHOLDS = {
    "token_k1": "0.8_1.25",
    "seq_sum_k1": "0.6_1.6",
    "seq_mean_k1": "0.93_1.07",
    "seq_sum_k2": "0.5",
    "seq_sum_k3": "0.5",
    "seq_max_k2": "0.2",
    "seq_max_k3": "0.2",
}


@pytest.mark.parametrize("option", ROLLOUT_RS_OPTIONS)
def test_each_rejection_option_matches_verl(option):
    threshold = RS_THRESHOLDS.get(option, "0.05")
    config = RolloutCorrectionConfig(rollout_rs=option, rollout_rs_threshold=threshold)
    metrics = assert_matches_verl(*make_inputs(3, 0.3), config)
    # the inputs reject some tokens and keep some
    assert 0.0 < metrics["rollout_corr/rollout_rs_masked_fraction"] < 1.0


@pytest.mark.parametrize(
    "rollout_rs,threshold",
    [
        ("token_k1,seq_max_k3", "0.5_2.0,0.4"),
        ("seq_sum_k1,seq_mean_k2,token_k3", "1.5"),  # one threshold for all (k1: 1/1.5_1.5)
        ("seq_mean_k1,seq_mean_k1", 1.2),  # a duplicate counts once; a number
        (",".join(ROLLOUT_RS_OPTIONS), 1.4),
    ],
)
def test_chained_rejection_matches_verl(rollout_rs, threshold):
    config = RolloutCorrectionConfig(
        rollout_is="token", rollout_rs=rollout_rs, rollout_rs_threshold=threshold
    )
    assert_matches_verl(*make_inputs(4, 0.4), config)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("threshold", [2.0, "1.5", "0.5_2.0", "0.8_5"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_is_weights_match_verl(level, threshold, normalize, dtype):
    config = RolloutCorrectionConfig(
        rollout_is=level, rollout_is_threshold=threshold, rollout_is_batch_normalize=normalize
    )
    for seed, noise in ((5, 0.3), (6, 0.05), (7, 2.0)):
        assert_matches_verl(*make_inputs(seed, noise, dtype), config)


def test_metrics_only_and_extreme_ratios_match_verl():
    """No weights and no rejection still logs the mismatch metrics; log-ratios beyond the +-20
    safety bound do not overflow."""
    assert_matches_verl(*make_inputs(8, 0.3), RolloutCorrectionConfig())
    old, rollout, mask = make_inputs(9, 15.0)
    for level in ("token", "sequence"):
        assert_matches_verl(old, rollout, mask, RolloutCorrectionConfig(rollout_is=level))
    assert_matches_verl(
        old,
        rollout,
        mask,
        RolloutCorrectionConfig(rollout_rs="token_k3,seq_max_k2", rollout_rs_threshold="1,2"),
    )


def test_all_weights_zeroed_gives_an_ess_of_0_where_verl_raises():
    """Deliberate difference: when IcePop zeroes every weight, verl's effective sample size
    divides by zero (ZeroDivisionError); ours is 0."""
    old, rollout, mask = make_inputs(lengths=[3, 2])
    rollout = old - 3.0  # every ratio is e^3, above the IcePop window
    config = RolloutCorrectionConfig.decoupled_token_icepop()
    with pytest.raises(ZeroDivisionError):
        verl_correction(old, rollout, mask, config)
    assert_matches_verl(old, rollout, mask, config)


def test_an_empty_mask_gives_no_metrics_where_verl_raises():
    """Deliberate difference: verl raises on a batch without trained tokens (a micro-batch of
    environment tokens in bypass mode would stop training); we return the mask unchanged."""
    old, rollout, mask = make_inputs(lengths=[0, 0])
    config = RolloutCorrectionConfig.decoupled_seq_is_rs()
    with pytest.raises(ValueError):
        verl_correction(old, rollout, mask, config)
    ours = compute_rollout_correction(old, rollout, mask, config)
    assert ours.metrics == {}
    torch.testing.assert_close(ours.response_mask, mask)
    assert float(ours.is_weights.abs().sum()) == 0.0


# ----------------------------------------------------------------------------- random configs

_options = st.lists(st.sampled_from(ROLLOUT_RS_OPTIONS), min_size=0, max_size=3, unique=True)


@st.composite
def configs(draw) -> RolloutCorrectionConfig:
    level = draw(st.sampled_from([None, "token", "sequence"]))
    upper = draw(st.floats(1.05, 8.0))
    if draw(st.booleans()):
        threshold: object = f"{draw(st.floats(0.05, 0.99)):.4f}_{upper:.4f}"
    else:
        threshold = upper
    options = draw(_options)
    bounds = []
    for option in options:
        if option.endswith("k1"):
            high = draw(st.floats(1.0001, 3.0))
            bounds.append(f"{draw(st.floats(0.3, 0.9999)):.5f}_{high:.5f}")
        else:
            bounds.append(f"{draw(st.floats(0.001, 2.0)):.5f}")
    return RolloutCorrectionConfig(
        rollout_is=level,
        rollout_is_threshold=threshold,
        rollout_is_batch_normalize=draw(st.booleans()),
        rollout_rs=",".join(options) or None,
        rollout_rs_threshold=",".join(bounds) or None,
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=configs(),
    seed=st.integers(0, 10_000),
    noise=st.sampled_from([0.001, 0.05, 0.3, 1.0, 4.0]),
    lengths=st.lists(st.integers(0, 12), min_size=1, max_size=6).filter(any),
)
def test_random_configs_match_verl(config, seed, noise, lengths):
    assert_matches_verl(*make_inputs(seed, noise, lengths=lengths), config)


# ----------------------------------------------------------------------------- the losses


def actor_config(**kw) -> ActorConfig:
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, **kw)


def loss_inputs(seed: int = 0):
    """float64 ``logprob, old_logprob, advantages, mask`` and truncated token IS weights."""
    old, rollout, mask = make_inputs(seed, 0.3, torch.float64)
    g = torch.Generator().manual_seed(seed + 100)
    logprob = old + torch.randn(old.shape, generator=g, dtype=torch.float64) * 0.2
    advantages = torch.randn(old.shape[0], 1, generator=g, dtype=torch.float64).expand_as(old)
    weights = compute_rollout_correction(
        old, rollout, mask, RolloutCorrectionConfig.decoupled_token_is()
    ).is_weights
    return logprob, old, rollout, advantages.contiguous(), mask, weights


def grad_of(fn, logprob):
    lp = logprob.clone().requires_grad_(True)
    loss, metrics = fn(lp)
    (grad,) = torch.autograd.grad(loss, lp)
    return loss.detach(), metrics, grad


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize(
    "verl_name,ours",
    [
        ("vanilla", lambda lp, o, a, m, mode, w: ppo_clip_loss(
            lp, o, a, m, 0.2, 0.28, 3.0, mode, rollout_is_weights=w)),
        ("gspo", lambda lp, o, a, m, mode, w: gspo_loss(
            lp, o, a, m, 0.2, 0.28, mode, rollout_is_weights=w)),
        ("cispo", lambda lp, o, a, m, mode, w: cispo_loss(
            lp, o, a, m, 0.2, 0.28, mode, mask_truncated=False, rollout_is_weights=w)),
    ],
    ids=["ppo", "gspo", "cispo"],
)  # fmt: skip
def test_losses_weight_tokens_like_verl(verl_name, ours, mode):
    logprob, old, _, adv, mask, weights = loss_inputs()
    config = actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28, loss_agg_mode=mode)
    fn = core_algos.get_policy_loss_fn(verl_name)
    v_loss, _, v_grad = grad_of(
        lambda lp: fn(old, lp, adv, mask, mode, config, rollout_is_weights=weights), logprob
    )
    loss, _, grad = grad_of(lambda lp: ours(lp, old, adv, mask, mode, weights), logprob)
    torch.testing.assert_close(loss, v_loss, **TOL64)
    torch.testing.assert_close(grad, v_grad, **TOL64)
    unweighted = ours(logprob, old, adv, mask, mode, None)[0]
    assert not torch.allclose(loss, unweighted)  # the weights do change the loss


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_reinforce_loss_matches_verl(mode):
    logprob, _, rollout, adv, mask, weights = loss_inputs(1)
    config = actor_config(loss_agg_mode=mode)
    for w in (weights, None):
        v_loss, v_metrics, v_grad = grad_of(
            lambda lp, w=w: core_algos.compute_policy_loss_reinforce(
                rollout, lp, adv, mask, mode, config, rollout_is_weights=w
            ),
            logprob,
        )
        loss, metrics, grad = grad_of(
            lambda lp, w=w: reinforce_loss(lp, rollout, adv, mask, w, mode), logprob
        )
        torch.testing.assert_close(loss, v_loss, **TOL64)
        torch.testing.assert_close(grad, v_grad, **TOL64)
        assert float(metrics["ppo_kl"]) == pytest.approx(v_metrics["actor/ppo_kl"], abs=1e-7)


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("bypass_pg_is", {}),
        ("bypass_pg_geo_rs_token_tis", {"rs_threshold": "0.8_1.25"}),  # keeps some rows
        ("bypass_ppo_clip_k3_rs", {"rs_threshold": 0.05}),
    ],
)
def test_bypass_mode_matches_verls_bypass_loss(name, kwargs):
    """verl's ``bypass_mode`` loss = our correction from the current log-probs, then REINFORCE
    with the weights (``reinforce``) or PPO on the rejected mask without them (``ppo_clip``)."""
    config = PRESETS[name](**kwargs)
    logprob, _, rollout, adv, mask, _ = loss_inputs(2)
    verl_rc = getattr(VerlConfig, name)(**kwargs)
    actor = actor_config(
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        loss_agg_mode="token-mean",
        policy_loss=PolicyLossConfig(loss_mode="bypass_mode", rollout_correction=verl_rc),
    )
    fn = core_algos.get_policy_loss_fn("bypass_mode")
    v_loss, v_metrics, v_grad = grad_of(
        lambda lp: fn(rollout, lp, adv, mask, "token-mean", actor), logprob
    )

    def ours(lp):
        corr = compute_rollout_correction(lp.detach(), rollout, mask, config)
        if config.loss_type == "reinforce":
            loss, _ = reinforce_loss(lp, rollout, adv, corr.response_mask, corr.is_weights)
        else:
            loss, _ = ppo_clip_loss(lp, rollout, adv, corr.response_mask, 0.2, 0.28, 3.0)
        return loss, corr.metrics

    loss, metrics, grad = grad_of(ours, logprob)
    if config.rollout_rs:  # the inputs reject some tokens, not all
        assert 0.0 < metrics["rollout_corr/rollout_rs_masked_fraction"] < 1.0
    torch.testing.assert_close(loss, v_loss, **TOL64)
    torch.testing.assert_close(grad, v_grad, **TOL64)
    corr_metrics = {k: float(v) for k, v in v_metrics.items() if k.startswith("rollout_corr/")}
    torch.testing.assert_close(metrics, corr_metrics, **MTOL)
