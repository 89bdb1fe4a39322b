"""``trinity convert`` of a LoRA checkpoint: the adapter in PEFT's format by default, the merged
model with ``--merged``.

A real LoRA checkpoint of the tiny model (verl's FSDP2 engine, two trainer steps) is exported
offline: the adapter's tensors are the trainer's bit for bit under peft's saved names, plain
``peft`` + ``transformers`` load it with no missing or unexpected key, and base + adapter
scores as the ``--merged`` model does (which plain ``transformers`` loads). Two gloo ranks'
shards of the same adapter export the same file; shards the offline reader does not take go
through the engine; a full fine-tuning checkpoint ignores ``--merged``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("verl")
pytest.importorskip("peft")

from trinity.launcher.cli import main  # noqa: E402

RANK, ALPHA = 4, 8
TRINITY = Path(sys.executable).parent / "trinity"


def _experiences():
    from trinity.common.experience import Experience

    g = torch.Generator().manual_seed(0)
    return [
        Experience(
            tokens=torch.randint(0, 100, (9,), generator=g),
            prompt_length=4,
            logprobs=-torch.rand(5, generator=g),
            advantages=torch.full((5,), 1.0 if i % 2 else -1.0),
            reward=float(i % 2),
        )
        for i in range(4)
    ]


def _peft_name(name: str) -> str:
    """The engine's parameter name as ``PeftModel.save_pretrained`` writes it."""
    return name.replace(".default.", ".")


@pytest.fixture(scope="module")
def lora_checkpoint(model_path, tmp_path_factory, one_thread):
    """A LoRA run's step checkpoint (one CPU rank, two GRPO steps: B is no longer zero) and
    the engine's adapter tensors and merged weights."""
    from torch.distributed.tensor import DTensor

    from trinity.common.experience import collate_experiences
    from trinity.launcher.trainer import TrinityLoss, VerlEngineSettings, VerlTrainEngine

    engine = VerlTrainEngine(
        VerlEngineSettings(
            model_path=model_path,
            device="cpu",
            dtype="float32",
            lr=1e-2,
            lora_rank=RANK,
            lora_alpha=ALPHA,
        )
    )
    loss = TrinityLoss.from_algorithm({"algorithm_type": "grpo", "kl_loss_fn": "none"})
    batch = collate_experiences(_experiences())
    for _ in range(2):
        engine.train_step(batch, loss)
    run = tmp_path_factory.mktemp("lora") / "run"
    actor = engine.save_checkpoint(run / "global_step_2" / "actor", step=2)
    adapter = {
        _peft_name(n): (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
        for n, p in engine.module.named_parameters()
        if p.requires_grad
    }
    return SimpleNamespace(run=run, actor=actor, adapter=adapter, merged=engine.state_dict())


def _load_adapter(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(directory / "adapter_model.safetensors")


def test_the_adapter_is_the_checkpoint_bit_for_bit(lora_checkpoint, model_path, tmp_path):
    from trinity.launcher.convert import convert_checkpoint

    out = convert_checkpoint(lora_checkpoint.actor, tmp_path / "adapter")
    assert out == tmp_path / "adapter"
    exported = _load_adapter(out)
    # peft's saved names: no adapter-name segment; q, k, v, o, gate, up, down of 2 layers
    assert set(exported) == set(lora_checkpoint.adapter) and len(exported) == 2 * 7 * 2
    assert all(".default." not in k and k.startswith("base_model.model.") for k in exported)
    for key, tensor in exported.items():
        assert tensor.dtype == torch.float32 and torch.equal(tensor, lora_checkpoint.adapter[key])
    assert any(k.endswith("lora_B.weight") and v.abs().max() > 1e-4 for k, v in exported.items())
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["task_type"] == "CAUSAL_LM"
    assert (config["r"], config["lora_alpha"]) == (RANK, ALPHA)
    assert config["base_model_name_or_path"] == model_path
    assert (config["lora_dropout"], config["bias"], config["inference_mode"]) == (0.0, "none", True)
    assert config["target_modules"] == sorted(
        {k.split(".lora_")[0].removeprefix("base_model.model.") for k in exported}
    )
    # the tokenizer comes along; no model config (the directory is an adapter, not a model)
    names = {p.name for p in out.iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json"} <= names
    assert not names & {"config.json", "generation_config.json", "model.safetensors"}


def test_the_adapter_goes_where_bench_mode_does_not_look(lora_checkpoint, capsys):
    actor = lora_checkpoint.actor
    for taken in (actor / "huggingface", actor, actor.parent):
        assert main(["convert", str(actor), "--out", str(taken)]) == 2
        assert "bench mode reads full model weights there" in capsys.readouterr().err
    assert not (actor / "huggingface" / "adapter_model.safetensors").exists()


@pytest.mark.slow
def test_the_cli_writes_the_adapter_and_with_merged_the_merged_model(
    lora_checkpoint, model_path, tmp_path
):
    """``trinity convert RUN`` (the adapter, to ``lora_adapter/``) and ``--merged --out``:
    plain peft + transformers load both, and score alike."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    def trinity(*args: str) -> str:
        done = subprocess.run(
            [str(TRINITY), "convert", *args], capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done.stdout

    adapter_dir = lora_checkpoint.actor / "lora_adapter"
    printed = trinity(str(lora_checkpoint.run))
    assert printed == (
        f"Wrote {adapter_dir} (the LoRA adapter, PEFT format; --merged: the merged model)\n"
    )
    merged_dir = tmp_path / "merged"
    assert trinity(str(lora_checkpoint.run), "--merged", "--out", str(merged_dir)) == (
        f"Wrote {merged_dir}\n"
    )

    # the merged model: plain transformers, the trainer's merged weights
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    for name, tensor in merged.state_dict().items():
        torch.testing.assert_close(tensor, lora_checkpoint.merged[name], atol=1e-6, rtol=0)

    # the adapter: plain peft on the base model, nothing missing or unexpected
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    peft_model = PeftModel.from_pretrained(base, adapter_dir).eval()
    check = peft_model.load_adapter(adapter_dir, adapter_name="again")
    assert check.missing_keys == [] and check.unexpected_keys == []
    loaded = {_peft_name(n): p for n, p in peft_model.named_parameters() if ".default." in n}
    assert set(loaded) == set(lora_checkpoint.adapter)
    assert all(torch.equal(loaded[k], v) for k, v in lora_checkpoint.adapter.items())
    peft_model.set_adapter("default")

    g = torch.Generator().manual_seed(5)
    inputs = torch.randint(0, 100, (3, 11), generator=g)
    with torch.no_grad():
        expected = merged(inputs).logits
        got = peft_model(inputs).logits
        with peft_model.disable_adapter():
            plain = peft_model(inputs).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert (plain - expected).abs().max() > 1e-4  # the adapter does something


_TWO_RANKS = """
import json, sys, torch
torch.set_num_threads(1)
from trinity.launcher.trainer import VerlEngineSettings, VerlTrainEngine
config = json.load(open(sys.argv[2] + "/adapter_config.json"))
engine = VerlTrainEngine(VerlEngineSettings(
    model_path=sys.argv[1], device="cpu", dtype="float32", lora_rank=config["r"],
    lora_alpha=config["lora_alpha"], lora_target_modules=config["target_modules"],
    lora_adapter_path=sys.argv[2]))
engine.save_checkpoint(sys.argv[3], step=7)
"""


@pytest.mark.slow
def test_two_ranks_shards_export_the_same_adapter(lora_checkpoint, model_path, tmp_path):
    """Two gloo ranks continue the exported adapter (``lora_configs[0].path``) and checkpoint
    it, each rank holding half of every tensor: the export is the one-rank export again."""
    from trinity.launcher.convert import _load_shard, convert_checkpoint
    from trinity.launcher.trainer.ranks import run_ranks

    one = convert_checkpoint(lora_checkpoint.actor, tmp_path / "one")
    actor = tmp_path / "two" / "global_step_7" / "actor"
    results = run_ranks(_TWO_RANKS, [model_path, str(one), str(actor)], 2, timeout=400)
    assert [c for c, _ in results] == [0, 0], "".join(log[-2000:] for _, log in results)
    shard = _load_shard(actor / "model_world_size_2_rank_0.pt")
    key = next(k for k in shard if ".q_proj.lora_A." in k)
    assert shard[key].to_local().shape[0] == shard[key].shape[0] // 2  # really sharded

    two = convert_checkpoint(actor, tmp_path / "exported")
    assert two == tmp_path / "exported"
    first, second = _load_adapter(one), _load_adapter(two)
    assert set(first) == set(second)
    assert all(torch.equal(first[k], second[k]) for k in first)
    configs = [json.loads((d / "adapter_config.json").read_text()) for d in (one, two)]
    assert configs[0] == configs[1]


@pytest.mark.slow
def test_shards_the_reader_does_not_take_go_through_the_engine(
    lora_checkpoint, tmp_path, monkeypatch
):
    import trinity.launcher.convert_lora as convert_lora

    def unsupported(_states):
        raise convert_lora._UnsupportedShards("a 2-D device mesh")

    monkeypatch.setattr(convert_lora, "unshard", unsupported)
    out = convert_lora.export_adapter(
        lora_checkpoint.actor,
        [lora_checkpoint.actor / "model_world_size_1_rank_0.pt"],
        json.loads((lora_checkpoint.actor / "trinity_engine.json").read_text())["settings"],
        tmp_path / "adapter",
    )
    exported = _load_adapter(out)
    assert set(exported) == set(lora_checkpoint.adapter)
    assert all(torch.equal(v, lora_checkpoint.adapter[k]) for k, v in exported.items())


def test_merged_changes_nothing_for_a_full_checkpoint(model_path, tmp_path, capsys, one_thread):
    from trinity.launcher.trainer import VerlEngineSettings, VerlTrainEngine

    engine = VerlTrainEngine(VerlEngineSettings(model_path=model_path, device="cpu"))
    actor = engine.save_checkpoint(tmp_path / "global_step_1" / "actor", step=1)
    capsys.readouterr()  # the engine's own output
    assert main(["convert", str(actor), "--out", str(tmp_path / "plain")]) == 0
    assert main(["convert", str(actor), "--merged", "--out", str(tmp_path / "merged")]) == 0
    assert capsys.readouterr().out == (f"Wrote {tmp_path / 'plain'}\nWrote {tmp_path / 'merged'}\n")
    plain, merged = tmp_path / "plain", tmp_path / "merged"
    assert sorted(p.name for p in plain.iterdir()) == sorted(p.name for p in merged.iterdir())
    assert all((plain / p.name).read_bytes() == p.read_bytes() for p in merged.iterdir())
    assert not (actor / "lora_adapter").exists()
