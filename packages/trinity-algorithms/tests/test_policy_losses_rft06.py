"""The policy losses of Trinity-RFT 0.6 besides the core ones (``sft_is``, ``sft_phi``,
``sppo``, ``rec``, ``mix_chord``) and ``m2po``.

Expected values are written from the published formulas by hand (``math`` on one or two rows
of tokens), never from the implementation; then gradients, masking and argument validation.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from trinity.algorithm import resolve_algorithm
from trinity.algorithm.policy_loss_fn import (
    POLICY_LOSS_FN,
    M2POPolicyLossFn,
    MIXCHORDPolicyLossFn,
    RECPolicyLossFn,
    SFTISLossFn,
    SFTPhiLossFn,
    SPPOPolicyLossFn,
)
from trinity.algorithm.policy_loss_fn.functional import chord_mu, m2po_mask
from trinity.algorithm.utils import build_component
from trinity.common.config import ConfigError

F64 = torch.float64


def row(*values: float) -> Tensor:
    return torch.tensor([list(values)], dtype=F64)


def ratios(*rs: float) -> tuple[Tensor, Tensor]:
    """``(logprob, old_logprob)`` of one row whose token ratios are ``rs`` (old = 0)."""
    lp = row(*(math.log(r) for r in rs))
    return lp, torch.zeros_like(lp)


def grad_of(fn, lp: Tensor, **fields) -> tuple[Tensor, Tensor, dict]:
    leaf = lp.clone().requires_grad_(True)
    loss, metrics = fn(leaf, **fields)
    loss.backward()
    return loss.detach(), leaf.grad, metrics


def test_registry_defaults_and_select_keys():
    expected = {
        "sft_is": ["action_mask"],
        "sft_phi": ["action_mask"],
        "sppo": ["old_logprob", "action_mask", "advantages"],
        "rec": ["old_logprob", "action_mask", "advantages"],
        "m2po": ["old_logprob", "action_mask", "advantages"],
        "mix_chord": ["old_logprob", "action_mask", "advantages", "expert_mask", "step"],
    }
    for name, keys in expected.items():
        assert build_component(POLICY_LOSS_FN.get(name)).select_keys == keys, name
    assert SFTPhiLossFn.default_args() == {"loss_agg_mode": "token-mean", "cutoff_prob": 1.0}
    assert SPPOPolicyLossFn.default_args() == {"epsilon": 0.3, "loss_agg_mode": "token-mean"}
    rec = RECPolicyLossFn.default_args()
    assert (rec["epsilon_low_prime"], rec["epsilon_high_prime"]) == (0.6, 2)  # Trinity-RFT's
    assert M2POPolicyLossFn.default_args()["m2_threshold"] == 0.04
    assert MIXCHORDPolicyLossFn.default_args()["enable_phi_function"] is True


# ------------------------------------------------------------------------- SFT variants


def test_sft_is_by_hand():
    lp = row(math.log(0.5), math.log(0.25))
    mask = torch.ones_like(lp, dtype=torch.bool)
    loss, grad, metrics = grad_of(SFTISLossFn(), lp, action_mask=mask)
    expected = (0.5 * math.log(2) + 0.25 * math.log(4)) / 2  # mean of -p * log p
    assert loss.item() == pytest.approx(expected)
    assert grad.tolist() == [pytest.approx([-0.25, -0.125])]  # -sg(p) / n_tokens
    assert metrics["sft_is_loss"] == pytest.approx(expected)


def test_sft_phi_by_hand_and_cutoff():
    lp = row(math.log(0.5), math.log(0.25))
    mask = torch.ones_like(lp, dtype=torch.bool)
    phi = [0.5 * 0.5, 0.25 * 0.75]
    loss, grad, metrics = grad_of(SFTPhiLossFn(), lp, action_mask=mask)
    assert loss.item() == pytest.approx((phi[0] * math.log(2) + phi[1] * math.log(4)) / 2)
    assert grad.tolist() == [pytest.approx([-phi[0] / 2, -phi[1] / 2])]
    assert metrics["sft_phi_loss"] == pytest.approx(loss.item())
    # cutoff 0.4: the first token's log-prob is capped at log 0.4 (no gradient), same weight
    loss, grad, _ = grad_of(SFTPhiLossFn(cutoff_prob=0.4), lp, action_mask=mask)
    assert loss.item() == pytest.approx((-phi[0] * math.log(0.4) + phi[1] * math.log(4)) / 2)
    assert grad.tolist() == [pytest.approx([0.0, -phi[1] / 2])]
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="cutoff_prob"):
            SFTPhiLossFn(cutoff_prob=bad)


# ----------------------------------------------------------------------------------- sPPO


def test_sppo_by_hand():
    lp, old = ratios(1.2, 1.5, 0.7, 0.8)  # eps 0.3: range [1/1.3, 1.3] keeps 1.2 and 0.8
    adv = row(1.0, 1.0, -1.0, 2.0)
    mask = torch.ones_like(lp, dtype=torch.bool)
    fn = SPPOPolicyLossFn()
    loss, grad, metrics = grad_of(fn, lp, old_logprob=old, action_mask=mask, advantages=adv)
    assert loss.item() == pytest.approx((-math.log(1.2) - 2 * math.log(0.8)) / 4)
    assert grad.tolist() == [pytest.approx([-0.25, 0.0, 0.0, -0.5])]
    assert metrics["pg_clipfrac"] == 0.5 and metrics["pg_loss"] == pytest.approx(loss.item())
    with pytest.raises(ValueError, match="epsilon"):
        SPPOPolicyLossFn(epsilon=0.0)


# ------------------------------------------------------------------------------------ REC

R4, A4 = (1.5, 0.5, 1.1, 0.9), (1.0, -1.0, 1.0, -1.0)


def rec(rs=R4, advs=A4, **args) -> tuple[float, Tensor, dict]:
    lp, old = ratios(*rs)
    fn = RECPolicyLossFn(**args)
    mask = torch.ones_like(lp, dtype=torch.bool)
    loss, grad, metrics = grad_of(fn, lp, old_logprob=old, action_mask=mask, advantages=row(*advs))
    return loss.item(), grad, metrics


def rec_expected(keep, rs=R4, advs=A4, weights=None) -> float:
    weights = weights or [1.0] * len(rs)
    terms = [-a * w * math.log(r) * k for r, a, w, k in zip(rs, advs, weights, keep, strict=True)]
    return sum(terms) / len(rs)


@pytest.mark.parametrize(
    "clip_mode, keep",
    [
        ("none", [1, 1, 1, 1]),
        ("two-side", [0, 0, 1, 1]),  # [0.8, 1.2]
        ("one-side", [0, 0, 1, 1]),  # A > 0 cut above 1.2, A < 0 cut below 0.8
    ],
)
def test_rec_clip_modes_by_hand(clip_mode, keep):
    loss, grad, metrics = rec(clip_mode=clip_mode)
    assert loss == pytest.approx(rec_expected(keep))
    assert grad.tolist() == [pytest.approx([-a * k / 4 for a, k in zip(A4, keep, strict=True)])]
    assert metrics["pg_clipfrac"] == pytest.approx(1 - sum(keep) / 4)


def test_rec_one_side_ring_and_gspo_one_side_differ_where_they_should():
    rs, advs = (0.5, 1.5, 0.3, 3.5), (1.0, -1.0, 1.0, -1.0)
    # one-side keeps ratios moving back towards 1: all four here
    assert rec(rs, advs, clip_mode="one-side")[0] == pytest.approx(rec_expected([1] * 4, rs, advs))
    assert rec(rs, advs, clip_mode="two-side")[0] == 0.0
    # ring (low' 0.6, high' 2): A > 0 with r <= 0.4, A < 0 with r >= 3
    loss = rec(rs, advs, clip_mode="ring")[0]
    assert loss == pytest.approx(rec_expected([0, 0, 1, 1], rs, advs))
    # gspo-one-side: one sequence ratio exp(mean log r) for every token, seq-mean-token-mean
    seq = math.exp(sum(math.log(r) for r in rs) / 4)
    keep = [int(seq <= 1.2) if a > 0 else int(seq >= 0.8) for a in advs]
    fn = RECPolicyLossFn(clip_mode="gspo-one-side")
    assert fn.loss_agg_mode == "seq-mean-token-mean"
    assert rec(rs, advs, clip_mode="gspo-one-side")[0] == pytest.approx(
        rec_expected(keep, rs, advs)
    )


def test_rec_weights_and_regularizers_by_hand():
    loss, grad, _ = rec(weight="importance_sampling")
    assert loss == pytest.approx(rec_expected([1] * 4, weights=list(R4)))
    assert grad.tolist() == [pytest.approx([-a * r / 4 for a, r in zip(A4, R4, strict=True)])]
    seq = math.exp(sum(math.log(r) for r in R4) / 4)
    loss, _, _ = rec(weight="gspo_importance_sampling")
    assert loss == pytest.approx(rec_expected([1] * 4, weights=[seq] * 4))
    loss, _, _ = rec(weight="advantage", temp=2.0)
    assert loss == pytest.approx(rec_expected([1] * 4, weights=[math.exp(a / 2) for a in A4]))
    plain = rec_expected([1] * 4)
    loss, _, _ = rec(regularizer="forward-kl", regularizer_coef=0.5)
    assert loss == pytest.approx(plain - 0.5 * sum(math.log(r) for r in R4) / 4)
    loss, grad, _ = rec(regularizer="k2", regularizer_coef=0.5)
    assert loss == pytest.approx(plain + 0.5 * sum(math.log(r) ** 2 for r in R4) / 4)
    k2 = [(-a + 0.5 * 2 * math.log(r)) / 4 for a, r in zip(A4, R4, strict=True)]
    assert grad.tolist() == [pytest.approx(k2)]


@pytest.mark.parametrize(
    "args, name",
    [
        ({"epsilon_low": 0.0}, "epsilon_low"),
        ({"epsilon_low": 1.5}, "epsilon_low"),
        ({"epsilon_high": -0.1}, "epsilon_high"),
        ({"epsilon_low_prime": 2.0}, "epsilon_low_prime"),
        ({"clip_mode": "both"}, "clip_mode"),
        ({"weight": "ratio"}, "weight"),
        ({"regularizer": "kl"}, "regularizer"),
        ({"regularizer_coef": -1.0}, "regularizer_coef"),
        ({"temp": 0.0}, "temp"),
    ],
)
def test_rec_bad_arguments_name_the_argument(args, name):
    with pytest.raises(ValueError, match=name):
        RECPolicyLossFn(**args)


# ----------------------------------------------------------------------------------- M2PO


def m2po_row(threshold=0.04, trust_region_only=True):
    lr = [0.1, 0.2, 0.5, -0.3]
    lp = row(*lr)
    fn = M2POPolicyLossFn(m2_threshold=threshold, trust_region_only=trust_region_only)
    mask = torch.ones_like(lp, dtype=torch.bool)
    return lr, grad_of(fn, lp, old_logprob=torch.zeros_like(lp), action_mask=mask,
                       advantages=torch.ones_like(lp))  # fmt: skip


def test_m2po_masks_the_largest_second_moments_of_the_trust_region():
    # A > 0: the trust region is r > 1 (log r 0.1, 0.2, 0.5); M2 = 0.30 / 3 = 0.1 > 0.04,
    # dropping 0.5^2 leaves 0.05 / 2 = 0.025 <= 0.04; the r < 1 token is not constrained
    lr, (loss, grad, metrics) = m2po_row()
    kept = [math.exp(lr[0]), math.exp(lr[1]), 0.0, math.exp(lr[3])]
    assert loss.item() == pytest.approx(-sum(kept) / 4)  # all 4 tokens in the denominator
    assert grad.tolist() == [pytest.approx([-k / 4 for k in kept])]
    assert metrics["m2_before"] == pytest.approx(0.1)
    assert metrics["m2_after"] == pytest.approx(0.025)
    assert metrics["masked_fraction"] == 0.25 and metrics["trust_region_fraction"] == 0.75


def test_m2po_over_every_token_and_thresholds():
    # all four: 0.39 / 4 > 0.04 -> drop 0.25: 0.14 / 3 > 0.04 -> drop 0.09: 0.05 / 2 = 0.025
    lr, (loss, _, metrics) = m2po_row(trust_region_only=False)
    assert loss.item() == pytest.approx(-(math.exp(lr[0]) + math.exp(lr[1])) / 4)
    assert metrics["masked_fraction"] == 0.5 and metrics["m2_after"] == pytest.approx(0.025)
    lr, (loss, _, metrics) = m2po_row(threshold=1.0)  # nothing to drop: plain IS loss
    assert loss.item() == pytest.approx(-sum(math.exp(v) for v in lr) / 4)
    assert metrics["masked_fraction"] == 0.0
    lr, (loss, _, metrics) = m2po_row(threshold=0.0)  # every constrained token goes
    assert loss.item() == pytest.approx(-math.exp(lr[3]) / 4)
    assert metrics["m2_after"] == 0.0


def test_m2po_mask_ignores_masked_tokens_and_validates():
    lr = row(3.0, 0.1, 0.1)
    keep, metrics = m2po_mask(lr, torch.ones_like(lr), torch.tensor([[0, 1, 1]]), 0.04, True)
    assert keep.tolist() == [[True, True, True]] and float(metrics["m2_before"]) == pytest.approx(
        0.01
    )
    keep, metrics = m2po_mask(lr, torch.ones_like(lr), torch.zeros(1, 3), 0.04, True)
    assert float(metrics["masked_fraction"]) == 0.0 and float(metrics["m2_before"]) == 0.0
    for bad in (-0.1, math.inf):
        with pytest.raises(ValueError, match="m2_threshold"):
            M2POPolicyLossFn(m2_threshold=bad)


# ------------------------------------------------------------------------------ MIX CHORD


@pytest.mark.parametrize(
    "step, expected",
    [(0, 0.0), (2, 0.25), (4, 0.5), (6, 0.1 + 0.4 * 0.5 * (1 + math.cos(math.pi / 2))), (8, 0.1)],
)
def test_chord_mu_schedule(step, expected):
    assert chord_mu(step, 4, 4, 0.5, 0.1) == pytest.approx(expected)
    assert chord_mu(step, 0, 0, 0.5, 0.1) == 0.1  # no warm-up, no decay: the valley


def chord_batch(step: int = 2) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(4, 5, generator=g, dtype=F64) * 2
    return {
        "logprob": lp,
        "old_logprob": lp + torch.randn(4, 5, generator=g, dtype=F64) * 0.2,
        "advantages": torch.randn(4, 1, generator=g, dtype=F64).expand(4, 5).clone(),
        "action_mask": torch.arange(5)[None, :] < torch.tensor([5, 3, 4, 2])[:, None],
        "expert_mask": torch.tensor([False, True, False, True]),
        "step": torch.full((4,), step, dtype=torch.int32),
    }


@pytest.mark.parametrize("phi", [True, False])
def test_mix_chord_is_the_scheduled_mix_of_ppo_and_sft_phi(phi):
    batch = chord_batch(step=2)
    fn = MIXCHORDPolicyLossFn(
        mu_warmup_steps=4, mu_decay_steps=4, mu_peak=0.5, clip_range=0.2, enable_phi_function=phi
    )
    loss, metrics = fn.compute(batch["logprob"], batch)
    usual, expert = ~batch["expert_mask"], batch["expert_mask"]
    ppo = POLICY_LOSS_FN.get("ppo")(clip_range=0.2)
    ppo_loss, _ = ppo(
        batch["logprob"][usual], batch["old_logprob"][usual], batch["action_mask"][usual],
        batch["advantages"][usual],
    )  # fmt: skip
    sft = SFTPhiLossFn() if phi else POLICY_LOSS_FN.get("sft")()
    sft_loss, _ = sft(batch["logprob"][expert], batch["action_mask"][expert])
    torch.testing.assert_close(loss, 0.75 * ppo_loss + 0.25 * sft_loss)  # mu(2) = 0.25
    assert metrics["mu"] == 0.25 and metrics["loss"] == pytest.approx(loss.item())
    assert ("expert/sft_phi_loss" in metrics) is phi


def test_mix_chord_step_field():
    batch = chord_batch()
    fn = MIXCHORDPolicyLossFn(mu_warmup_steps=4, clip_range=0.2)
    batch["step"] = torch.tensor([2, 2, 3, 2])
    with pytest.raises(ValueError, match="same step"):
        fn.compute(batch["logprob"], batch)
    del batch["step"]
    with pytest.raises(KeyError, match="step"):
        fn.compute(batch["logprob"], batch)
    args = [batch[k] for k in ("logprob", "old_logprob", "action_mask", "advantages")]
    with pytest.raises(ValueError, match="step"):
        fn(*args, expert_mask=batch["expert_mask"])
    # the default schedule is constant (mu_valley) and needs no step
    _, metrics = MIXCHORDPolicyLossFn(clip_range=0.2)(*args, expert_mask=batch["expert_mask"])
    assert metrics["mu"] == 0.1
    with pytest.raises(ValueError, match="mu_peak"):
        MIXCHORDPolicyLossFn(mu_peak=1.5, clip_range=0.2)
    with pytest.raises(ValueError, match="mu_warmup_steps"):
        MIXCHORDPolicyLossFn(mu_warmup_steps=-1, clip_range=0.2)


# ---------------------------------------------------------------------- config validation


@pytest.mark.parametrize(
    "name, args, path, expected",
    [
        ("m2po", {"m2_threshold": -1.0}, "m2_threshold", ">= 0"),
        ("sppo", {"epsilon": 0.0}, "epsilon", "> 0"),
        ("rec", {"clip_mode": "both"}, "clip_mode", "one-side"),
        ("rec", {"epsilon_low": 1.5}, "epsilon_low", "<= 1"),
        ("sft_phi", {"cutoff_prob": 0.0}, "cutoff_prob", "> 0"),
        ("mix_chord", {"mu_peak": 2.0}, "mu_peak", "<= 1"),
        ("mix_chord", {"mu_decay_steps": -1}, "mu_decay_steps", ">= 0"),
    ],
)
def test_config_arguments_are_checked(name, args, path, expected):
    config = {"algorithm_type": "grpo", "policy_loss_fn": name, "policy_loss_fn_args": args}
    with pytest.raises(ConfigError) as info:
        resolve_algorithm(config)
    issues = [i for i in info.value.errors if i.path == f"algorithm.policy_loss_fn_args.{path}"]
    assert issues, [str(i) for i in info.value.errors]
    assert expected in issues[0].message, issues[0].message


def test_rec_loss_agg_mode_in_a_config():
    resolved = resolve_algorithm({"algorithm_type": "grpo", "policy_loss_fn": "rec"})
    assert resolved.build_policy_loss_fn().loss_agg_mode == "token-mean"
    resolved = resolve_algorithm(
        {
            "algorithm_type": "grpo",
            "policy_loss_fn": "rec",
            "policy_loss_fn_args": {"clip_mode": "gspo-one-side"},
        }
    )
    assert resolved.build_policy_loss_fn().loss_agg_mode == "seq-mean-token-mean"
