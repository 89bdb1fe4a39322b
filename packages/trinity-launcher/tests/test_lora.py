"""LoRA (``model.lora_configs``, one adapter): trained on the trainer side, the adapter synced.

* config: one adapter reaches the engine settings; more than one, rank 0, ``is_dummy`` and what
  cannot be honoured yet (an adapter name, a bf16 adapter, a directory that is no adapter) are
  refused naming the field; Trinity-RFT's derived engine LoRA options stay refused;
* the tiny model on verl's FSDP2 engine in this process (real peft, real verl): a few GRPO
  steps with a KL loss train the adapter only (base weights bit-identical, only the adapter
  requires grad and is in the optimizer); the reference is the same engine with the adapter
  disabled and scores exactly as the base model does in plain transformers; the exported
  weights are ``W + alpha / r * B @ A`` under the base model's names, and transformers loading
  them scores as the LoRA policy does; a checkpoint resumes adapter, optimizer and schedule;
  ``target_modules`` / ``exclude_modules`` / ``path`` select and continue adapters; two gloo
  ranks (every tensor sharded) merge the same way;
* mode ``both`` through ``trinity-launch`` on the quickstart (vLLM's CPU build): only the
  adapter moves, and the engines serve base + the adapter of each step (the engines' side:
  test_lora_serving.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from trinity.common.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[3]
RANK, ALPHA = 4, 8
LR = 1e-2  # a few steps move the adapter visibly
SHAPES = [(3, 5), (6, 2), (4, 7), (2, 3)]  # (prompt, response) lengths of the batch's rows


def lora_config(model_path: str, lora: dict | None = None, **sections):
    """A mode-train GRPO config with a KL loss (so a reference) and one adapter."""
    from trinity.algorithm.resolve import apply_algorithm_defaults

    config = {
        "mode": "train",
        "algorithm": {
            "algorithm_type": "grpo",
            "kl_loss_fn": "k3",
            "kl_loss_fn_args": {"kl_coef": 0.1},
            "optimizer": {"lr": LR},
        },
        "model": {
            "model_path": model_path,
            "max_model_len": 32,
            "lora_configs": [{"lora_rank": RANK, "lora_alpha": ALPHA, **(lora or {})}],
        },
        "cluster": {"gpu_per_node": 0},
        "buffer": {"batch_size": 4, "train_batch_size": 4},
        **sections,
    }
    return apply_algorithm_defaults(load_config(config))


def issues(data: dict, check: bool = False) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load_config(data, check=check)
    return {issue.path: issue.message for issue in info.value.errors}


# ----------------------------------------------------------------------------- config


def test_one_adapter_reaches_the_engine_settings(model_path):
    from trinity.launcher.trainer.verl_settings import VerlEngineSettings

    config = lora_config(
        model_path,
        {"target_modules": ".*(q_proj|v_proj)", "exclude_modules": ".*\\.1\\..*"},
    )
    settings = VerlEngineSettings.from_config(config)
    assert (settings.lora_rank, settings.lora_alpha) == (RANK, ALPHA)
    assert settings.lora_target_modules == ".*(q_proj|v_proj)"
    assert settings.lora_exclude_modules == ".*\\.1\\..*"
    assert settings.lora_dtype == "auto" and settings.lora_adapter_path is None
    # the engines serve base + adapter (test_lora_serving.py)
    assert config.explorer.rollout_model.enable_lora is True
    full = VerlEngineSettings.from_config(
        load_config({"model": {"model_path": model_path, "max_model_len": 32}})
    )
    assert full.lora_rank == 0
    with pytest.raises(ValueError, match="lora_dtype='bfloat16'"):
        replace(settings, lora_dtype="bfloat16")


def test_what_cannot_be_honoured_is_refused_naming_the_field():
    two = issues({"model": {"lora_configs": [{"lora_rank": 8}, {"lora_rank": 4}]}})
    assert "has 2 entries" in two["model.lora_configs"]
    assert "only one adapter is supported" in two["model.lora_configs"]
    rank = issues({"model": {"lora_configs": [{"lora_rank": 0}]}})
    assert "must be >= 1, got 0" in rank["model.lora_configs[0].lora_rank"]
    at = "model.lora_configs[0]."
    found = issues(
        {
            "model": {
                "lora_configs": [
                    {"is_dummy": True, "name": "mine", "base_model_name": "b", "lora_dtype": "bf"}
                ]
            }
        }
    )
    dummy = found[at + "is_dummy"]
    assert "not supported yet" in dummy and "allowed: false" in dummy
    assert at + "name" not in found  # the adapter's name in the engines (test_lora_serving.py)
    base = found[at + "base_model_name"]
    assert "not supported yet" in base and "allowed: null" in base
    assert "'bf' is not a torch dtype name" in found[at + "lora_dtype"]
    bf16 = issues({"model": {"lora_configs": [{"lora_dtype": "bfloat16"}]}})
    assert "not supported yet" in bf16[at + "lora_dtype"]
    assert "allowed: 'auto' or 'float32'" in bf16[at + "lora_dtype"]
    assert load_config({"model": {"lora_configs": [{"lora_dtype": "float32"}]}})
    # the engines' LoRA switch needs the run's adapter; Trinity-RFT's derived options are refused
    engine = issues(
        {"explorer": {"rollout_model": {"enable_lora": True, "lora_kwargs": {"max_loras": 2}}}}
    )
    message = engine["explorer.rollout_model.enable_lora"]
    assert "needs the run's adapter" in message and "allowed: false" in message
    assert "no effect" in engine["explorer.rollout_model.lora_kwargs"]


def test_an_adapter_path_must_be_an_adapter_that_agrees_with_what_is_written(model_path, tmp_path):
    at = "model.lora_configs[0]."
    base = {"model": {"model_path": model_path, "lora_configs": [{"path": str(tmp_path)}]}}
    assert "is not a PEFT LoRA adapter directory" in issues(base, check=True)[at + "path"]
    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]})
    )
    lora = {"path": str(tmp_path), "lora_rank": 8, "lora_alpha": 8, "target_modules": "q"}
    found = issues({"model": {"model_path": model_path, "lora_configs": [lora]}}, check=True)
    assert "the adapter at path has r=4" in found[at + "lora_rank"]
    assert at + "lora_alpha" not in found  # written, and the same
    assert "leave target_modules out" in found[at + "target_modules"]


# ----------------------------------------------------------------------------- the engine


def experiences(model_path: str):
    from trinity.common.experience import Experience

    vocab = json.loads((Path(model_path) / "config.json").read_text())["vocab_size"]
    g = torch.Generator().manual_seed(0)
    out = []
    for row, (prompt, response) in enumerate(SHAPES):
        out.append(
            Experience(
                tokens=torch.randint(0, vocab, (prompt + response,), generator=g),
                prompt_length=prompt,
                logprobs=torch.full((response,), -3.0),
                advantages=torch.full((response,), 1.0 if row % 2 else -1.0),
                action_mask=torch.ones(response, dtype=torch.bool),
                reward=float(row % 2),
            )
        )
    return out


def transformers_logprobs(model, batch) -> torch.Tensor:
    """``[B, R]`` response log-probs of a plain transformers forward, row by row (no padding)."""
    out = torch.zeros(batch.action_mask.shape)
    p = batch.prompt_length
    with torch.no_grad():
        for i in range(batch.batch_size):
            keep = batch.attention_mask[i].bool()
            tokens = batch.tokens[i][keep]
            start = int((~keep[:p]).sum())  # left padding of the prompt
            logits = model(tokens[None]).logits[0].float()
            lp = torch.log_softmax(logits[:-1], -1).gather(-1, tokens[1:, None])[:, 0]
            n = len(tokens) - (p - start)
            out[i, :n] = lp[p - start - 1 :]
    return out * batch.action_mask


def full_params(module) -> dict[str, torch.Tensor]:
    from torch.distributed.tensor import DTensor

    return {
        n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
        for n, p in module.named_parameters()
    }


@pytest.fixture(scope="module")
def lora_run(model_path, one_thread):
    """The run's engines for a LoRA config (one CPU rank), and the policy's parameters before
    and after three trainer steps (GRPO + k3 KL loss against the reference)."""
    pytest.importorskip("verl")
    from trinity.common.experience import collate_experiences
    from trinity.launcher.trainer.build import build_local_cpu_engines
    from trinity.launcher.trainer.trainer import Trainer

    config = lora_config(model_path)
    engines = build_local_cpu_engines(config)
    before = full_params(engines.engine.module)
    trainer = Trainer(config, engines.engine, {}, ref_engine=engines.ref_engine)
    exps = experiences(model_path)
    metrics = [trainer.train_step(exps) for _ in range(3)]
    batch = collate_experiences(exps, pad_token_id=0)
    return config, engines, before, full_params(engines.engine.module), metrics, batch


def test_only_the_adapter_trains_and_the_base_stays_bit_identical(lora_run):
    _, engines, before, after, metrics, _ = lora_run
    engine = engines.engine
    trainable = {n for n, p in engine.module.named_parameters() if p.requires_grad}
    adapter = {n for n in before if ".lora_A." in n or ".lora_B." in n}
    # all-linear: q, k, v, o, gate, up, down of both layers, an A and a B each
    assert trainable == adapter and len(adapter) == 2 * 7 * 2
    in_optimizer = {id(p) for g in engine.verl_engine.optimizer.param_groups for p in g["params"]}
    named = dict(engine.module.named_parameters())
    assert in_optimizer == {id(named[n]) for n in adapter}
    assert all(named[n].dtype == torch.float32 for n in adapter)  # lora_dtype 'auto'
    for name in set(before) - adapter:
        assert torch.equal(before[name], after[name]), f"base weight {name} changed"
    for name in adapter:
        if ".lora_B." in name:  # B starts at zero: the adapter starts as a no-op
            assert not before[name].any() and after[name].abs().max() > 1e-4, name
        else:
            assert not torch.equal(before[name], after[name]), name
    assert [m["actor/kl_loss"] for m in metrics][0] == 0.0  # step 1: policy == base
    assert metrics[-1]["actor/kl_loss"] > 0.0


def test_the_reference_is_the_base_model_with_the_adapter_disabled(lora_run, model_path):
    from transformers import AutoModelForCausalLM

    from trinity.launcher.trainer.verl_lora import AdapterDisabledReference

    _, engines, _, _, _, batch = lora_run
    # no second engine: the reference is a view of the policy engine
    assert isinstance(engines.ref_engine, AdapterDisabledReference)
    assert engines.ref_engine.engine is engines.engine
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    expected = transformers_logprobs(base, batch)
    reference = engines.ref_engine.compute_logprobs(batch)
    torch.testing.assert_close(reference, expected, atol=1e-5, rtol=0)
    policy = engines.engine.compute_logprobs(batch)
    assert (policy - expected).abs().max() > 1e-3  # the adapter changes the policy


def test_the_synced_weights_are_the_merged_adapter(lora_run, model_path):
    from transformers import AutoModelForCausalLM

    _, engines, _, after, _, batch = lora_run
    engine = engines.engine
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    base_state = base.state_dict()
    policy_before = engine.compute_logprobs(batch)
    merged = engine.state_dict()  # what weight synchronisation sends
    assert set(merged) == set(base_state)  # the base model's names, lm_head (tied) included
    prefix = "base_model.model.model.layers.0.self_attn.q_proj"
    a, b = after[f"{prefix}.lora_A.default.weight"], after[f"{prefix}.lora_B.default.weight"]
    w = base_state["model.layers.0.self_attn.q_proj.weight"]
    by_hand = w + (ALPHA / RANK) * b @ a
    q = merged["model.layers.0.self_attn.q_proj.weight"]
    torch.testing.assert_close(q, by_hand, atol=1e-6, rtol=0)
    assert (q - w).abs().max() > 1e-4  # trained: not the base
    for name in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
        assert torch.equal(merged[name], base_state[name]), name  # no adapter there
    # the export left the engine as it was: base and adapter, and so its log-probs
    assert all(torch.equal(t, after[n]) for n, t in full_params(engine.module).items())
    assert torch.equal(engine.compute_logprobs(batch), policy_before)
    # a transformers model holding the merged weights scores as the LoRA policy does
    base.load_state_dict(merged)
    torch.testing.assert_close(transformers_logprobs(base, batch), policy_before, atol=1e-5, rtol=0)


def test_a_lora_checkpoint_resumes_adapter_optimizer_and_schedule(lora_run, model_path, tmp_path):
    from transformers import AutoModelForCausalLM

    from trinity.algorithm.resolve import resolve_algorithm
    from trinity.launcher.trainer.verl_engine import TrinityLoss, VerlTrainEngine
    from trinity.launcher.trainer.verl_weights import VerlWeightsMixin

    config, engines, _, _, _, batch = lora_run
    engine = engines.engine
    actor = engine.save_checkpoint(tmp_path / "actor")
    shard = torch.load(actor / "model_world_size_1_rank_0.pt", weights_only=False)
    assert shard and all("lora_" in k for k in shard)  # the adapter; the base is model_path's
    engine.save_hf(tmp_path / "hf")  # the merged model, for the existing loaders
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32)
    merged = engine.state_dict()
    for name, tensor in loaded.state_dict().items():
        torch.testing.assert_close(tensor, merged[name], atol=0, rtol=0)
    # `trinity convert --merged` of the checkpoint (adapter shards only): the engine rebuilds
    # base + adapter and writes the merged model
    from trinity.launcher.convert import convert_checkpoint

    converted = AutoModelForCausalLM.from_pretrained(
        convert_checkpoint(actor, tmp_path / "converted", merged=True), dtype=torch.float32
    )
    for name, tensor in converted.state_dict().items():
        torch.testing.assert_close(tensor, merged[name], atol=1e-6, rtol=0)

    resumed = VerlTrainEngine(engine.settings)
    assert resumed.load_checkpoint(actor) == engine.global_step == 3
    assert torch.equal(resumed.compute_logprobs(batch), engine.compute_logprobs(batch))
    # one more step on each: the same update only if the Adam moments and the lr came back
    loss = TrinityLoss.from_algorithm(resolve_algorithm(config))
    extra = {"ref_logprob": engines.ref_engine.compute_logprobs(batch)}
    for e in (engine, resumed):
        e.train_step(batch, loss, extra=extra)
    mine, theirs = full_params(engine.module), full_params(resumed.module)
    assert all(torch.equal(mine[n], theirs[n]) for n in mine)

    # resumed under other LoRA settings: refused before verl reads the shards
    other = type("Other", (), {"settings": replace(engine.settings, lora_rank=8)})()
    saved = json.loads((actor / "trinity_engine.json").read_text())["settings"]
    with pytest.raises(ValueError, match="lora_rank: 4 then, 8 now"):
        VerlWeightsMixin._check_lora_matches(other, saved, actor)


def test_target_exclude_and_path_choose_and_continue_the_adapter(model_path, tmp_path, one_thread):
    pytest.importorskip("verl")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from trinity.launcher.trainer.verl_engine import VerlTrainEngine
    from trinity.launcher.trainer.verl_settings import VerlEngineSettings

    # a pre-trained adapter (B random, so it does something): q and v of layer 0 only
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    torch.manual_seed(3)
    peft_model = get_peft_model(
        base,
        LoraConfig(
            r=2,
            lora_alpha=6,
            target_modules=".*(q_proj|v_proj)",
            exclude_modules=".*layers\\.1\\..*",
            init_lora_weights=False,
        ),
    )
    peft_model.save_pretrained(tmp_path / "adapter")
    expected = peft_model.merge_and_unload().state_dict()

    config = lora_config(model_path, {"path": str(tmp_path / "adapter")})
    settings = VerlEngineSettings.from_config(config, device="cpu")
    assert (settings.lora_rank, settings.lora_alpha) == (2, 6)  # the adapter's own
    engine = VerlTrainEngine(settings)
    adapted = {n.split(".lora_")[0] for n, p in engine.module.named_parameters() if p.requires_grad}
    assert adapted == {
        "base_model.model.model.layers.0.self_attn.q_proj",
        "base_model.model.model.layers.0.self_attn.v_proj",
    }
    merged = engine.state_dict()
    assert set(merged) == set(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(merged[name], tensor, atol=1e-6, rtol=0)

    # a selection that matches no module is refused naming the field
    bad = replace(settings, lora_adapter_path=None, lora_target_modules="nothing_here")
    with pytest.raises(ValueError, match=r"model\.lora_configs\[0\]\.target_modules"):
        VerlTrainEngine(bad)


_TWO_RANKS = """
import sys, torch
from trinity.common.experience import collate_experiences
from trinity.launcher.trainer.verl_engine import TrinityLoss, VerlTrainEngine
from trinity.launcher.trainer.verl_lora import AdapterDisabledReference
from trinity.launcher.trainer.verl_settings import VerlEngineSettings

job = torch.load(sys.argv[1], weights_only=False)
engine = VerlTrainEngine(VerlEngineSettings(**job["settings"]))
rank = torch.distributed.get_rank()
batch = collate_experiences(job["shards"][rank], pad_token_id=0)
reference = AdapterDisabledReference(engine).compute_logprobs(batch)
engine.train_step(batch, TrinityLoss.from_algorithm(job["algorithm"]), extra={
    "ref_logprob": reference})
merged = engine.state_dict()  # collective: every rank gathers the merged weights
adapter = {n: p.full_tensor().detach().clone() for n, p in engine.module.named_parameters()
           if p.requires_grad}
torch.save({"merged": merged, "adapter": adapter, "reference": reference,
            "rows": len(job["shards"][rank])}, f"{job['out']}.{rank}")
"""


@pytest.mark.slow
def test_two_ranks_merge_the_sharded_adapter(model_path, tmp_path):
    """Two gloo ranks (FSDP2 shards every weight and adapter over them): each scores its rows
    with the adapter disabled as the base model does, and after a step the merged export is
    ``W + alpha / r * B @ A`` of the full (gathered) adapter on every rank."""
    pytest.importorskip("verl")
    from transformers import AutoModelForCausalLM

    from trinity.common.experience import collate_experiences
    from trinity.launcher.trainer.ranks import run_ranks

    exps = experiences(model_path)
    settings = dict(
        model_path=model_path,
        device="cpu",
        dtype="float32",
        lr=LR,
        lora_rank=RANK,
        lora_alpha=ALPHA,
    )
    job = tmp_path / "job.pt"
    algorithm = {"algorithm_type": "grpo", "kl_loss_fn": "k3"}
    torch.save(
        {
            "settings": settings,
            "shards": [exps[:2], exps[2:]],
            "algorithm": algorithm,
            "out": str(tmp_path / "out"),
        },
        job,
    )
    for rank, (code, log) in enumerate(run_ranks(_TWO_RANKS, [str(job)], 2, timeout=300)):
        assert code == 0, f"rank {rank} failed:\n{log[-3000:]}"
    results = [torch.load(f"{tmp_path / 'out'}.{r}", weights_only=False) for r in range(2)]
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    for rank, rows in enumerate((exps[:2], exps[2:])):
        expected = transformers_logprobs(base, collate_experiences(rows, pad_token_id=0))
        torch.testing.assert_close(results[rank]["reference"], expected, atol=1e-5, rtol=0)
    base_state = base.state_dict()
    for result in results:
        merged, adapter = result["merged"], result["adapter"]
        assert set(merged) == set(base_state)
        for layer in (0, 1):
            for proj in ("self_attn.q_proj", "mlp.down_proj"):
                name = f"model.layers.{layer}.{proj}"
                a = adapter[f"base_model.model.{name}.lora_A.default.weight"]
                b = adapter[f"base_model.model.{name}.lora_B.default.weight"]
                w = base_state[f"{name}.weight"]
                torch.testing.assert_close(
                    merged[f"{name}.weight"], w + (ALPHA / RANK) * b @ a, atol=1e-6, rtol=0
                )
                assert b.abs().max() > 0  # the step moved B: the merge adds something
        assert torch.equal(merged["model.norm.weight"], base_state["model.norm.weight"])


# ----------------------------------------------------------------------------- mode both


@pytest.mark.slow
def test_mode_both_on_the_quickstart_serves_base_plus_adapter(tmp_path):
    """The quickstart with an adapter and a KL loss for 4 steps: it trains, the engines take
    the adapter of every step (model version 0, 1, 2, 3) -- the adapter alone, a small fraction
    of the model's bytes -- and what they generated with after a sync is base + that adapter
    (its log-probs match the merged model the trainer wrote for that step, not the base
    model's)."""
    pytest.importorskip("vllm")
    pytest.importorskip("verl")
    import yaml
    from transformers import AutoModelForCausalLM

    from trinity.buffer.storage.sql import SQLStorage
    from trinity.common.config import ExperienceBufferConfig
    from trinity.common.experience import collate_experiences

    model = tmp_path / "model"
    subprocess.run(
        [sys.executable, "-m", "trinity.launcher.tiny_model", str(model), "--preset", "arithmetic"],
        check=True,
        capture_output=True,
    )
    config = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    config.update(name="lora", checkpoint_root_dir=str(tmp_path / "ckpt"))
    config["model"]["model_path"] = str(model)
    config["model"]["lora_configs"] = [{"lora_rank": 8, "lora_alpha": 16}]
    config["algorithm"].update(kl_loss_fn="k3", optimizer={"lr": 5e-3})
    config["buffer"]["total_steps"] = 4
    config["buffer"]["explorer_input"].pop("eval_tasksets")
    config["trainer"].update(save_interval=1, save_hf_checkpoint="always")
    raw = f"sqlite:///{tmp_path / 'raw.db'}"
    config["data_processor"] = {"experience_pipeline": {"save_input": True, "input_save_path": raw}}
    path = tmp_path / "lora.yaml"
    path.write_text(yaml.safe_dump(config))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "trinity-launch"), str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    run = tmp_path / "ckpt" / "trinity-quickstart" / "cpu" / "lora"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "actor/loss" in r]
    assert [r["step"] for r in trained] == [1, 2, 3, 4]
    assert trained[0]["actor/kl_loss"] == 0.0 < trained[-1]["actor/kl_loss"]
    assert [r["rollout/model_version"] for r in rows] == [0.0, 1.0, 2.0, 3.0]
    # only the adapter moved: rank 8 on the tiny model's linear layers, fp32
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    layout = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model),
        LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"),
    )
    adapter_bytes = sum(t.numel() * 4 for t in get_peft_model_state_dict(layout).values())
    full_bytes = sum(p.numel() * 4 for p in layout.get_base_model().parameters())
    synced = [r["sync/weight_bytes"] for r in rows if "sync/weight_bytes" in r]
    assert synced and set(synced) == {adapter_bytes}, (synced, adapter_bytes)
    assert adapter_bytes < full_bytes / 4

    storage = SQLStorage(ExperienceBufferConfig(name="explorer_output", path=raw))
    exps = [e for e in storage_experiences(storage) if e.model_version == 3]
    assert exps, "no experience generated after the third sync"
    batch = collate_experiences(exps, pad_token_id=0)
    merged = AutoModelForCausalLM.from_pretrained(
        run / "global_step_3" / "actor" / "huggingface", dtype=torch.float32
    ).eval()
    base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    served = batch.logprobs * batch.action_mask
    gap = (transformers_logprobs(merged, batch) - served).abs().max()
    base_gap = (transformers_logprobs(base, batch) - served).abs().max()
    assert gap < 1e-3 < base_gap, (gap, base_gap)


def storage_experiences(storage):
    from trinity.common.experience import Experience

    return [Experience.deserialize(data) for _, data in storage.select_after(0, 100_000)]
