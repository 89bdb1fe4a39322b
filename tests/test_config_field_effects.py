"""Config fields reach the code that acts on them: the effect tests of fields no other test covers.

``config_field_coverage.yaml`` names, for every field a run reads, the tests that check its
effect. Most live with the code that reads the field; these cover the rest, each at the first
place the field changes what the run does -- the settings an engine or the trainer is built
with, the arguments Ray and the monitors get, what the checkpointer keeps -- without starting
Ray, vLLM or verl (so they run in seconds, anywhere).
"""

from __future__ import annotations

import asyncio
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from trinity.common.config import FormatConfig, StorageConfig, load_config


def test_engine_settings_carry_the_engine_fields() -> None:
    """Every engine setting of ``explorer.rollout_model`` (and the ``model`` defaults it
    inherits) reaches the ``EngineSettings`` the engine is started with."""
    from trinity.launcher.engines import engine_settings

    inherited = load_config(
        {
            "model": {
                "model_path": "/models/m",
                "trust_remote_code": True,
                "custom_chat_template": "{{ messages }}",
                "top_p": 0.9,
                "top_k": 5,
                "max_model_len": 200,
                "max_prompt_tokens": 120,
                "min_response_tokens": 2,
                "enable_prompt_truncation": False,
                "repetition_penalty": 1.1,
                "enable_thinking": True,
            }
        }
    )
    s = engine_settings(inherited.explorer.rollout_model, inherited.model)
    assert (s.trust_remote_code, s.chat_template) == (True, "{{ messages }}")
    assert (s.top_p, s.top_k) == (0.9, 5)
    assert (s.max_model_len, s.max_prompt_tokens, s.max_response_tokens) == (200, 120, 80)
    assert (s.min_response_tokens, s.enable_prompt_truncation) == (2, False)
    assert (s.repetition_penalty, s.enable_thinking) == (1.1, True)
    from_file = load_config({"model": {"model_path": "/m", "chat_template_path": "/t.jinja"}})
    assert engine_settings(from_file.explorer.rollout_model, from_file.model).chat_template == (
        "/t.jinja"
    )

    own: dict[str, Any] = {
        "name": "policy",
        "trust_remote_code": True,
        "engine_type": "transformers",
        "tensor_parallel_size": 2,
        "extra_engine_args": {"max_num_seqs": 4},
        "enforce_eager": True,
        "enable_prefix_caching": False,
        "enable_chunked_prefill": False,
        "gpu_memory_utilization": 0.5,
        "dtype": "float16",
        "seed": 7,
        "temperature": 0.3,
        "top_p": 0.8,
        "top_k": 4,
        "max_model_len": 300,
        "max_prompt_tokens": 100,
        "max_response_tokens": 150,
        "min_response_tokens": 3,
        "enable_prompt_truncation": False,
        "repetition_penalty": 1.2,
        "ignore_eos": True,
        "chat_template": "{{ t }}",
        "enable_thinking": False,
        "enable_history": True,
        "enable_openai_api": True,
        "enable_log_requests": True,
        "base_port": 9000,
        "api_key": "secret",
        "enable_auto_tool_choice": True,
        "tool_call_parser": "hermes",
        "reasoning_parser": "deepseek_r1",
    }
    config = load_config({"model": {"model_path": "/m"}, "explorer": {"rollout_model": own}})
    settings = engine_settings(config.explorer.rollout_model, config.model)
    assert {key: getattr(settings, key) for key in own} == own


def test_an_external_engine_reads_its_api_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``model.external_model``: the URL and key come from the variables it names (never from
    the file), and the served model is ``model_name``."""
    from trinity.launcher.engines import engine_settings

    monkeypatch.setenv("MY_URL", "http://api.example/v1")
    monkeypatch.setenv("MY_KEY", "k-123")
    config = load_config(
        {
            "mode": "bench",
            "model": {
                "external_model": {
                    "enable": True,
                    "base_url_env": "MY_URL",
                    "api_key_env": "MY_KEY",
                    "model_name": "gpt-x",
                }
            },
        }
    )
    s = engine_settings(config.explorer.rollout_model, config.model)
    assert (s.engine_type, s.base_url, s.api_key) == ("external", "http://api.example/v1", "k-123")
    assert s.served_model_name == "gpt-x"


def test_verl_settings_carry_the_optimizer_and_trainer_fields() -> None:
    """``algorithm.optimizer`` and the ``trainer`` section reach the verl engine's settings;
    the deprecated names (``warmup_style``, ``ppo_max_token_len_per_gpu``) as their new ones."""
    from trinity.launcher.trainer.verl_settings import VerlEngineSettings

    config = load_config(
        {
            "model": {"model_path": "/models/m", "max_model_len": 64, "trust_remote_code": True},
            "algorithm": {
                "optimizer": {
                    "lr_warmup_steps": 5,
                    "lr_warmup_steps_ratio": 0.1,
                    "min_lr_ratio": 0.2,
                    "warmup_style": "cosine",
                    "optimizer_type": "sgd",
                    "weight_decay": 0.05,
                    "clip_grad": 0.3,
                }
            },
            "trainer": {
                "param_offload": True,
                "optimizer_offload": True,
                "use_dynamic_bsz": False,
                "ulysses_sequence_parallel_size": 2,
                "ppo_max_token_len_per_gpu": 512,
                "total_steps": 10,
            },
        }
    )
    s = VerlEngineSettings.from_config(config)
    assert (s.lr_warmup_steps, s.lr_warmup_steps_ratio, s.min_lr_ratio) == (5, 0.1, 0.2)
    assert (s.lr_scheduler_type, s.optimizer, s.weight_decay, s.grad_clip) == (
        "cosine",
        "SGD",
        0.05,
        0.3,
    )
    assert (s.use_remove_padding, s.param_offload, s.optimizer_offload) == (True, True, True)
    assert (s.use_dynamic_bsz, s.ulysses_sequence_parallel_size) == (False, 2)
    assert (s.max_token_len_per_gpu, s.trust_remote_code, s.total_training_steps) == (512, True, 10)
    assert config.trainer.trust_remote_code is True  # copied from the model section
    padded = {"model": {"model_path": "/m", "max_model_len": 64}}
    padded["trainer"] = {"use_remove_padding": False}
    assert VerlEngineSettings.from_config(load_config(padded)).use_remove_padding is False


def test_run_identity_names_the_monitor_run_and_the_job_dir(tmp_path: Path) -> None:
    """``project`` / ``group`` / ``name`` name the monitor run and, under
    ``checkpoint_root_dir``, the job directory; ``monitor.cache_dir`` moves the monitor files."""
    from trinity.launcher.monitor import _monitor_dir, _run_name

    config = load_config(
        {"project": "p", "group": "g", "name": "n", "checkpoint_root_dir": str(tmp_path)}
    )
    assert config.checkpoint_job_dir == str(tmp_path / "p" / "g" / "n")
    assert _run_name(config) == "p/g/n"
    assert _monitor_dir(config, "tb") == str(tmp_path / "p" / "g" / "n" / "monitor" / "tb")
    cached = load_config({"monitor": {"cache_dir": str(tmp_path / "elsewhere")}})
    assert _monitor_dir(cached, "tb") == str(tmp_path / "elsewhere" / "tb")


def test_monitor_args_reach_the_wandb_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``monitor.monitor_args`` are W&B's own arguments (a stand-in ``wandb`` records them)."""
    calls: list[dict[str, Any]] = []
    fake = types.ModuleType("wandb")
    fake.init = lambda **kwargs: calls.append(kwargs) or types.SimpleNamespace()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wandb", fake)
    from trinity.launcher.monitor import WandbMonitor

    config = load_config(
        {
            "checkpoint_root_dir": str(tmp_path),
            "monitor": {
                "monitor_type": "wandb",
                "monitor_args": {"mode": "disabled", "tags": ["a"]},
            },
        }
    )
    WandbMonitor(config)
    assert calls[0]["mode"] == "disabled" and calls[0]["tags"] == ["a"]


def test_ray_init_joins_the_configured_cluster_in_the_run_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trinity.launcher.run.ray_session import ray_init_kwargs

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = load_config({"ray_namespace": "ns", "cluster": {"ray_address": "10.0.0.1:6379"}})
    kwargs = ray_init_kwargs(config)
    assert (kwargs["address"], kwargs["namespace"]) == ("10.0.0.1:6379", "ns")
    assert "address" not in ray_init_kwargs(load_config({}))  # auto: a local Ray


def test_placement_waits_placement_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The placement groups are awaited ``cluster.placement_timeout`` seconds."""
    from trinity.launcher import placement

    waited: list[float] = []

    class Reserved:
        def log_table(self) -> None: ...

        def remove(self) -> None: ...

    def create(cls: Any, plan: Any, timeout: float) -> Reserved:
        waited.append(timeout)
        return Reserved()

    monkeypatch.setattr(placement.Placement, "create", classmethod(create))
    monkeypatch.setattr(placement, "cluster_has_gpus", lambda: False)
    with placement.placement_session(load_config({"cluster": {"placement_timeout": 12.5}})):
        pass
    assert waited == [12.5]


def test_checkpoint_settings_come_from_the_config(tmp_path: Path) -> None:
    """``trainer.max_checkpoints_to_keep`` prunes the oldest step checkpoints;
    ``explorer.eval_on_startup`` decides the evaluation before the first step."""
    from trinity.launcher.checkpoint import CheckpointSettings, RunCheckpointer

    def checkpointer(keep: int, eval_on_startup: bool) -> RunCheckpointer:
        config = load_config(
            {
                "checkpoint_root_dir": str(tmp_path),
                "trainer": {"max_checkpoints_to_keep": keep},
                "explorer": {"eval_on_startup": eval_on_startup},
                "buffer": {"explorer_input": {"eval_tasksets": [{"path": "eval"}]}},
            }
        )
        return RunCheckpointer(CheckpointSettings.from_config(config))

    kept = checkpointer(2, False)
    for step in (1, 2, 3, 4):
        os.makedirs(kept.step_dir(step))
    kept._prune()
    assert sorted(os.listdir(kept.job_dir)) == ["global_step_3", "global_step_4"]
    assert not kept.first_eval_due(0) and checkpointer(0, True).first_eval_due(0)


def test_trainer_ranks_per_node_come_from_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """On GPUs the trainer's Ray ranks are laid out ``cluster.trainer_gpu_num_per_node`` per
    node (computed from the cluster's sizes)."""
    from trinity.launcher.trainer import verl_compat
    from trinity.launcher.trainer.workers import trainer_layout

    monkeypatch.setattr(verl_compat, "default_device", lambda: "cuda")
    config = load_config(
        {
            "cluster": {"node_num": 3, "gpu_per_node": 4},
            "buffer": {"batch_size": 8},
            "explorer": {"rollout_model": {"tensor_parallel_size": 4}},
        }
    )
    assert config.cluster.trainer_gpu_num_per_node == 4
    layout = trainer_layout(config)
    assert layout == {"trainer_ranks": 8, "trainer_device": "cuda", "ranks_per_node": 4}


def test_a_sql_storage_retries_as_configured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A failing SQL operation is retried ``max_retry_times`` times, ``max_retry_interval``
    seconds apart."""
    from sqlalchemy.exc import OperationalError

    from trinity.buffer.storage import sql

    slept: list[float] = []
    monkeypatch.setattr(sql.time, "sleep", slept.append)
    storage = sql.SQLStorage(
        StorageConfig(
            name="retries",
            storage_type="sql",
            path=f"sqlite:///{tmp_path / 'r.db'}",
            max_retry_times=2,
            max_retry_interval=3,
        )
    )
    tries: list[int] = []

    def locked() -> None:
        tries.append(1)
        raise OperationalError("INSERT", {}, Exception("database is locked"))

    with pytest.raises(OperationalError):
        storage._retry(locked)
    storage.close()
    assert (len(tries), slept) == (3, [3.0, 3.0])


def test_a_ray_queue_lives_in_its_storages_namespace() -> None:
    """A storage's actor (a queue's, a SQL storage's) is in its ``ray_namespace``."""
    pytest.importorskip("ray")
    from trinity.buffer.storage.ray_actor import actor_namespace

    assert actor_namespace(StorageConfig(name="q", ray_namespace="jobs/a")) == "jobs/a"


def test_a_data_sets_schema_type_picks_its_formatter() -> None:
    from trinity.launcher.trainer.data import schema_of

    assert schema_of(StorageConfig(name="d", schema_type="DPO")) == "dpo"
    assert schema_of(StorageConfig(name="d")) is None


def test_a_data_sets_enable_thinking_reaches_the_chat_template() -> None:
    """``format.enable_thinking`` is passed to the tokenizer's chat template (Qwen3-style)."""
    from trinity.buffer.formatter import SFTFormatter

    seen: list[dict[str, Any]] = []

    class Tokenizer:
        def apply_chat_template(self, messages: Any, **kwargs: Any) -> list[int]:
            seen.append(kwargs)
            return [1, 2]

    for value in (False, None):
        SFTFormatter(Tokenizer(), FormatConfig(enable_thinking=value)).render([], True)
    assert seen[0]["enable_thinking"] is False and "enable_thinking" not in seen[1]


def test_bypass_old_logprobs_decides_whether_old_logprobs_are_recomputed() -> None:
    """With the rollout's log-probs at hand, ``algorithm.bypass_old_logprobs`` (default true)
    uses them as the old ones; false recomputes them."""
    from trinity.launcher.trainer.trainer import Trainer

    def recomputes(bypass: bool) -> bool:
        config = load_config({"algorithm": {"bypass_old_logprobs": bypass}})
        trainer = types.SimpleNamespace(
            config=config,
            rollout_correction=None,
            loss=types.SimpleNamespace(required_fields=lambda: {"old_logprob"}),
        )
        batch = types.SimpleNamespace(logprobs=[0.0])
        return Trainer._recompute_old_logprob(trainer, batch, {})  # type: ignore[arg-type]

    assert not recomputes(True) and recomputes(False)


def test_bench_on_latest_checkpoint_evaluates_only_the_latest(tmp_path: Path) -> None:
    """Mode bench evaluates the model as loaded, then every checkpoint; with
    ``explorer.bench_on_latest_checkpoint`` only the latest."""
    from trinity.launcher.explorer import Explorer

    for step in (1, 2):
        weights = tmp_path / f"global_step_{step}" / "actor" / "huggingface"
        weights.mkdir(parents=True)
        (weights / "model.safetensors").write_bytes(b"")

    def benched(latest: bool) -> list[int]:
        config = load_config({"mode": "bench", "explorer": {"bench_on_latest_checkpoint": latest}})
        config.checkpoint_job_dir = str(tmp_path)

        async def load_weights(path: str, step: int) -> None: ...

        async def evaluate(step: int) -> dict[str, float]:
            return {"step": float(step)}

        explorer = types.SimpleNamespace(
            config=config, progress=None, load_weights=load_weights, eval=evaluate
        )
        return sorted(asyncio.run(Explorer.bench(explorer)))  # type: ignore[arg-type]

    assert benched(False) == [0, 1, 2] and benched(True) == [2]


def test_the_explorer_saves_its_raw_output_where_configured(tmp_path: Path) -> None:
    """``experience_pipeline.save_input`` with ``input_save_path`` keeps the explorer's raw
    experiences in that SQL database; the pipeline writes to its ``output`` when set."""
    from trinity.launcher.explorer import Explorer

    def pipeline(save_input: bool) -> Any:
        config = load_config(
            {
                "data_processor": {
                    "experience_pipeline": {
                        "save_input": save_input,
                        "input_save_path": f"sqlite:///{tmp_path / 'raw.db'}",
                        "output": {
                            "name": "processed",
                            "storage_type": "file",
                            "path": str(tmp_path / "out.jsonl"),
                        },
                    }
                }
            }
        )
        explorer = types.SimpleNamespace(config=config, advantage_fn=None, operators=[])
        return Explorer._build_pipeline(explorer)  # type: ignore[arg-type]

    saving = pipeline(True)
    assert saving.input_writer is not None
    assert saving.writer.config.name == "processed"
    assert pipeline(False).input_writer is None
