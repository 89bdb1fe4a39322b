"""verl's FSDP engine trains the tiny VLM on image experiences (issue 45): it scores them as
the rollout engine did, and a policy step moves the vision tower too."""

from __future__ import annotations

import asyncio

import pytest
import torch
from vlm_data import ask, squares

from trinity.algorithm import resolve_algorithm
from trinity.common.experience import collate_experiences
from trinity.launcher.engines.base import EngineSettings
from trinity.launcher.engines.hf_engine import TransformersEngine
from trinity.launcher.tiny_model import PRESETS, build_tiny_model
from trinity.launcher.trainer.verl_engine import TrinityLoss, VerlTrainEngine
from trinity.launcher.trainer.verl_settings import VerlEngineSettings


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("vlm"), PRESETS["vlm"])


@pytest.fixture(scope="module")
def experiences(vlm_dir):
    """Answers about pictures of two sizes (16 and 8 image tokens: rows of unequal length,
    padded in the batch), sampled by the transformers engine."""
    engine = TransformersEngine(
        EngineSettings(
            model_path=str(vlm_dir),
            engine_type="transformers",
            max_model_len=256,
            max_response_tokens=6,
            dtype="float32",
            seed=0,
        )
    )

    async def sample():
        big = await engine.chat(ask(squares(3)), n=2, seed=1)
        small = await engine.chat(ask(squares(2, size=(112, 56))), n=2, seed=2)
        return big + small

    exps = asyncio.run(sample())
    assert len({e.prompt_length for e in exps}) == 2
    return exps


def _engine(vlm_dir, **overrides) -> VerlTrainEngine:
    settings = dict(model_path=str(vlm_dir), device="cpu", dtype="float32", lr=1e-2)
    settings.update(overrides)
    return VerlTrainEngine(VerlEngineSettings(**settings))


@pytest.mark.parametrize("micro_batch_size", [1, 4])
def test_the_trainer_scores_image_rows_as_the_rollout_engine(
    vlm_dir, experiences, micro_batch_size
):
    batch = collate_experiences(experiences)
    engine = _engine(vlm_dir, micro_batch_size=micro_batch_size)
    trained = engine.compute_logprobs(batch)
    mask = batch.action_mask.bool()
    torch.testing.assert_close(trained[mask], batch.logprobs[mask], atol=2e-4, rtol=0)


def test_a_policy_step_on_image_rows_raises_their_logprobs_and_moves_the_vision_tower(
    vlm_dir, experiences
):
    batch = collate_experiences(experiences)
    engine = _engine(vlm_dir, micro_batch_size=2)
    loss = TrinityLoss.from_algorithm(
        resolve_algorithm(
            {"algorithm_type": "grpo", "kl_loss_fn": "none", "entropy_loss_fn": "none"}
        )
    )
    mask = batch.action_mask
    advantages = torch.ones_like(mask, dtype=torch.float32) * mask
    vision = {k: v.clone() for k, v in engine.state_dict().items() if "visual" in k}
    assert vision

    def mean_logprob() -> float:
        return float((engine.compute_logprobs(batch) * mask).sum() / mask.sum())

    start = mean_logprob()
    for _ in range(3):
        old = engine.compute_logprobs(batch)
        metrics = engine.train_step(
            batch, loss, extra={"old_logprob": old, "advantages": advantages}
        )
        assert torch.isfinite(torch.tensor(metrics["actor/loss"]))
    assert mean_logprob() > start + 0.1
    after = engine.state_dict()
    assert any(not torch.equal(after[k], v) for k, v in vision.items())
