"""``trinity convert``: trainer checkpoints (verl FSDP shards) to Hugging Face directories that
transformers loads with exactly the trainer's weights; bench mode finds them. Conversion reads
the shards offline (no engine, no process group), reuses the weights the trainer already wrote,
and never rewrites them unless ``--out`` names their directory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
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


def _no_engine(*_args, **_kwargs):
    raise AssertionError("the conversion booted the trainer engine")


def test_convert_a_trained_checkpoint_exactly(model_path, tmp_path, capsys, monkeypatch):
    import trinity.launcher.convert as convert

    monkeypatch.setattr(convert, "_convert_with_engine", _no_engine)
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
    assert main(["convert", str(run)]) == 0  # again: the trainer's weights are there already
    assert "already holds the trainer's Hugging Face weights (nothing written)" in (
        capsys.readouterr().out
    )
    trained, converted = engine.state_dict(), hf_state(out)
    base = hf_state(model_path)
    assert set(converted) == set(trained)
    for key, value in converted.items():
        assert torch.equal(value, trained[key]), key
    assert any(not torch.equal(base[k], converted[k]) for k in base)  # it did train
    assert find_checkpoints(str(run)) == [(1, str(out))]
    # tokenizer and chat template come along: vLLM and transformers load the directory alone
    assert (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()


def _trained_checkpoint(model_path, root: Path, hf: bool) -> tuple[Path, dict]:
    """A step checkpoint of a trained engine (with Hugging Face weights when ``hf``, as
    ``trainer.save_hf_checkpoint: always`` writes them) and the engine's weights."""
    engine = VerlTrainEngine(
        VerlEngineSettings(model_path=model_path, device="cpu", dtype="float32", lr=1e-2)
    )
    g = torch.Generator().manual_seed(1)
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
    actor = engine.save_checkpoint(root / "global_step_1" / "actor", step=1)
    if hf:
        engine.save_hf(actor / "huggingface")
    return actor, engine.state_dict()


def test_convert_keeps_the_weights_the_trainer_wrote(model_path, tmp_path, capsys, monkeypatch):
    import trinity.launcher.convert as convert

    monkeypatch.setattr(convert, "_convert_with_engine", _no_engine)
    actor, trained = _trained_checkpoint(model_path, tmp_path / "run", hf=True)
    hf = actor / "huggingface"
    weights = hf / "model.safetensors"
    before = (weights.read_bytes(), weights.stat().st_mtime_ns)

    assert main(["convert", str(tmp_path / "run")]) == 0  # nothing to write: the directory
    assert str(hf) in capsys.readouterr().out
    assert (weights.read_bytes(), weights.stat().st_mtime_ns) == before  # not rewritten

    out = tmp_path / "exported"
    assert main(["convert", str(tmp_path / "run"), "--out", str(out)]) == 0
    assert (out / "model.safetensors").read_bytes() == before[0]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in hf.iterdir())
    # a copy, not a link: writing into the export leaves the checkpoint as it was
    assert os.stat(out / "model.safetensors").st_ino != os.stat(weights).st_ino
    (out / "model.safetensors").write_bytes(b"changed")
    assert weights.read_bytes() == before[0]

    # --out naming the trainer's directory rewrites it from the shards
    (hf / "model.safetensors").write_bytes(b"stale")
    assert main(["convert", str(actor), "--out", str(hf)]) == 0
    converted = hf_state(hf)
    for key, value in converted.items():
        assert torch.equal(value, trained[key]), key


def test_convert_boots_no_engine_and_prints_no_engine_output(model_path, tmp_path):
    actor, trained = _trained_checkpoint(model_path, tmp_path / "run", hf=False)
    torch.save(trained, tmp_path / "trained.pt")
    script = textwrap.dedent(
        """
        import sys
        import torch
        import torch.distributed as dist
        from trinity.launcher.cli import main

        code = main(["convert", sys.argv[1], "--out", sys.argv[2]])
        assert code == 0, code
        assert not dist.is_initialized(), "a process group was started"
        engines = [m for m in sys.modules if m == "verl" or m.startswith("verl.")]
        assert not engines, engines[:5]
        assert "trinity.launcher.trainer.verl_engine" not in sys.modules
        """
    )
    out = tmp_path / "hf"
    done = subprocess.run(
        [sys.executable, "-c", script, str(actor), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout == f"Wrote {out}\n"  # and nothing else: no engine internals
    assert "FSDP" not in done.stderr and "verl" not in done.stderr, done.stderr
    trained = torch.load(tmp_path / "trained.pt")
    converted = hf_state(out)
    assert set(converted) == set(trained)
    for key, value in converted.items():
        assert torch.equal(value, trained[key]), key
    assert (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()
    assert "attn_implementation" not in (out / "config.json").read_text()


def test_shards_the_merge_cannot_read_go_through_the_engine_quietly(
    model_path, tmp_path, capfd, monkeypatch
):
    import trinity.launcher.convert as convert

    def unsupported(_shards):
        raise convert._UnsupportedShards("a 2-D device mesh")

    monkeypatch.setattr(convert, "merge_shards", unsupported)
    actor, trained = _trained_checkpoint(model_path, tmp_path / "run", hf=False)
    capfd.readouterr()
    out = tmp_path / "hf"
    assert main(["convert", str(actor), "--out", str(out)]) == 0
    printed = capfd.readouterr()
    assert "FSDP" not in printed.out + printed.err  # the engine's output stays in its log
    converted = hf_state(out)
    for key, value in converted.items():
        assert torch.equal(value, trained[key]), key


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
