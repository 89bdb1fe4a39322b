"""The verl view of ``trainer.trainer_config`` (compat D11): after ``check_and_update`` its
attributes are the settings this trainer really runs with -- the same values the engines are
built with -- while its items stay the keys the config names (so the derivation, e.g. D7's
"a budget you set is used as written", sees what it saw before)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from trinity.common import config as config_module
from trinity.common.config import TRAINER_VIEWS, Config, load_config
from trinity.launcher.trainer import build, critic, verl_engine, verl_settings


@pytest.fixture(autouse=True)
def _cuda_for_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    # the config's nccl check asks for CUDA; the trainer's own device stays this machine's
    monkeypatch.setattr(config_module._utils, "cuda_is_available", lambda: True)


def model_dir(tmp_path: Path, hidden: int = 32) -> str:
    """A local model directory: only ``config.json`` (no engine is built here)."""
    path = tmp_path / "model"
    path.mkdir(exist_ok=True)
    dims = {"vocab_size": 1000, "hidden_size": hidden, "num_hidden_layers": 2}
    (path / "config.json").write_text(
        json.dumps({"model_type": "qwen2", "max_position_embeddings": 4096, **dims})
    )
    return str(path)


def checked(tmp_path: Path, **sections: Any) -> Config:
    data = tmp_path / "tasks.jsonl"
    data.write_text('{"question": "1+1=", "answer": "2"}\n')
    raw: dict[str, Any] = {
        "project": "p",
        "name": "n",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "ppo"},
        "model": {"model_path": model_dir(tmp_path), "max_model_len": 64},
        "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": str(data)}}},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return load_config(raw).check_and_update()


def engines_built(config: Config, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The settings ``build_local_cpu_engines`` gives the policy and critic engines on the CPU
    (their classes replaced by recorders, so no model is loaded)."""
    got: dict[str, Any] = {}

    class Policy:
        def __init__(self, settings: Any) -> None:
            got.setdefault("policy", settings)

    class Critic(critic.VerlCriticEngine):
        def __init__(self, settings: Any, value_loss: Any = None) -> None:
            got.update(critic=settings, value_loss=value_loss)

    monkeypatch.setattr(verl_settings, "default_device", lambda: "cpu")  # one rank, here
    monkeypatch.setattr(verl_engine, "VerlTrainEngine", Policy)
    monkeypatch.setattr(critic, "VerlCriticEngine", Critic)
    assert build.build_local_cpu_engines(config) is not None
    return got


def test_the_launcher_advertises_the_verl_view() -> None:
    assert TRAINER_VIEWS.origin("verl") == "trinity.launcher.trainer.verl_view:verl_view"


def test_the_view_is_what_the_engines_are_built_with(tmp_path, monkeypatch) -> None:
    written = {
        "critic": {"optim": {"lr": 1e-5}, "ppo_micro_batch_size_per_gpu": 3},
        "actor_rollout_ref": {"actor": {"checkpoint": {"save_contents": ["model"]}}},
    }
    config = checked(
        tmp_path,
        algorithm={
            "algorithm_type": "ppo",
            "optimizer": {"lr": 1e-4, "weight_decay": 0.05, "clip_grad": 2.0},
        },
        trainer={"trainer_config": written, "ulysses_sequence_parallel_size": 1},
    )
    got = engines_built(config, monkeypatch)
    policy, critic_settings, value_loss = got["policy"], got["critic"], got["value_loss"]
    tc = config.trainer.trainer_config
    actor = tc.actor_rollout_ref.actor
    assert actor.ppo_max_token_len_per_gpu == policy.max_token_len_per_gpu
    assert actor.ppo_micro_batch_size_per_gpu == policy.micro_batch_size
    assert (actor.use_dynamic_bsz, actor.grad_clip) == (policy.use_dynamic_bsz, 2.0)
    assert (actor.optim.lr, actor.optim.weight_decay, actor.optim.clip_grad) == (1e-4, 0.05, 2.0)
    assert actor.optim.optimizer == policy.optimizer == "AdamW"
    assert actor.optim.total_training_steps == policy.total_training_steps
    assert actor.checkpoint.save_contents == ["model"]  # a key the trainer does not read
    ref = tc.actor_rollout_ref.ref
    assert ref.log_prob_max_token_len_per_gpu == policy.max_token_len_per_gpu
    assert ref.log_prob_micro_batch_size_per_gpu == policy.micro_batch_size
    assert tc.actor_rollout_ref.model.path == policy.model_path == config.model.model_path

    assert tc.critic.enable is True
    assert tc.critic.ppo_max_token_len_per_gpu == critic_settings.max_token_len_per_gpu
    assert tc.critic.ppo_micro_batch_size_per_gpu == critic_settings.micro_batch_size == 3
    assert tc.critic.optim.lr == critic_settings.lr == 1e-5
    # keys the critic section leaves out take the policy's values (ours, not verl's defaults)
    assert tc.critic.optim.weight_decay == critic_settings.weight_decay == 0.05
    assert tc.critic.grad_clip == tc.critic.optim.clip_grad == critic_settings.grad_clip
    assert tc.critic.cliprange_value == value_loss.cliprange_value

    assert (tc.trainer.n_gpus_per_node, tc.trainer.nnodes) == (1, 1)  # one rank, this process
    assert (tc.trainer.project_name, tc.trainer.experiment_name) == ("p", config.name)
    # reading the view changed nothing: the items are the keys written
    assert tc == written and config.to_dict()["trainer"]["trainer_config"] == written


def test_a_derived_budget_shows_as_derived_and_a_set_one_as_written(tmp_path) -> None:
    """D7: an unset ``max_token_len_per_gpu`` is raised to a small model's floor; a set one is
    used as written. The view shows each, and the items do not gain the key."""
    floor = verl_settings.micro_batch_token_floor(model_dir(tmp_path))
    derived = checked(tmp_path, trainer={"ulysses_sequence_parallel_size": 2})
    assert floor // 2 > math.ceil(2 * 64 / 2)
    tc = derived.trainer.trainer_config
    assert tc.actor_rollout_ref.actor.ppo_max_token_len_per_gpu == floor // 2
    assert tc.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu == floor // 2
    assert tc.critic.ppo_max_token_len_per_gpu == floor // 2
    assert "actor_rollout_ref" not in tc and dict(tc) == {}

    written = checked(tmp_path, trainer={"max_token_len_per_gpu": 100})
    assert written.trainer.trainer_config.actor_rollout_ref.actor.ppo_max_token_len_per_gpu == 100
    settings = build.trainer_plan(written).settings
    assert settings.max_token_len_per_gpu == 100


def test_a_schedule_in_verls_and_megatrons_names(tmp_path) -> None:
    config = checked(
        tmp_path,
        algorithm={
            "algorithm_type": "grpo",
            "optimizer": {"lr": 1e-4, "lr_scheduler_type": "cosine", "min_lr_ratio": 0.01},
        },
        buffer={"total_steps": 50},
    )
    optim = config.trainer.trainer_config.actor_rollout_ref.actor.optim
    assert (optim.lr_decay_style, optim.lr_decay_steps, optim.total_training_steps) == (
        "cosine",
        50,
        50,
    )
    assert optim.min_lr == pytest.approx(1e-6)
    assert optim.lr_warmup_init == 0.0  # verl's FSDP warm-up starts from 0
    assert config.trainer.trainer_config.critic.enable is False  # GRPO has no critic
    with pytest.raises(AttributeError, match="critic.optim"):
        config.trainer.trainer_config.critic.optim  # noqa: B018


def test_a_config_the_trainer_refuses_has_no_view(tmp_path) -> None:
    # a cosine schedule needs the run's length: buffer.total_steps or trainer.total_steps
    config = checked(tmp_path, algorithm={"optimizer": {"lr_scheduler_type": "cosine"}})
    with pytest.raises(ValueError, match="refuses this config.*total_training_steps=-1"):
        config.trainer.trainer_config.actor_rollout_ref  # noqa: B018


def test_the_schedule_ends_where_training_does(tmp_path) -> None:
    """The lr schedule's length is where the train loop stops: the smaller of
    ``buffer.total_steps`` and ``trainer.total_steps`` (Trinity-RFT 0.6 takes the latter)."""
    for buffer_steps, trainer_steps, length in ((None, 1000, 1000), (30, 1000, 30), (30, 12, 12)):
        config = checked(
            tmp_path,
            algorithm={"optimizer": {"lr_scheduler_type": "cosine"}},
            buffer={"total_steps": buffer_steps},
            trainer={"total_steps": trainer_steps},
        )
        optim = config.trainer.trainer_config.actor_rollout_ref.actor.optim
        assert optim.lr_decay_steps == length, (buffer_steps, trainer_steps)


def test_gpu_counts_are_the_trainers_ranks(tmp_path, monkeypatch) -> None:
    """On CUDA the trainer takes the cluster's GPUs left after the rollout engines, packed per
    node; verl's own ``n_gpus_per_node`` / ``nnodes`` win where written."""
    monkeypatch.setattr(verl_settings, "default_device", lambda: "cuda")
    config = checked(
        tmp_path,
        cluster={"node_num": 3, "gpu_per_node": 4},
        explorer={"rollout_model": {"engine_num": 4}},
        buffer={"batch_size": 8},
    )
    trainer = config.trainer.trainer_config.trainer
    assert (trainer.n_gpus_per_node, trainer.nnodes, trainer.device) == (4, 2, "cuda")
    assert build.trainer_plan(config).world_size == 8

    monkeypatch.setattr(verl_settings, "default_device", lambda: "cpu")
    config = checked(
        tmp_path, trainer={"trainer_config": {"trainer": {"n_gpus_per_node": 2, "nnodes": 2}}}
    )
    trainer = config.trainer.trainer_config.trainer
    assert (trainer.n_gpus_per_node, trainer.nnodes, trainer.device) == (2, 2, "cpu")
    assert build.trainer_plan(config).world_size == 4
