"""``algorithm.rollout_correction`` in the training loop: one in-process step of the tiny model
on a batch whose rollout log-probs are set apart from the trainer's on purpose.

* decoupled Token-TIS: the old log-probs are recomputed, so PPO's ratio is 1 and the policy loss
  is ``-A`` times the truncated weight ``min(pi_train / pi_rollout, 2)`` per token;
* decoupled token-k1 rejection: the loss averages over the kept tokens only;
* bypass REINFORCE with Seq-TIS: no recomputation; ``-A * logprob * w_seq``;
* every corrected step logs ``rollout_corr/*``; an unset section costs nothing and logs none;
* losses that cannot honour the section are refused when the loss is built.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

try:  # the engine needs verl (extra `trinity-launcher[verl]`); the package itself does not
    import verl  # noqa: F401
    import verl.utils.device  # noqa: F401
except Exception as exc:  # pragma: no cover - depends on the environment
    pytest.skip(f"verl is not importable ({exc!r})", allow_module_level=True)

from trinity.algorithm.utils import aggregate_loss
from trinity.common.experience import Experience, collate_experiences
from trinity.launcher.trainer import TrinityLoss, VerlEngineSettings, VerlTrainEngine

pytestmark = pytest.mark.usefixtures("one_thread")

# (prompt length, response length, environment-token positions masked out of action_mask)
SHAPES = [(3, 5, [2]), (6, 2, []), (4, 7, [1, 5]), (2, 1, []), (5, 4, [])]
ADVANTAGES = [1.0, -0.5, 0.7, -1.2, 0.3]  # one per row, both signs
LR = 1e-7  # the steps barely move the weights; each test still scores just before its step


def load(model_path: str, rollout_correction=None):
    from trinity.algorithm.resolve import apply_algorithm_defaults
    from trinity.common.config import load_config

    algorithm = {"algorithm_type": "grpo", "kl_loss_fn": "none", "optimizer": {"lr": LR}}
    if rollout_correction is not None:
        algorithm["rollout_correction"] = rollout_correction
    return apply_algorithm_defaults(
        load_config(
            {
                "mode": "train",
                "algorithm": algorithm,
                "model": {"model_path": model_path, "max_model_len": 32},
                "cluster": {"gpu_per_node": 0},
                "buffer": {"batch_size": 5, "train_batch_size": 5},
            }
        )
    )


@pytest.fixture(scope="module")
def engine(model_path):
    config = load(model_path)
    settings = VerlEngineSettings.from_config(
        config, device="cpu", dtype="float32", micro_batch_size=2
    )
    return VerlTrainEngine(settings)


def experiences(model_path: str, logprobs: torch.Tensor = None) -> list[Experience]:
    """The batch's experiences; ``logprobs [B, R]`` (right-padded responses) as their rollout
    log-probs (zeros without)."""
    vocab = json.loads((Path(model_path) / "config.json").read_text())["vocab_size"]
    g = torch.Generator().manual_seed(0)
    out = []
    for row, (prompt_len, response_len, masked) in enumerate(SHAPES):
        action_mask = torch.ones(response_len, dtype=torch.bool)
        action_mask[masked] = False
        tokens = torch.randint(0, vocab, (prompt_len + response_len,), generator=g)
        out.append(
            Experience(
                tokens=tokens,
                prompt_length=prompt_len,
                logprobs=(
                    torch.zeros(response_len) if logprobs is None else logprobs[row, :response_len]
                ),
                advantages=torch.full((response_len,), ADVANTAGES[row]),
                action_mask=action_mask,
                reward=1.0,
            )
        )
    return out


def offset_rollout(model_path: str, engine, offsets: list[float]):
    """``(exps, batch, trainer_logprobs, rollout_logprobs)``: the rollout's log-probs are the
    engine's current ones minus ``offsets`` (cycled over the tokens), so that
    ``log(pi_train / pi_rollout)`` is the offset."""
    batch = collate_experiences(experiences(model_path), pad_token_id=0)
    trainer_lp = engine.compute_logprobs(batch, 1.0)
    delta = torch.tensor(offsets).repeat(trainer_lp.numel() // len(offsets) + 1)
    rollout = trainer_lp - delta[: trainer_lp.numel()].view_as(trainer_lp)
    rollout = rollout * batch.action_mask
    exps = experiences(model_path, rollout)
    return exps, collate_experiences(exps, pad_token_id=0), trainer_lp, rollout


def count_calls(monkeypatch, engine) -> list[int]:
    calls: list[int] = []
    original = engine.compute_logprobs

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(engine, "compute_logprobs", counted)
    return calls


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float(values[mask].mean())


# ----------------------------------------------------------------------------- decoupled


def test_decoupled_token_tis_weights_the_loss(model_path, engine):
    from trinity.launcher.trainer.trainer import Trainer

    trainer = Trainer(load(model_path, {"rollout_is": "token"}), engine, {})
    exps, batch, trainer_lp, rollout = offset_rollout(model_path, engine, [1.0, -0.5, 0.2])
    mask = batch.action_mask
    metrics = trainer.train_step(exps)

    weights = torch.exp(trainer_lp - rollout).clamp(max=2.0) * mask  # e^1 is truncated to 2
    advantages = batch.advantages
    expected = aggregate_loss(-advantages * weights, mask, trainer.loss.policy_loss_agg_mode)
    assert metrics["actor/pg_loss"] == pytest.approx(float(expected), rel=1e-4)
    uncorrected = aggregate_loss(-advantages, mask, trainer.loss.policy_loss_agg_mode)
    assert abs(float(expected) - float(uncorrected)) > 0.05  # the weights matter here

    assert "time/old_logprob" in metrics  # decoupled: recomputed
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(
        masked_mean(weights, mask), rel=1e-4
    )
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(2.0)
    assert metrics["rollout_corr/kl"] == pytest.approx(
        masked_mean(rollout - trainer_lp, mask), rel=1e-4
    )
    for key in ("k3_kl", "training_ppl", "rollout_ppl", "log_ppl_diff", "chi2_token"):
        assert f"rollout_corr/{key}" in metrics
    assert metrics["batch/response_length/mean"] == pytest.approx(
        float(mask.sum(-1).float().mean())
    )


def test_decoupled_rejection_drops_tokens_from_the_loss(model_path, engine):
    from trinity.launcher.trainer.trainer import Trainer

    config = load(model_path, {"rollout_rs": "token_k1", "rollout_rs_threshold": "0.5_2.0"})
    trainer = Trainer(config, engine, {})
    # every fourth token is 3 nats off (outside [log 0.5, log 2]): rejected
    exps, batch, _, _ = offset_rollout(model_path, engine, [0.1, -0.1, 3.0, 0.05])
    mask = batch.action_mask
    metrics = trainer.train_step(exps)

    n = mask.numel()
    far = (torch.tensor([0.1, -0.1, 3.0, 0.05]).repeat(n)[:n].view_as(mask) == 3.0) & mask
    kept = mask & ~far
    assert 0 < far.sum() < mask.sum()
    expected = aggregate_loss(-batch.advantages, kept, trainer.loss.policy_loss_agg_mode)
    assert metrics["actor/pg_loss"] == pytest.approx(float(expected), rel=1e-4)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(
        float(far.sum() / mask.sum())
    )
    assert "rollout_corr/rollout_is_mean" not in metrics  # rollout_is: null


# ----------------------------------------------------------------------------- bypass


def test_bypass_reinforce_with_sequence_weights(model_path, engine, monkeypatch):
    from trinity.common.config.rollout_correction import RolloutCorrectionConfig
    from trinity.launcher.trainer.trainer import Trainer

    section = RolloutCorrectionConfig.bypass_pg_is(threshold=2.0).model_dump()
    trainer = Trainer(load(model_path, section), engine, {})
    exps, batch, trainer_lp, rollout = offset_rollout(model_path, engine, [0.3, -0.2, 0.25])
    mask = batch.action_mask
    calls = count_calls(monkeypatch, engine)
    metrics = trainer.train_step(exps)
    assert calls == []  # bypass: the rollout's log-probs are the old ones

    seq = torch.exp(((trainer_lp - rollout) * mask).sum(-1, keepdim=True)).clamp(max=2.0)
    assert float(seq.max()) == 2.0 and float(seq.min()) < 2.0  # some truncated, some not
    losses = -batch.advantages * trainer_lp * seq
    expected = aggregate_loss(losses, mask, trainer.loss.policy_loss_agg_mode)
    assert metrics["actor/pg_loss"] == pytest.approx(float(expected), rel=1e-4)
    # metrics from the micro-batches, token-weighted: token means are the batch's
    assert metrics["rollout_corr/kl"] == pytest.approx(
        masked_mean(rollout - trainer_lp, mask), rel=1e-4
    )
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(
        masked_mean(seq.expand_as(mask), mask), rel=1e-4
    )


# ----------------------------------------------------------------------------- unset


def test_unset_costs_nothing_and_logs_nothing(model_path, engine, monkeypatch):
    from trinity.launcher.trainer.trainer import Trainer

    trainer = Trainer(load(model_path), engine, {})
    assert trainer.rollout_correction is None and trainer.loss.rollout_correction is None
    exps, batch, trainer_lp, rollout = offset_rollout(model_path, engine, [1.0, -0.5, 0.2])
    calls = count_calls(monkeypatch, engine)
    metrics = trainer.train_step(exps)
    assert calls == []
    assert not [k for k in metrics if k.startswith("rollout_corr/")]
    # PPO on the rollout's log-probs, as before
    from trinity.algorithm.policy_loss_fn.functional import ppo_clip_loss

    fn = trainer.loss.policy_loss_fn
    expected, _ = ppo_clip_loss(
        trainer_lp, rollout, batch.advantages, batch.action_mask, **fn.loss_settings(),
        loss_agg_mode=fn.loss_agg_mode,
    )  # fmt: skip
    assert metrics["actor/pg_loss"] == pytest.approx(float(expected), rel=1e-4)


# ----------------------------------------------------------------------------- refusals


def test_losses_that_cannot_honour_the_section_are_refused():
    with pytest.raises(ValueError, match="OPMDPolicyLossFn cannot take"):
        TrinityLoss.from_algorithm(
            {"algorithm_type": "opmd"}, rollout_correction={"rollout_is": "token"}
        )
    with pytest.raises(ValueError, match="expert rows"):
        TrinityLoss.from_algorithm({"algorithm_type": "mix"}, rollout_correction={})
    # rejection only, or bypass mode, works with any loss
    rs = {"rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 0.01}
    TrinityLoss.from_algorithm({"algorithm_type": "opmd"}, rollout_correction=rs)
    bypass = TrinityLoss.from_algorithm(
        {"algorithm_type": "opmd"},
        rollout_correction={"rollout_is": "token", "bypass_mode": True, "loss_type": "reinforce"},
    )
    assert {"old_logprob", "advantages"} <= set(bypass.required_fields())
    decoupled = TrinityLoss.from_algorithm(
        {"algorithm_type": "grpo"}, rollout_correction={"rollout_is": "sequence"}
    )
    assert "rollout_is_weights" in decoupled.required_fields()
