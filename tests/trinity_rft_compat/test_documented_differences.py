"""The differences docs/compat.md documents are options, not accidents.

Trinity-RFT's ``tests/algorithm/policy_loss_test.py`` expects these numbers on its seeded
``[5, 20]`` batch (verl batch keys, ``loss(log_prob=..., **batch)``): its pre-0.6 version
without dual-clip, the vendored 0.6-era one (upstream/) with it. Our defaults differ on
purpose, and the documented option reproduces each number exactly.
"""

from __future__ import annotations

import pytest
import torch

from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN


@pytest.fixture
def verl_batch() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Trinity-RFT's test batch: same seed, same draw order, verl's key names."""
    torch.manual_seed(42)
    shape = (5, 20)
    logprob = 2 * torch.rand(shape) - 1
    batch = {
        "old_log_probs": 2 * torch.rand(shape) - 1,
        "ref_log_prob": 2 * torch.rand(shape) - 1,
        "response_mask": torch.rand(shape) > 0.5,
        "advantages": 2 * torch.rand(shape) - 1,
        "expert_mask": torch.rand(shape[0]) > 0.5,
    }
    return logprob, batch


def _loss(name: str, verl_batch, **overrides):
    cls = POLICY_LOSS_FN.get(name)
    args = {**cls.default_args(), **overrides}
    logprob, batch = verl_batch
    return cls(**args)(log_prob=logprob, **batch)


def test_ppo_without_dual_clip_gives_trinity_rft_numbers(verl_batch):
    loss, metrics = _loss("ppo", verl_batch, clip_ratio_c=None)
    assert loss.item() == pytest.approx(0.28560468554496765, rel=1e-6)
    assert metrics["pg_clipfrac"] == pytest.approx(0.3541666567325592, rel=1e-6)
    loss, metrics = _loss(
        "ppo", verl_batch, clip_ratio_c=None, truncate_adv_pos_is=True, truncate_is_range_low=0.5
    )
    assert loss.item() == pytest.approx(0.28531503677368164, rel=1e-6)
    assert metrics["is_truncate_frac_pos"] == pytest.approx(0.02083333395421505, rel=1e-6)
    # dual-clip (our default) only changes negative-advantage tokens with ratio > 3
    default_loss, default_metrics = _loss("ppo", verl_batch)
    assert default_metrics["pg_clipfrac_lower"] > 0 and default_loss.item() < loss.item()


def test_mix_without_dual_clip_gives_trinity_rft_numbers(verl_batch):
    # Trinity-RFT's bare defaults: part batch sizes 1 (each part's mean times its row count)
    trinity = {"train_batch_size_usual": 1, "train_batch_size_expert": 1}
    loss, metrics = _loss("mix", verl_batch, clip_ratio_c=None, **trinity)
    assert loss.item() == pytest.approx(0.6581965088844299, rel=1e-6)
    assert metrics["usual/pg_loss"] == pytest.approx(0.7236452102661133, rel=1e-6)
    assert metrics["expert/sft_loss"] == pytest.approx(0.06915830634534359, rel=1e-6)


def test_dpo_batch_sum_gives_trinity_rft_numbers_and_per_pair_refuses_odd_batch(verl_batch):
    loss, metrics = _loss("dpo", verl_batch, sum_pairs_over_batch=True)
    assert loss.item() == pytest.approx(0.5406752228736877, rel=1e-6)
    assert metrics["chosen_reward"] == pytest.approx(0.7082431316375732, rel=1e-5)
    assert metrics["rejected_reward"] == pytest.approx(0.3757950782775879, rel=1e-5)
    with pytest.raises(ValueError, match="odd batch of 5"):
        _loss("dpo", verl_batch)


def test_mix_with_part_sizes_one_gives_the_0_6_test_numbers(verl_batch):
    # upstream/algorithm/policy_loss_test.py::test_mix_policy_loss (dual-clip on, as 0.6)
    loss, metrics = _loss("mix", verl_batch, train_batch_size_usual=1, train_batch_size_expert=1)
    assert loss.item() == pytest.approx(0.6298247575759888, rel=1e-6)
    assert metrics["usual/pg_clipfrac"] == pytest.approx(0.7777777910232544, rel=1e-6)
    assert metrics["usual/pg_loss"] == pytest.approx(0.6921210885047913, rel=1e-6)


def test_sapo_trinity_rft_surrogate_gives_its_numbers(verl_batch):
    # upstream/algorithm/policy_loss_test.py::test_sapo_policy_loss
    loss, metrics = _loss("sapo", verl_batch, trinity_rft_surrogate=True)
    assert loss.item() == pytest.approx(-0.05128994956612587, rel=1e-6)
    assert metrics["avg_soft_gate"] == pytest.approx(2.3191137313842773, rel=1e-6)
    default, _ = _loss("sapo", verl_batch)  # the paper's surrogate (D4)
    assert default.item() == pytest.approx(0.24060271680355072, rel=1e-6)
