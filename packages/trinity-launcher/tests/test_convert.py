"""``trinity convert``: trainer checkpoints (verl FSDP shards) to Hugging Face directories that
transformers loads with exactly the trainer's weights; bench mode finds them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("verl")

from trinity.common.experience import Experience, collate_experiences  # noqa: E402
from trinity.launcher.cli import main  # noqa: E402
from trinity.launcher.explorer import find_checkpoints  # noqa: E402
from trinity.launcher.trainer import TrinityLoss, VerlEngineSettings, VerlTrainEngine  # noqa: E402
from trinity.launcher.trainer.ranks import run_ranks  # noqa: E402

# in-process training: one torch thread (see conftest.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")


def hf_state(path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).state_dict()


def test_convert_a_trained_checkpoint_exactly(model_path, tmp_path, capsys):
    engine = VerlTrainEngine(
        VerlEngineSettings(model_path=model_path, device="cpu", dtype="float32", lr=1e-2)
    )
    g = torch.Generator().manual_seed(0)
    exps = [
        Experience(
            tokens=torch.randint(0, 100, (9,), generator=g),
            prompt_length=4,
            logprobs=-torch.rand(5, generator=g),
            advantages=torch.ones(5),
            reward=1.0,
        )
        for _ in range(4)
    ]
    loss = TrinityLoss.from_algorithm({"algorithm_type": "grpo", "kl_loss_fn": "none"})
    engine.train_step(collate_experiences(exps), loss)
    run = tmp_path / "run"
    engine.save_checkpoint(run / "global_step_1" / "actor", step=1)
    assert find_checkpoints(str(run)) == []  # shards only: bench mode has nothing to load

    assert main(["convert", str(run)]) == 0  # the run dir: latest step
    out = run / "global_step_1" / "actor" / "huggingface"
    assert f"Wrote {out}" in capsys.readouterr().out
    trained, converted = engine.state_dict(), hf_state(out)
    base = hf_state(model_path)
    assert set(converted) == set(trained)
    for key, value in converted.items():
        assert torch.equal(value, trained[key]), key
    assert any(not torch.equal(base[k], converted[k]) for k in base)  # it did train
    assert find_checkpoints(str(run)) == [(1, str(out))]
    # tokenizer and chat template come along: vLLM and transformers load the directory alone
    assert (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()


def test_convert_errors_name_the_problem(model_path, tmp_path, capsys):
    assert main(["convert", str(tmp_path)]) == 2
    assert "not a checkpoint" in capsys.readouterr().err
    engine = VerlTrainEngine(VerlEngineSettings(model_path=model_path, device="cpu"))
    actor = engine.save_checkpoint(tmp_path / "global_step_3" / "actor", step=3)
    assert main(["convert", str(actor), "--model-path", str(tmp_path / "gone")]) == 2
    assert "pass --model-path" in capsys.readouterr().err


_SAVE_RANK = """
import sys, torch
torch.set_num_threads(1)
from trinity.launcher.trainer import VerlEngineSettings, VerlTrainEngine
engine = VerlTrainEngine(VerlEngineSettings(model_path=sys.argv[1], device="cpu", dtype="float32"))
engine.save_checkpoint(sys.argv[2], step=5)
"""


@pytest.mark.slow
def test_convert_a_two_rank_checkpoint(model_path, tmp_path):
    actor = tmp_path / "global_step_5" / "actor"
    results = run_ranks(_SAVE_RANK, [model_path, str(actor)], 2, timeout=240)
    assert [code for code, _ in results] == [0, 0], "".join(log[-2000:] for _, log in results)
    assert sorted(p.name for p in Path(actor).glob("model_*.pt")) == [
        "model_world_size_2_rank_0.pt",
        "model_world_size_2_rank_1.pt",
    ]
    out = tmp_path / "hf"
    assert main(["convert", str(actor), "--out", str(out)]) == 0
    converted, base = hf_state(out), hf_state(model_path)
    for key, value in base.items():
        assert torch.equal(converted[key], value), key
