"""Rollout correction's tensor functions, their properties without verl (the parity with verl is
``packages/trinity-launcher/tests/test_rollout_correction_parity.py``).

* equal log-probs: every weight 1, nothing rejected, no mismatch;
* TIS truncates at the threshold, IcePop zeroes outside its window, batch normalisation gives
  mean 1, a sequence's weight is the same on all its tokens;
* rejection only removes tokens (whole rows for sequence filters), and exactly those out of
  bounds;
* what lies outside the mask changes nothing, even inf / nan;
* the ratio losses multiply the weights into the per-token loss; the others refuse them.
"""

from __future__ import annotations

import math

import pytest
import torch

try:  # a dev dependency: installed alone, the package runs the fixed cases and skips the property
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - exercised by tests/test_packaging.py
    given = None

from trinity.algorithm.policy_loss_fn import OPMDPolicyLossFn, PPOPolicyLossFn
from trinity.algorithm.policy_loss_fn.functional import ppo_clip_loss
from trinity.algorithm.rollout_correction import (
    METRIC_PREFIX,
    compute_rollout_correction,
    reinforce_loss,
    rollout_is_weights,
    rollout_rejection_mask,
)
from trinity.algorithm.utils import aggregate_loss
from trinity.common.config.rollout_correction import (
    PRESETS,
    ROLLOUT_RS_OPTIONS,
    RolloutCorrectionConfig,
)

LENGTHS = [6, 3, 1, 0, 5]


def make_inputs(seed: int = 0, noise: float = 0.5, lengths: list[int] = LENGTHS):
    """``old, rollout [B, R]`` float32 and the bool mask; junk in the padding."""
    g = torch.Generator().manual_seed(seed)
    b, t = len(lengths), max(max(lengths), 1)
    old = -torch.rand(b, t, generator=g) * 3
    rollout = old + torch.randn(b, t, generator=g) * noise
    mask = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
    return old.masked_fill(~mask, -9.0), rollout.masked_fill(~mask, 4.0), mask


def corr(old, rollout, mask, **config):
    return compute_rollout_correction(old, rollout, mask, RolloutCorrectionConfig(**config))


# ----------------------------------------------------------------------------- no mismatch


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_equal_logprobs_weigh_1_and_reject_nothing(name):
    old, _, mask = make_inputs()
    result = compute_rollout_correction(old, old.clone(), mask, PRESETS[name]())
    if result.is_weights is not None:
        torch.testing.assert_close(result.is_weights, mask.float())  # 1 on tokens, 0 off
    assert torch.equal(result.response_mask, mask)
    m = result.metrics
    for key in ("kl", "k3_kl", "chi2_token", "chi2_seq", "log_ppl_diff", "log_ppl_abs_diff"):
        assert m[f"{METRIC_PREFIX}{key}"] == pytest.approx(0.0, abs=1e-6), key
    assert m[f"{METRIC_PREFIX}ppl_ratio"] == pytest.approx(1.0)
    assert m[f"{METRIC_PREFIX}training_ppl"] == pytest.approx(m[f"{METRIC_PREFIX}rollout_ppl"])
    if PRESETS[name]().rollout_rs:
        assert m[f"{METRIC_PREFIX}rollout_rs_masked_fraction"] == 0.0


# ----------------------------------------------------------------------------- IS weights


@pytest.mark.parametrize("upper", [1.2, 2.0, 5.0])
def test_token_tis_truncates_at_the_threshold(upper):
    old, rollout, mask = make_inputs(noise=1.0)
    weights = corr(old, rollout, mask, rollout_is="token", rollout_is_threshold=upper).is_weights
    raw = torch.exp(old - rollout)
    expected = torch.where(mask, raw.clamp(max=upper), torch.zeros_like(raw))
    torch.testing.assert_close(weights, expected)
    assert float(weights.max()) == pytest.approx(upper)  # the inputs do exceed it
    assert not weights.requires_grad


def test_icepop_zeroes_weights_outside_its_window():
    old, rollout, mask = make_inputs(noise=1.0)
    result = corr(old, rollout, mask, rollout_is="token", rollout_is_threshold="0.5_2.0")
    raw = torch.exp(old - rollout)
    inside = (raw >= 0.5) & (raw <= 2.0) & mask
    torch.testing.assert_close(result.is_weights, torch.where(inside, raw, torch.zeros_like(raw)))
    assert 0 < inside.sum() < mask.sum()
    outside = float((~inside & mask).sum() / mask.sum())
    assert result.metrics[f"{METRIC_PREFIX}rollout_is_oob_ratio"] == pytest.approx(outside)
    assert torch.equal(result.response_mask, mask)  # IcePop keeps the mask (and denominators)


def test_sequence_weights_are_constant_per_sequence():
    old, rollout, mask = make_inputs(noise=0.2)
    weights = corr(old, rollout, mask, rollout_is="sequence", rollout_is_threshold=3.0).is_weights
    for row in range(mask.shape[0]):
        if not mask[row].any():
            assert float(weights[row].abs().sum()) == 0.0
            continue
        seq = math.exp(float((old[row] - rollout[row])[mask[row]].sum()))
        assert torch.allclose(weights[row][mask[row]], torch.tensor(min(seq, 3.0)))
        assert float(weights[row][~mask[row]].abs().sum()) == 0.0


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_batch_normalised_weights_average_1(level):
    old, rollout, mask = make_inputs(noise=0.4)
    result = corr(old, rollout, mask, rollout_is=level, rollout_is_batch_normalize=True)
    w = result.is_weights
    if level == "token":
        mean = float(w[mask].mean())
    else:  # one weight per sequence with tokens
        rows = mask.any(dim=-1)
        mean = float((w.sum(-1)[rows] / mask.sum(-1)[rows]).mean())
    assert mean == pytest.approx(1.0, rel=1e-5)
    assert result.metrics[f"{METRIC_PREFIX}rollout_is_batch_norm_factor"] > 0


def test_weights_alone():
    log_ratio = torch.tensor([[math.log(4.0), 0.0, math.log(0.25)]])
    mask = torch.tensor([[True, True, False]])
    weights, metrics = rollout_is_weights(log_ratio, mask, "token", upper=2.0)
    torch.testing.assert_close(weights, torch.tensor([[2.0, 1.0, 0.0]]))
    assert float(metrics["rollout_is_ratio_fraction_high"]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="token, sequence"):
        rollout_is_weights(log_ratio, mask, "row")


# ----------------------------------------------------------------------------- rejection


def test_token_k1_rejects_exactly_the_tokens_out_of_bounds():
    old, rollout, mask = make_inputs(noise=0.5)
    result = corr(old, rollout, mask, rollout_rs="token_k1", rollout_rs_threshold="0.6_1.5")
    inverse_ratio = torch.exp(rollout - old)  # k1 bounds pi_rollout / pi_train (verl's)
    kept = mask & (inverse_ratio >= 0.6) & (inverse_ratio <= 1.5)
    assert torch.equal(result.response_mask, kept)
    assert 0 < kept.sum() < mask.sum()
    rejected = float((mask & ~kept).sum() / mask.sum())
    assert result.metrics[f"{METRIC_PREFIX}rollout_rs_masked_fraction"] == pytest.approx(rejected)


@pytest.mark.parametrize("option", [o for o in ROLLOUT_RS_OPTIONS if o.startswith("seq")])
def test_sequence_filters_keep_or_reject_whole_sequences(option):
    old, rollout, mask = make_inputs(noise=0.3)
    threshold = "0.9_1.1" if option.endswith("k1") else "0.05"
    new = corr(old, rollout, mask, rollout_rs=option, rollout_rs_threshold=threshold)
    new = new.response_mask
    for row in range(mask.shape[0]):
        kept = new[row][mask[row]]
        assert kept.all() or not kept.any(), (option, row)


def test_rejection_only_removes_tokens_and_tighter_removes_more():
    old, rollout, mask = make_inputs(noise=0.5)
    loose = corr(old, rollout, mask, rollout_rs="token_k2,seq_max_k3", rollout_rs_threshold=0.5)
    tight = corr(old, rollout, mask, rollout_rs="token_k2,seq_max_k3", rollout_rs_threshold=0.05)
    assert not (loose.response_mask & ~mask).any()
    assert not (tight.response_mask & ~loose.response_mask).any()
    assert tight.response_mask.sum() < loose.response_mask.sum()


def test_rejection_mask_alone_keeps_the_dtype():
    log_ratio = torch.tensor([[0.0, 2.0, -2.0], [0.1, 0.1, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    new, metrics = rollout_rejection_mask(log_ratio, mask, {"token_k2": (None, 1.0)})
    torch.testing.assert_close(new, torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]))
    assert float(metrics["rollout_rs_seq_masked_fraction"]) == pytest.approx(0.5)


# ----------------------------------------------------------------------------- the mask


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_values_outside_the_mask_change_nothing(name):
    old, rollout, mask = make_inputs(noise=0.3)
    config = PRESETS[name](**({"rs_threshold": "0.5_2"} if "geo_rs" in name else {}))
    first = compute_rollout_correction(old, rollout, mask, config)
    junk_old = old.masked_fill(~mask, float("nan"))
    junk_rollout = rollout.masked_fill(~mask, float("-inf"))
    second = compute_rollout_correction(junk_old, junk_rollout, mask, config)
    if first.is_weights is not None:
        assert torch.equal(first.is_weights, second.is_weights)
        assert float(first.is_weights[~mask].abs().sum()) == 0.0
    assert torch.equal(first.response_mask, second.response_mask)
    assert first.metrics == pytest.approx(second.metrics)
    assert all(math.isfinite(v) for v in second.metrics.values())


if given is None:

    def test_properties_hold_for_random_inputs():
        pytest.skip("hypothesis is not installed (a dev dependency of the workspace)")

else:

    @settings(max_examples=50, deadline=None)
    @given(
        seed=st.integers(0, 10_000),
        noise=st.sampled_from([0.0, 0.01, 0.3, 2.0]),
        lengths=st.lists(st.integers(0, 8), min_size=1, max_size=5).filter(any),
        level=st.sampled_from(["token", "sequence"]),
        upper=st.floats(1.01, 10.0),
        options=st.lists(st.sampled_from(ROLLOUT_RS_OPTIONS), min_size=1, max_size=3, unique=True),
    )
    def test_properties_hold_for_random_inputs(seed, noise, lengths, level, upper, options):
        old, rollout, mask = make_inputs(seed, noise, lengths)
        thresholds = ",".join("0.7_1.4" if o.endswith("k1") else "0.1" for o in options)
        result = corr(
            old,
            rollout,
            mask,
            rollout_is=level,
            rollout_is_threshold=upper,
            rollout_rs=",".join(options),
            rollout_rs_threshold=thresholds,
        )
        w = result.is_weights
        assert float(w[~mask].abs().sum()) == 0.0
        assert float(w.max()) <= upper * (1 + 1e-6) and float(w.min()) >= 0.0
        assert not (result.response_mask & ~mask).any()
        if level == "sequence":
            for row in range(mask.shape[0]):
                values = w[row][mask[row]]
                assert values.numel() == 0 or torch.allclose(values, values[0].expand_as(values))
        if noise == 0.0:
            torch.testing.assert_close(w, mask.float())
            assert torch.equal(result.response_mask, mask)
        assert all(math.isfinite(v) for v in result.metrics.values())


# ----------------------------------------------------------------------------- API


def test_a_mapping_config_and_shape_errors():
    old, rollout, mask = make_inputs()
    from_mapping = compute_rollout_correction(old, rollout, mask, {"rollout_is": "token"})
    assert from_mapping.is_weights is not None
    assert all(k.startswith(METRIC_PREFIX) for k in from_mapping.metrics)
    with pytest.raises(ValueError, match="same shape"):
        compute_rollout_correction(old, rollout[:, :-1], mask, {"rollout_is": "token"})


def test_reinforce_loss_weights_each_tokens_gradient():
    old, rollout, mask = make_inputs(noise=0.3)
    advantages = torch.randn(old.shape, generator=torch.Generator().manual_seed(1))
    weights = corr(old, rollout, mask, rollout_is="token").is_weights
    logprob = old.clone().requires_grad_(True)
    loss, metrics = reinforce_loss(logprob, rollout, advantages, mask, weights)
    (grad,) = torch.autograd.grad(loss, logprob)
    expected = torch.where(mask, -advantages * weights / mask.sum(), torch.zeros_like(old))
    torch.testing.assert_close(grad, expected)
    assert float(metrics["ppo_kl"]) == pytest.approx(float((rollout - old)[mask].mean()), rel=1e-5)


def test_ratio_losses_multiply_the_weights_in():
    old, rollout, mask = make_inputs(noise=0.3)
    logprob = old + 0.1
    advantages = torch.ones_like(old)
    weights = corr(old, rollout, mask, rollout_is="token").is_weights
    plain, _ = ppo_clip_loss(logprob, old, advantages, mask)
    ones, _ = ppo_clip_loss(logprob, old, advantages, mask, rollout_is_weights=mask.float())
    weighted, _ = ppo_clip_loss(logprob, old, advantages, mask, rollout_is_weights=weights)
    torch.testing.assert_close(ones, plain)
    ratio = torch.exp(logprob - old).clamp(0.8, 1.2)
    torch.testing.assert_close(weighted, aggregate_loss(-ratio * weights, mask))

    loss_fn = PPOPolicyLossFn(clip_range=0.2)
    batch = {"old_logprob": old, "action_mask": mask, "advantages": advantages}
    assert loss_fn.accepts_rollout_is_weights
    via_compute, _ = loss_fn.compute(logprob, batch, rollout_is_weights=weights)
    torch.testing.assert_close(via_compute, weighted)

    opmd = OPMDPolicyLossFn()
    assert not opmd.accepts_rollout_is_weights
    with pytest.raises(ValueError, match="cannot apply rollout-correction IS weights"):
        opmd.compute(logprob, batch, rollout_is_weights=weights)
