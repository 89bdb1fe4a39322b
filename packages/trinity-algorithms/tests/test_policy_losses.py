"""Behaviour of the registered policy losses: registry, construction, formulas, edge cases."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from trinity.algorithm.policy_loss_fn import (
    POLICY_LOSS_FN,
    CISPOPolicyLossFn,
    DPOLossFn,
    GSPOLossFn,
    ImportanceSamplingLossFn,
    MIXPolicyLossFn,
    PolicyLossFn,
    PPOPolicyLossFn,
    SAPOPolicyLossFn,
    SFTLossFn,
    TOPRPolicyLossFn,
)
from trinity.algorithm.policy_loss_fn.functional import (
    gspo_loss,
    ppo_clip_loss,
)
from trinity.algorithm.utils import LOSS_AGG_MODES, aggregate_loss, build_component, masked_loss
from trinity.common.experience import Experience, collate_experiences

EXPECTED_KEYS = {
    "ppo": ["old_logprob", "action_mask", "advantages"],
    "opmd": ["action_mask", "advantages"],
    "gspo": ["old_logprob", "action_mask", "advantages"],
    "cispo": ["old_logprob", "action_mask", "advantages"],
    "topr": ["old_logprob", "action_mask", "advantages"],
    "sapo": ["old_logprob", "action_mask", "advantages"],
    "dpo": ["ref_logprob", "action_mask"],
    "sft": ["action_mask"],
    "mix": ["old_logprob", "action_mask", "advantages", "expert_mask"],
    "importance_sampling": ["old_logprob", "action_mask", "advantages"],
    "sft_is": ["action_mask"],
    "sft_phi": ["action_mask"],
    "sppo": ["old_logprob", "action_mask", "advantages"],
    "rec": ["old_logprob", "action_mask", "advantages"],
    "m2po": ["old_logprob", "action_mask", "advantages"],
    "mix_chord": ["old_logprob", "action_mask", "advantages", "expert_mask", "step"],
}
LENGTHS = [6, 3, 1, 5]


def make_batch(lengths=LENGTHS, seed: int = 0, dtype=torch.float64) -> dict[str, Tensor]:
    """Every field any built-in loss asks for, ``[batch, max(lengths)]``, bool action mask."""
    g = torch.Generator().manual_seed(seed)
    b, t = len(lengths), max(max(lengths), 1)
    logprob = -torch.rand(b, t, generator=g, dtype=dtype) * 2
    return {
        "logprob": logprob,
        "old_logprob": logprob + torch.randn(b, t, generator=g, dtype=dtype) * 0.3,
        "ref_logprob": logprob + torch.randn(b, t, generator=g, dtype=dtype) * 0.3,
        "advantages": torch.randn(b, 1, generator=g, dtype=dtype).expand(b, t).clone(),
        "action_mask": torch.arange(t)[None, :] < torch.tensor(lengths)[:, None],
        "expert_mask": torch.arange(b) % 2 == 1,
        "step": torch.full((b,), 3, dtype=torch.int32),
    }


def build(name: str, **args) -> PolicyLossFn:
    return build_component(POLICY_LOSS_FN.get(name), args)


def run(fn: PolicyLossFn, batch: dict[str, Tensor]) -> tuple[Tensor, dict]:
    return fn.compute(batch["logprob"], batch)


# ----------------------------------------------------------------------------- registry


def test_registered_names_and_select_keys():
    assert set(EXPECTED_KEYS) <= set(POLICY_LOSS_FN.list())
    for name, keys in EXPECTED_KEYS.items():
        fn = build(name)
        assert fn.select_keys == keys, name


@pytest.mark.parametrize("name", sorted(EXPECTED_KEYS))
def test_every_loss_runs_with_defaults_and_returns_float_metrics(name):
    batch = make_batch()
    lp = batch["logprob"].clone().requires_grad_(True)
    loss, metrics = build(name).compute(lp, batch)
    assert loss.shape == () and torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(lp.grad).all()
    assert metrics and all(type(v) is float for v in metrics.values())


def test_compute_ignores_extra_fields_and_names_missing_ones():
    batch = make_batch()
    batch["unrelated"] = torch.zeros(3)
    build("ppo").compute(batch["logprob"], batch)
    del batch["advantages"]
    with pytest.raises(KeyError, match="advantages"):
        build("ppo").compute(batch["logprob"], batch)


def test_trinity_rft_defaults():
    ppo = build("ppo")
    assert (ppo.clip_range_low, ppo.clip_range_high, ppo.clip_ratio_c) == (0.2, 0.2, 3.0)
    assert ppo.loss_agg_mode == "token-mean"
    gspo = build("gspo")
    assert (gspo.clip_range_low, gspo.clip_range_high) == (0.0003, 0.0004)
    assert gspo.loss_agg_mode == "seq-mean-token-mean"
    cispo = build("cispo")
    assert (cispo.clip_range_low, cispo.clip_range_high) == (1.0, 0.28)
    assert (build("sapo").tau_pos, build("sapo").tau_neg) == (1.0, 1.05)
    assert build("opmd").tau == 1.0 and build("topr").advantage_threshold == 0.0
    assert (build("dpo").beta, build("dpo").label_smoothing) == (0.1, 0.0)
    assert build("mix").mu == 0.1


def test_clip_range_fallbacks_and_errors():
    fn = PPOPolicyLossFn(clip_range=0.2, clip_range_high=0.28)  # DAPO clip-higher
    assert (fn.clip_range_low, fn.clip_range_high) == (0.2, 0.28)
    with pytest.raises(ValueError, match="clip_range"):
        PPOPolicyLossFn()
    with pytest.raises(ValueError, match="clip_ratio_c"):
        PPOPolicyLossFn(clip_range=0.2, clip_ratio_c=1.0)
    with pytest.raises(ValueError, match="clip_range"):
        GSPOLossFn(clip_range_low=0.1)
    with pytest.raises(ValueError, match="tau_neg"):
        SAPOPolicyLossFn(tau_pos=2.0, tau_neg=1.0)


def test_unknown_config_args_become_attributes():
    fn = build("ppo", clip_range=0.1, some_trainer_setting=7)
    assert fn.clip_range_low == 0.1 and fn.some_trainer_setting == 7


# ----------------------------------------------------------------------------- edge cases


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("name", sorted(EXPECTED_KEYS))
def test_empty_action_mask_gives_zero_loss_no_nan(name, mode):
    batch = make_batch()
    batch["action_mask"] = torch.zeros_like(batch["action_mask"])
    lp = batch["logprob"].clone().requires_grad_(True)
    fn = build(name, loss_agg_mode=mode) if name != "dpo" else build(name)
    loss, metrics = fn.compute(lp, batch)
    loss.backward()
    assert torch.isfinite(lp.grad).all() and not lp.grad.abs().sum()
    assert all(math.isfinite(v) for v in metrics.values())
    if name == "dpo":
        assert loss.item() == pytest.approx(math.log(2))  # every pair has log-ratio 0
    else:
        assert loss.item() == 0.0


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("name", sorted(set(EXPECTED_KEYS) - {"dpo", "mix", "mix_chord"}))
def test_fully_masked_rows_and_padding_values_do_not_count(name, mode):
    """A fully masked row (any values) and the padding of shorter rows leave the loss as is."""
    batch = make_batch()
    fn = build(name, loss_agg_mode=mode)
    loss, _ = run(fn, batch)

    noisy = {k: v.clone() for k, v in batch.items()}
    pad = ~noisy["action_mask"]
    for key in ("logprob", "old_logprob", "ref_logprob", "advantages"):
        noisy[key][pad] = torch.randn(int(pad.sum()), dtype=noisy[key].dtype) * 5
    extra = make_batch(lengths=[max(LENGTHS)], seed=9)
    extra["action_mask"][:] = False
    extra["expert_mask"][:] = False
    padded = {k: torch.cat([noisy[k], extra[k]]) for k in batch}
    if mode == "seq-mean-token-sum-norm":  # normalizer is response_len: same width, same value
        assert padded["logprob"].shape[-1] == batch["logprob"].shape[-1]
    loss2, _ = run(fn, padded)
    torch.testing.assert_close(loss2, loss, atol=1e-12, rtol=1e-12)


def test_mixed_lengths_seq_modes_weight_sequences_not_tokens():
    """token-mean weighs long rows more; seq-mean-token-mean weighs every row equally."""
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    logprob = torch.tensor([[-1.0] * 4, [-3.0, 0, 0, 0]], dtype=torch.float64)
    assert SFTLossFn()(logprob, mask)[0].item() == pytest.approx(7 / 5)
    fn = SFTLossFn(loss_agg_mode="seq-mean-token-mean")
    assert fn(logprob, mask)[0].item() == pytest.approx(2.0)
    assert SFTLossFn(use_token_level_loss=False).loss_agg_mode == "seq-mean-token-mean"


def test_float32_and_bool_or_float_masks_agree():
    batch = make_batch(dtype=torch.float32)
    fn = build("ppo")
    loss_bool, _ = run(fn, batch)
    batch["action_mask"] = batch["action_mask"].float()
    loss_float, _ = run(fn, batch)
    assert loss_bool.dtype == torch.float32
    torch.testing.assert_close(loss_bool, loss_float)


# ----------------------------------------------------------------------------- PPO


def _one_token(ratio: float, adv: float) -> tuple[Tensor, ...]:
    old = torch.zeros(1, 1, dtype=torch.float64)
    return torch.full_like(old, math.log(ratio)), old, torch.full_like(old, adv)


@pytest.mark.parametrize(
    "ratio,adv,expected",
    [
        (1.1, 1.0, -1.1),  # inside the range: -A * r
        (1.5, 1.0, -1.28),  # clip-higher: capped at 1 + 0.28
        (0.5, 1.0, -0.5),  # A > 0 and r small: unclipped (max picks -A * r)
        (0.5, -1.0, 0.8),  # A < 0 and r < 1 - 0.2: clipped to 1 - 0.2
        (2.0, -1.0, 2.0),  # A < 0, r large, below dual-clip c = 3
        (10.0, -1.0, 3.0),  # dual-clip: loss capped at -A * c
    ],
)
def test_ppo_clip_clip_higher_dual_clip(ratio, adv, expected):
    lp, old, a = _one_token(ratio, adv)
    mask = torch.ones_like(lp, dtype=torch.bool)
    loss, metrics = ppo_clip_loss(lp, old, a, mask, clip_low=0.2, clip_high=0.28, clip_ratio_c=3.0)
    assert loss.item() == pytest.approx(expected)
    assert metrics["pg_clipfrac_lower"].item() == (1.0 if ratio == 10.0 else 0.0)


def test_ppo_without_dual_clip():
    lp, old, a = _one_token(10.0, -1.0)
    loss, _ = ppo_clip_loss(lp, old, a, torch.ones_like(lp), 0.2, 0.2, clip_ratio_c=None)
    assert loss.item() == pytest.approx(10.0)


def test_ppo_sequence_masking_drops_negative_tokens_of_high_kl_sequences():
    old = torch.zeros(2, 2, dtype=torch.float64)
    logprob = torch.tensor([[-1.0, -1.0], [0.0, 0.0]], dtype=torch.float64)  # row 0: KL = 1
    adv = torch.tensor([[-1.0, -1.0], [-1.0, -1.0]], dtype=torch.float64)
    mask = torch.ones_like(logprob, dtype=torch.bool)
    fn = PPOPolicyLossFn(clip_range=0.2, enable_sequence_masking=True, delta=0.5)
    loss, metrics = fn(logprob=logprob, old_logprob=old, action_mask=mask, advantages=adv)
    # row 0 dropped (0 loss on 2 tokens), row 1 on-policy: -A * 1 = 1 each -> mean 0.5
    assert loss.item() == pytest.approx(0.5)
    assert metrics["seq_mask/masked_tokens"] == pytest.approx(0.5)
    # Trinity-RFT's ratio: masked positions (a padding one too) over trained tokens
    pad_mask = torch.tensor([[True, False], [True, True]])
    _, metrics = fn(logprob=logprob, old_logprob=old, action_mask=pad_mask, advantages=adv)
    assert metrics["seq_mask/masked_tokens"] == pytest.approx(2 / 3)


# ----------------------------------------------------------------------------- GSPO / CISPO / TOPR / SAPO


def test_gspo_uses_one_ratio_per_sequence():
    batch = make_batch()
    lp, old, adv, mask = (batch[k] for k in ("logprob", "old_logprob", "advantages", "action_mask"))
    loss, _ = gspo_loss(lp, old, adv, mask, clip_low=10.0, clip_high=10.0)  # no clipping
    m = mask.double()
    seq_ratio = torch.exp(((lp - old) * m).sum(-1) / m.sum(-1).clamp(min=1))
    expected = aggregate_loss(-adv * seq_ratio[:, None], mask, "seq-mean-token-mean")
    torch.testing.assert_close(loss, expected)


def test_cispo_masking_and_weights():
    # token 0: r = 2 > 1.28 with A > 0 -> masked (Trinity-RFT) / weight 1.28 (verl)
    # token 1: r = 1.1 -> weight 1.1
    logprob = torch.log(torch.tensor([[2.0, 1.1]], dtype=torch.float64)).requires_grad_(True)
    old = torch.zeros_like(logprob)
    adv = torch.ones_like(logprob)
    mask = torch.ones_like(logprob, dtype=torch.bool)
    loss, metrics = CISPOPolicyLossFn()(logprob, old, mask, adv)
    (grad,) = torch.autograd.grad(loss, logprob)
    torch.testing.assert_close(grad, torch.tensor([[0.0, -1.1 / 2]], dtype=torch.float64))
    assert metrics["masked_frac"] == 0.5 and metrics["pg_clipfrac"] == 0.5
    loss, _ = CISPOPolicyLossFn(mask_truncated=False)(logprob, old, mask, adv)
    (grad,) = torch.autograd.grad(loss, logprob)
    torch.testing.assert_close(grad, torch.tensor([[-1.28 / 2, -1.1 / 2]], dtype=torch.float64))


def test_topr_tapers_only_negative_examples():
    ratios = torch.tensor([[0.5, 2.0, 0.5, 2.0]], dtype=torch.float64)
    logprob = torch.log(ratios).requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
    mask = torch.ones_like(adv, dtype=torch.bool)
    loss, metrics = TOPRPolicyLossFn()(logprob, torch.zeros_like(adv), mask, adv)
    (grad,) = torch.autograd.grad(loss, logprob)
    # alpha: 1 for positives; clip(r, 0, 1) for negatives -> 0.5, 1.0
    torch.testing.assert_close(grad, torch.tensor([[-1, -1, 0.5, 1.0]], dtype=torch.float64) / 4)
    assert metrics["avg_alpha"] == pytest.approx((1 + 1 + 0.5 + 1) / 4)


def test_sapo_on_policy_value_and_gradient():
    """At ratio 1 the gate is 2 / tau and its slope 1: the gradient is the policy gradient."""
    logprob = torch.tensor([[-0.5, -1.0]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[2.0, -1.0]], dtype=torch.float64)
    mask = torch.ones_like(adv, dtype=torch.bool)
    fn = SAPOPolicyLossFn(tau_pos=1.0, tau_neg=2.0)
    loss, metrics = fn(logprob, logprob.detach(), mask, adv)
    assert loss.item() == pytest.approx((-2.0 * 2.0 / 1.0 + 1.0 * 2.0 / 2.0) / 2)
    (grad,) = torch.autograd.grad(loss, logprob)
    torch.testing.assert_close(grad, -adv / 2)
    assert metrics["pos_adv_frac"] == 0.5


def test_importance_sampling_formula():
    batch = make_batch()
    lp, old, adv, mask = (batch[k] for k in ("logprob", "old_logprob", "advantages", "action_mask"))
    loss, metrics = ImportanceSamplingLossFn()(lp, old, mask, adv)
    torch.testing.assert_close(loss, aggregate_loss(-adv * torch.exp(lp - old), mask))
    assert metrics["pg_loss"] == pytest.approx(loss.item())


# ----------------------------------------------------------------------------- OPMD


def test_opmd_formula():
    batch = make_batch()
    lp, adv, mask = batch["logprob"], batch["advantages"], batch["action_mask"]
    for mode in LOSS_AGG_MODES:
        fn = build("opmd", tau=0.5, loss_agg_mode=mode)
        loss, metrics = fn(logprob=lp, action_mask=mask, advantages=adv)
        torch.testing.assert_close(loss, aggregate_loss(-adv * lp, mask, mode) / 1.5)
        assert metrics["opmd_loss"] == pytest.approx(loss.item())


class GuideOPMDPolicyLossFn(PolicyLossFn):
    """A local copy of the algorithm guide's OPMD loss: its __init__ only takes tau."""

    def __init__(self, tau: float = 1.0) -> None:
        self.tau = tau

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        action_mask: Tensor,
        advantages: Tensor,
        **kwargs,
    ) -> tuple[Tensor, dict]:
        pg_losses = -advantages * logprob
        opmd_loss = masked_loss(pg_losses, action_mask, loss_agg_mode=self.loss_agg_mode)
        opmd_loss = opmd_loss / (1.0 + self.tau)  # for regularization (w.r.t. current pi_theta)
        return opmd_loss, {"opmd_loss": opmd_loss.detach().item()}

    @classmethod
    def default_args(cls) -> dict:
        return {"tau": 1.0, "loss_agg_mode": "token-mean"}


def test_guide_opmd_class_builds_with_loss_agg_mode_and_matches_ours():
    fn = build_component(
        GuideOPMDPolicyLossFn, {"tau": 0.5, "loss_agg_mode": "seq-mean-token-mean"}
    )
    assert fn.loss_agg_mode == "seq-mean-token-mean" and fn.tau == 0.5
    assert fn.select_keys == ["action_mask", "advantages"]
    batch = make_batch()
    loss, metrics = fn.compute(batch["logprob"], batch)
    ours, _ = run(build("opmd", tau=0.5, loss_agg_mode="seq-mean-token-mean"), batch)
    torch.testing.assert_close(loss, ours)
    # the default mode comes from default_args, not from a missing attribute
    assert build_component(GuideOPMDPolicyLossFn, {}).loss_agg_mode == "token-mean"
    token_mean, _ = run(build("opmd", tau=0.5), batch)
    assert not torch.allclose(token_mean, ours)  # the mode really changed the value


# ----------------------------------------------------------------------------- DPO


def test_dpo_hand_computed_and_ordering():
    # two pairs; rows [c0, r0, c1, r1]; sequence log-ratios: c0 +1, r0 -1, c1 -0.5, r1 +0.5
    ref = torch.zeros(4, 2, dtype=torch.float64)
    logprob = torch.tensor(
        [[0.5, 0.5], [-1.0, 0.0], [-0.5, 9.0], [0.25, 0.25]], dtype=torch.float64
    )
    mask = torch.tensor([[1, 1], [1, 0], [1, 0], [1, 1]], dtype=torch.bool)
    beta = 0.5
    loss, metrics = DPOLossFn(beta=beta)(logprob, ref, mask)
    z = torch.tensor([2.0, -1.0], dtype=torch.float64)
    expected = -torch.nn.functional.logsigmoid(beta * z).mean()
    assert loss.item() == pytest.approx(expected.item())
    assert metrics["accuracy_mean"] == 0.5
    assert metrics["chosen_reward"] == pytest.approx(beta * (1.0 - 0.5) / 2)
    assert metrics["rejected_reward"] == pytest.approx(beta * (-1.0 + 0.5) / 2)
    # swapping chosen and rejected in every pair flips the preference
    swapped = logprob[[1, 0, 3, 2]], ref, mask[[1, 0, 3, 2]]
    loss_sw, metrics_sw = DPOLossFn(beta=beta)(*swapped)
    assert loss_sw.item() == pytest.approx(-torch.nn.functional.logsigmoid(-beta * z).mean().item())
    assert metrics_sw["accuracy_mean"] == 0.5


def test_dpo_label_smoothing_and_odd_batch():
    ref = torch.zeros(2, 1, dtype=torch.float64)
    logprob = torch.tensor([[1.0], [-1.0]], dtype=torch.float64)
    mask = torch.ones(2, 1, dtype=torch.bool)
    loss, _ = DPOLossFn(beta=1.0, label_smoothing=0.1)(logprob, ref, mask)
    ls = torch.nn.functional.logsigmoid
    z = torch.tensor(2.0, dtype=torch.float64)
    assert loss.item() == pytest.approx((-0.9 * ls(z) - 0.1 * ls(-z)).item())
    with pytest.raises(ValueError, match="odd"):
        DPOLossFn()(logprob[:1], ref[:1], mask[:1])


def test_dpo_rows_follow_collate_order():
    """collate_experiences lays pairs out [c0, r0, c1, r1]: chosen rows are the even ones."""
    exps = [
        Experience(
            tokens=torch.tensor([1, 2]), chosen=torch.tensor([5, 6, 7]), rejected=torch.tensor([8])
        ),
        Experience(
            tokens=torch.tensor([3]), chosen=torch.tensor([9]), rejected=torch.tensor([4, 4])
        ),
    ]
    batch = collate_experiences(exps)
    assert batch.batch_size == 4
    assert batch.action_mask.sum(-1).tolist() == [3, 1, 1, 2]
    # policy prefers exactly the chosen tokens: +1 log-ratio per chosen token, -1 per rejected
    sign = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)[:, None]
    logprob = sign.expand(4, batch.response_length).clone()
    ref = torch.zeros_like(logprob)
    _, metrics = DPOLossFn().compute(
        logprob, {"ref_logprob": ref, "action_mask": batch.action_mask}
    )
    assert metrics["accuracy_mean"] == 1.0


# ----------------------------------------------------------------------------- SFT, MIX


def test_sft_is_nll():
    batch = make_batch()
    loss, metrics = run(build("sft"), batch)
    lp, mask = batch["logprob"], batch["action_mask"]
    assert loss.item() == pytest.approx((-lp[mask]).mean().item())
    assert metrics["sft_loss"] == pytest.approx(loss.item())


def _parts(batch: dict[str, Tensor], rows: Tensor) -> dict[str, Tensor]:
    return {k: v[rows] for k, v in batch.items()}


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_mix_is_weighted_sum_of_ppo_and_sft_parts(mode):
    batch = make_batch(lengths=[6, 3, 1, 5, 2, 4])
    expert = batch["expert_mask"]
    fn = build("mix", mu=0.3, loss_agg_mode=mode)
    loss, metrics = run(fn, batch)
    ppo, _ = run(build("ppo", clip_range=0.2, loss_agg_mode=mode), _parts(batch, ~expert))
    sft, _ = run(build("sft", loss_agg_mode=mode), _parts(batch, expert))
    torch.testing.assert_close(loss, 0.7 * ppo + 0.3 * sft)
    assert metrics["loss"] == pytest.approx(loss.item())
    assert metrics["expert/sft_loss"] == pytest.approx(sft.item())
    assert metrics["usual/pg_loss"] == pytest.approx(ppo.item())


def test_mix_with_no_expert_rows_or_only_expert_rows():
    batch = make_batch()
    fn = build("mix", mu=0.25)
    batch["expert_mask"] = torch.zeros(len(LENGTHS), dtype=torch.bool)
    loss, metrics = run(fn, batch)
    ppo, _ = run(build("ppo"), batch)
    torch.testing.assert_close(loss, 0.75 * ppo)
    assert not any(k.startswith("expert/") for k in metrics)

    batch["expert_mask"] = torch.ones(len(LENGTHS), dtype=torch.bool)
    lp = batch["logprob"].clone().requires_grad_(True)
    loss, metrics = fn.compute(lp, batch)
    sft, _ = run(build("sft"), batch)
    torch.testing.assert_close(loss, 0.25 * sft)
    assert not any(k.startswith("usual/") for k in metrics)
    loss.backward()
    assert torch.isfinite(lp.grad).all()


def test_mix_accepts_is_expert_mask_and_checks_length():
    batch = make_batch()
    loss, _ = run(build("mix"), batch)
    batch["is_expert_mask"] = batch.pop("expert_mask")
    loss2, _ = run(build("mix"), batch)
    torch.testing.assert_close(loss, loss2)
    with pytest.raises(ValueError, match="rows"):
        MIXPolicyLossFn(clip_range=0.2)(
            batch["logprob"], batch["old_logprob"], batch["action_mask"], batch["advantages"],
            expert_mask=torch.tensor([True]),
        )  # fmt: skip


@pytest.mark.parametrize("dynamic", [False, True])
def test_mix_micro_batch_weights_follow_trinity_rft(dynamic):
    batch = make_batch()  # 4 rows: 2 usual, 2 expert
    args = dict(
        mu=0.5, clip_range=0.2, use_dynamic_bsz=dynamic, ppo_mini_batch_size=8,
        ppo_micro_batch_size_per_gpu=4, ngpus_trainer=2, train_batch_size_usual=12,
        train_batch_size_expert=4,
    )  # fmt: skip
    loss, _ = run(build("mix", **args), batch)
    plain, _ = run(build("mix", mu=0.5), batch)
    expert = batch["expert_mask"]
    ppo, _ = run(build("ppo"), _parts(batch, ~expert))
    sft, _ = run(build("sft"), _parts(batch, expert))
    if dynamic:  # experience_per_gpu / (rows * per-gpu part batch)
        w_usual, w_expert = 2 * 4 / (4 * 6), 2 * 4 / (4 * 2)
    else:  # gradient_accumulation / per-gpu part batch
        w_usual, w_expert = 2 * 2 / 6, 2 * 2 / 2
    torch.testing.assert_close(loss, 0.5 * ppo * w_usual + 0.5 * sft * w_expert)
    torch.testing.assert_close(plain, 0.5 * ppo + 0.5 * sft)


# ----------------------------------------------------------------- Trinity-RFT call style
_VERL_KEYS = {
    "old_logprob": "old_log_probs",
    "ref_logprob": "ref_log_prob",
    "action_mask": "response_mask",
}


@pytest.mark.parametrize("name", ["ppo", "gspo", "sft", "opmd", "mix", "sapo"])
def test_losses_take_verl_batch_keys(name):
    """``loss(log_prob=..., **verl_batch)`` (Trinity-RFT's tests) equals ``compute``."""
    batch = make_batch()
    fn = build(name)
    expected, expected_metrics = run(fn, batch)
    verl = {_VERL_KEYS.get(k, k): v for k, v in batch.items() if k != "logprob"}
    loss, metrics = fn(log_prob=batch["logprob"], **verl)
    torch.testing.assert_close(loss, expected)
    assert metrics == expected_metrics


def test_explicit_trinity_key_wins_and_strict_signature_gets_only_its_fields():
    class Strict(PolicyLossFn):
        def __call__(self, logprob, action_mask):  # no **kwargs
            return aggregate_loss(-logprob, action_mask), {}

    batch = make_batch()
    other = torch.zeros_like(batch["action_mask"])
    loss, _ = Strict()(
        log_prob=batch["logprob"],
        response_mask=other,  # the backend alias ...
        action_mask=batch["action_mask"],  # ... loses to the explicit name
        old_log_probs=batch["old_logprob"],  # not named by Strict: dropped
    )
    torch.testing.assert_close(loss, aggregate_loss(-batch["logprob"], batch["action_mask"]))
    assert Strict().select_keys == ["action_mask"]


def test_ppo_truncates_importance_ratio_per_advantage_sign():
    batch = make_batch(lengths=[6, 6, 6, 6])
    batch["old_logprob"] = batch["logprob"] - torch.linspace(-2, 2, 6)  # ratios e^-2 .. e^2
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=batch["logprob"].dtype)[:, None]
    batch["advantages"] = adv.expand(4, 6).clone()
    plain = build("ppo", clip_range=0.2, clip_ratio_c=None)
    pos = build("ppo", clip_range=0.2, clip_ratio_c=None, truncate_adv_pos_is=True,
                truncate_is_range_low=0.5)  # fmt: skip
    neg = build("ppo", clip_range=0.2, clip_ratio_c=None, truncate_adv_neg_is=True,
                truncate_is_range_high=2.0)  # fmt: skip
    base, _ = run(plain, batch)
    lp, mp = run(pos, batch)
    ln, mn = run(neg, batch)
    # positive advantage, ratio < 0.5 (two tokens of each positive row): loss capped at -0.5 A
    assert mp["is_truncate_frac_pos"] == pytest.approx(4 / 24)
    assert lp.item() < base.item()
    # negative advantage, ratio > 2 (two tokens of each negative row): loss capped at 2 |A|
    assert mn["is_truncate_frac_neg"] == pytest.approx(4 / 24)
    assert ln.item() < base.item()
    with pytest.raises(ValueError, match="truncate_is_range_low"):
        build("ppo", clip_range=0.2, truncate_adv_pos_is=True, truncate_is_range_low=0.9)
    with pytest.raises(ValueError, match="truncate_is_range_high"):
        build("ppo", clip_range=0.2, truncate_adv_neg_is=True, truncate_is_range_high=1.1)


def test_sequence_masking_names_and_token_sum():
    assert build("ppo", clip_range=0.2, delta=0.3).delta_sequence_masking == 0.3
    assert build("ppo", clip_range=0.2, delta_sequence_masking=0.4).delta == 0.4
    with pytest.raises(ValueError, match="same setting"):
        build("ppo", clip_range=0.2, delta=0.3, delta_sequence_masking=0.4)
    batch = make_batch()
    mask = batch["action_mask"]
    total = aggregate_loss(batch["logprob"], mask, "token-sum")
    torch.testing.assert_close(total, (batch["logprob"] * mask).sum())
    assert "token-sum" in LOSS_AGG_MODES


def test_dpo_batch_sum_and_sapo_surrogate_options():
    batch = make_batch(lengths=[6, 3, 1, 5, 2])  # odd: per-pair DPO refuses it
    with pytest.raises(ValueError, match="odd batch"):
        run(build("dpo"), batch)
    loss, _ = run(build("dpo", sum_pairs_over_batch=True), batch)
    m = batch["action_mask"].to(batch["logprob"].dtype)
    ratio = (batch["logprob"] - batch["ref_logprob"]) * m
    z = ratio[0::2].sum() - ratio[1::2].sum()
    torch.testing.assert_close(loss, -torch.nn.functional.logsigmoid(0.1 * z))

    batch = make_batch()
    lp = batch["logprob"].clone().requires_grad_(True)
    loss, _ = build("sapo", trinity_rft_surrogate=True).compute(lp, batch)
    ratio = torch.exp(batch["logprob"] - batch["old_logprob"])
    tau = torch.where(batch["advantages"] > 0, 1.0, 1.05)
    gate = torch.sigmoid(tau * (ratio - 1)) * 4 / tau
    expected = aggregate_loss(-batch["advantages"] * gate * batch["logprob"], batch["action_mask"])
    torch.testing.assert_close(loss, expected)
