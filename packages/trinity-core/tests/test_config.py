"""Tests of the run-config schema: defaults, loading, error reporting, cross-field rules."""

from __future__ import annotations

import ast
import logging
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from trinity.common import config as config_module
from trinity.common.config import (
    AlgorithmConfig,
    Config,
    ConfigError,
    ExperienceBufferConfig,
    ExplorerConfig,
    FormatConfig,
    GenerationConfig,
    InferenceModelConfig,
    OptimizerConfig,
    StorageConfig,
    SynchronizerConfig,
    TasksetConfig,
    TrainerConfig,
    load_config,
    save_config,
)

DATA = Path(__file__).parent / "data" / "configs"
FULL = DATA / "grpo_full.yaml"


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_error(source: Any, **kwargs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(source, **kwargs)
    return info.value


def issue_at(error: ConfigError, path: str):
    matches = [issue for issue in error.errors if issue.path == path]
    assert matches, f"no issue at {path!r}; got {[i.path for i in error.errors]}"
    return matches[0]


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


# Run-level checks refuse local input paths that do not exist: data sets here are this directory.
DATA_DIR = str(Path(__file__).resolve().parent)
# ... and so do they refuse a model that is not a local model directory: a config.json here.
MODEL_DIR = str(Path(__file__).resolve().parent / "data" / "model")


def runnable(**overrides: Any) -> dict[str, Any]:
    """A minimal config that passes the run-level checks in mode both."""
    data: dict[str, Any] = {
        "checkpoint_root_dir": "/tmp/ckpt",
        "model": {"model_path": MODEL_DIR, "max_model_len": 2048},
        "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": DATA_DIR}}},
    }
    return merge(data, overrides)


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch):
    def set_cuda(available: bool) -> None:
        monkeypatch.setattr(config_module._utils, "cuda_is_available", lambda: available)

    set_cuda(True)
    return set_cuda


# ------------------------------------------------------------------------ defaults


def test_defaults_match_trinity_rft() -> None:
    config = Config()
    assert config.mode == "both"
    assert config.project == "Trinity-RFT"
    assert config.name == "rft"
    assert config.continue_from_checkpoint is True
    assert config.algorithm.algorithm_type == "ppo"
    assert config.algorithm.repeat_times == 1
    assert config.algorithm.advantage_fn is None and config.algorithm.policy_loss_fn_args is None
    assert OptimizerConfig().lr == 1e-6
    assert OptimizerConfig().betas == [0.9, 0.999]
    assert OptimizerConfig().weight_decay == 0.01
    assert OptimizerConfig().lr_scheduler_type == "constant"
    fmt = FormatConfig()
    assert (fmt.prompt_type, fmt.prompt_key, fmt.response_key) == ("messages", "prompt", "response")
    assert (fmt.messages_key, fmt.tools_key, fmt.chosen_key, fmt.rejected_key) == (
        "message",
        "tools",
        "chosen",
        "rejected",
    )
    assert fmt.system_prompt is None and fmt.reply_prefix is None and fmt.image_key is None
    gen = GenerationConfig()
    assert (gen.temperature, gen.top_p, gen.top_k, gen.logprobs, gen.n) == (1.0, 1.0, -1, 0, 1)
    assert gen.max_tokens is None
    engine = InferenceModelConfig()
    assert engine.engine_type == "vllm" and engine.engine_num == 1
    assert engine.tensor_parallel_size == 1 and engine.gpu_memory_utilization == 0.9
    assert engine.enable_prefix_caching is True and engine.enforce_eager is False
    assert engine.dtype == "bfloat16" and engine.seed == 42
    assert engine.enable_openai_api is False and engine.enable_history is False
    explorer = ExplorerConfig()
    assert (explorer.runner_per_model, explorer.max_timeout, explorer.max_retry_times) == (
        8,
        1800,
        2,
    )
    assert explorer.eval_interval == 100 and explorer.bench_on_latest_checkpoint is False
    sync = SynchronizerConfig()
    assert (sync.sync_method, sync.sync_style, sync.sync_interval, sync.sync_offset) == (
        "nccl",
        "fixed",
        1,
        0,
    )
    assert sync.sync_timeout == 3600
    trainer = TrainerConfig()
    assert trainer.trainer_type == "verl" and trainer.save_interval == 0
    assert trainer.grad_clip == 1.0 and trainer.ulysses_sequence_parallel_size == 1
    assert trainer.trainer_config == {}
    assert config.monitor.monitor_type == "tensorboard"
    assert config.log.level == "INFO"
    assert config.buffer.batch_size == 1 and config.buffer.total_epochs == 1
    storage = StorageConfig()
    assert storage.storage_type == "file" and storage.split == "train"
    assert storage.capacity == 10000 and storage.max_read_timeout == 1800
    assert TasksetConfig().storage_type == "file"
    assert ExperienceBufferConfig().storage_type == "queue"


def test_every_section_forbids_unknown_keys() -> None:
    for model in (Config, AlgorithmConfig, FormatConfig, StorageConfig, TrainerConfig):
        assert model.model_config["extra"] == "forbid"


# ------------------------------------------------------------------ guide snippets


def test_guide_taskset_snippet_with_default_workflow_alias(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        # some config
        buffer:
          explorer_input:
            taskset:
              default_workflow: "math_workflow"
              path: "/PATH/TO/FILE/DIR"
              format:
                prompt_key: "question"
                response_key: "answer"
              rollout_args:
                temperature: 1.0
        """,
    )
    config = load_config(path)
    taskset = config.buffer.explorer_input.taskset
    assert taskset is not None
    assert taskset.default_workflow_type == "math_workflow"
    assert taskset.path == "/PATH/TO/FILE/DIR"
    assert (taskset.format.prompt_key, taskset.format.response_key) == ("question", "answer")
    assert taskset.rollout_args.temperature == 1.0
    assert taskset.name == "taskset_0" and taskset.is_eval is False


def test_guide_default_workflow_type_snippet(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        buffer:
          explorer_input:
            taskset:
              path: /path/to/taskset
              default_workflow_type: example_workflow
        """,
    )
    taskset = load_config(path).buffer.explorer_input.taskset
    assert taskset is not None and taskset.default_workflow_type == "example_workflow"


def test_alias_and_field_name_together_is_an_error() -> None:
    error = load_error(
        {
            "buffer": {
                "explorer_input": {
                    "taskset": {"default_workflow": "a", "default_workflow_type": "b"}
                }
            }
        }
    )
    assert "another spelling of 'default_workflow_type'" in str(error)


def test_guide_algorithm_snippets(tmp_path: Path) -> None:
    assert load_config({"algorithm": {"algorithm_type": "opmd"}}).algorithm.algorithm_type == "opmd"
    path = write(
        tmp_path,
        """
        algorithm:
          algorithm_type: "opmd"
          repeat_times: 8
          advantage_fn_args:
            opmd_baseline: "logavgexp"
            tau: 0.99
          policy_loss_fn_args:
            tau: 0.99
        """,
    )
    algorithm = load_config(path).algorithm
    assert algorithm.repeat_times == 8
    assert algorithm.advantage_fn_args == {"opmd_baseline": "logavgexp", "tau": 0.99}
    assert algorithm.policy_loss_fn_args == {"tau": 0.99}
    assert algorithm.advantage_fn is None  # resolved later against the algorithm registry


def test_guide_operator_and_synchronizer_snippet(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        data_processor:
          experience_pipeline:
            operators:
              - name: "reward_filter"
                args:
                  threshold: 0.1
        synchronizer:
          sync_method: nccl
          sync_style: dynamic_by_explorer
          sync_interval: 2
        """,
    )
    config = load_config(path)
    (operator,) = config.data_processor.experience_pipeline.operators
    assert operator.name == "reward_filter" and operator.args == {"threshold": 0.1}
    assert config.synchronizer.sync_method == "nccl"  # mode both: NCCL is fine
    assert config.synchronizer.sync_style == "dynamic_by_explorer"
    assert config.synchronizer.explorer_sync_interval == 2
    assert config.warnings == []


def test_guide_snippets_combined_are_runnable(tmp_path: Path, cuda) -> None:
    data = runnable(
        algorithm={"algorithm_type": "opmd", "repeat_times": 8},
        synchronizer={"sync_method": "nccl", "sync_style": "dynamic_by_explorer"},
    )
    config = load_config(data, check=True)
    assert config.synchronizer.sync_method == "nccl"
    assert config.buffer.train_batch_size == 32


def test_enum_like_values_are_case_insensitive_and_accept_trinity_aliases() -> None:
    config = load_config(
        {
            "mode": "Both",
            "synchronizer": {"sync_method": "ONLINE", "sync_style": "explorer_driven"},
            "log": {"level": "debug"},
        }
    )
    assert config.mode == "both"
    assert config.synchronizer.sync_method == "nccl"
    assert config.synchronizer.sync_style == "dynamic_by_explorer"
    assert config.log.level == "DEBUG"


# ------------------------------------------------------------------ interpolation


ENV_YAML = """
model:
  model_path: ${oc.env:TRINITY_TEST_MODEL,/default/model}
  max_model_len: ${oc.env:TRINITY_TEST_LEN,4096}
explorer:
  rollout_model:
    chat_template: ${model.model_path}
"""


def test_env_interpolation_uses_default_when_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRINITY_TEST_MODEL", raising=False)
    monkeypatch.delenv("TRINITY_TEST_LEN", raising=False)
    config = load_config(write(tmp_path, ENV_YAML))
    assert config.model.model_path == "/default/model"
    assert config.model.max_model_len == 4096
    assert config.explorer.rollout_model.chat_template == "/default/model"


def test_env_interpolation_uses_variable_when_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRINITY_TEST_MODEL", "/from/env")
    monkeypatch.setenv("TRINITY_TEST_LEN", "1024")
    config = load_config(write(tmp_path, ENV_YAML))
    assert config.model.model_path == "/from/env"
    assert config.model.max_model_len == 1024
    assert config.explorer.rollout_model.model_path == "/from/env"


def test_unresolvable_interpolation_names_file_path_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRINITY_TASKSET_PATH", raising=False)
    path = write(
        tmp_path,
        """
        buffer:
          explorer_input:
            taskset:
              path: ${oc.env:TRINITY_TASKSET_PATH}
        """,
    )
    error = load_error(path)
    issue = issue_at(error, "buffer.explorer_input.taskset.path")
    assert issue.file == str(path) and issue.line == 5
    assert "TRINITY_TASKSET_PATH" in issue.message
    assert f"{path}:5" in str(error)


def test_dict_input_is_interpolated_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRINITY_TEST_PROJECT", "from-env")
    config = load_config({"project": "${oc.env:TRINITY_TEST_PROJECT,x}"})
    assert config.project == "from-env"


# ------------------------------------------------------------------ error reporting


def test_unknown_key_suggests_nearest(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        synchronizer:
          sync_methdo: nccl
        """,
    )
    error = load_error(path)
    issue = issue_at(error, "synchronizer.sync_methdo")
    assert issue.message == "unknown key 'sync_methdo'; did you mean 'sync_method'?"
    assert issue.line == 3 and issue.kind == "unknown_key"


def test_task_set_suggests_taskset() -> None:
    error = load_error({"buffer": {"explorer_input": {"task_set": {"path": "x"}}}})
    issue = issue_at(error, "buffer.explorer_input.task_set")
    assert "did you mean 'taskset'?" in issue.message


def test_bad_literal_lists_allowed_values() -> None:
    error = load_error({"synchronizer": {"sync_method": "carrier_pigeon"}, "mode": "fly"})
    issue = issue_at(error, "synchronizer.sync_method")
    assert issue.value == "carrier_pigeon"
    for allowed in ("'nccl'", "'checkpoint'", "'memory'"):
        assert allowed in issue.message
    mode_issue = issue_at(error, "mode")
    for allowed in ("both", "explore", "train", "bench", "serve"):
        assert allowed in mode_issue.message


def test_type_error_names_path_and_expected_type() -> None:
    error = load_error(
        {"buffer": {"explorer_input": {"taskset": {"format": {"prompt_key": ["a"]}}}}}
    )
    issue = issue_at(error, "buffer.explorer_input.taskset.format.prompt_key")
    assert "expected a string" in issue.message and "list" in issue.message
    assert issue.value == ["a"]

    error = load_error({"algorithm": {"repeat_times": "many"}, "buffer": {"batch_size": 1.5}})
    assert "expected an integer" in issue_at(error, "algorithm.repeat_times").message
    assert "expected an integer" in issue_at(error, "buffer.batch_size").message


def test_multiple_errors_are_reported_together(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mode: both
        algorithm:
          repeat_times: zero
        synchronizer:
          sync_methdo: nccl
          sync_interval: 0
          sync_offset: -1
        explorer:
          rollout_model:
            engine_type: tensorrt
        """,
    )
    error = load_error(path)
    paths = {issue.path for issue in error.errors}
    assert paths == {
        "algorithm.repeat_times",
        "synchronizer.sync_methdo",
        "synchronizer.sync_interval",
        "synchronizer.sync_offset",
        "explorer.rollout_model.engine_type",
    }
    assert isinstance(error, ValueError)
    text = str(error)
    assert "5 problems" in text and str(path) in text
    assert issue_at(error, "synchronizer.sync_interval").message == "must be >= 1, got 0"
    assert issue_at(error, "synchronizer.sync_offset").message == "must be >= 0, got -1"
    assert {"path", "value", "message", "file", "line"} <= error.errors[0].as_dict().keys()


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "mode: both\nalgorithm:\n  repeat_times: [1, 2\nbuffer: {}\n")
    error = load_error(path)
    (issue,) = error.errors
    assert issue.kind == "syntax" and issue.file == str(path)
    assert issue.line in (3, 4)
    assert "YAML syntax error" in str(error) and f"{path}:{issue.line}" in str(error)


def test_missing_file_and_non_mapping_top_level(tmp_path: Path) -> None:
    assert "not found" in str(load_error(tmp_path / "nope.yaml"))
    assert "must be a mapping" in str(load_error(write(tmp_path, "- a\n- b\n")))
    assert load_config(write(tmp_path, "", "empty.yaml")) == Config()


def test_list_items_use_index_paths() -> None:
    error = load_error(
        {"buffer": {"explorer_input": {"eval_tasksets": [{"path": "a"}, {"storage_type": "s3"}]}}}
    )
    issue_at(error, "buffer.explorer_input.eval_tasksets[1].storage_type")


# ------------------------------------------------------------------ cross-field rules


def test_model_paths_default_to_model_path() -> None:
    config = load_config({"model": {"model_path": "/m", "max_model_len": 1000}})
    assert config.model.critic_model_path == "/m"
    assert config.explorer.rollout_model.model_path == "/m"
    assert config.explorer.rollout_model.max_model_len == 1000
    assert config.model.max_prompt_tokens == 500 and config.model.max_response_tokens == 500
    explicit = load_config({"model": {"model_path": "/m", "critic_model_path": "/critic"}})
    assert explicit.model.critic_model_path == "/critic"


def test_model_lengths() -> None:
    config = load_config({"model": {"max_prompt_tokens": 100, "max_response_tokens": 200}})
    assert config.model.max_model_len == 300
    error = load_error(
        {"model": {"max_model_len": 100, "max_prompt_tokens": 80, "max_response_tokens": 80}}
    )
    assert "exceeds max_model_len (100)" in issue_at(error, "model.max_prompt_tokens").message


def test_train_batch_size_defaults_to_batch_size_times_repeat_times() -> None:
    config = load_config({"buffer": {"batch_size": 6}, "algorithm": {"repeat_times": 4}})
    assert config.buffer.train_batch_size == 24
    assert config.buffer.trainer_input.experience_buffer.batch_size == 24
    explicit = load_config({"buffer": {"batch_size": 6, "train_batch_size": 12}})
    assert explicit.buffer.train_batch_size == 12


def test_train_batch_size_must_divide_over_trainer_gpus() -> None:
    base = {
        "cluster": {"node_num": 1, "gpu_per_node": 8},
        "explorer": {"rollout_model": {"engine_num": 2, "tensor_parallel_size": 1}},
        "buffer": {"batch_size": 2},
        "algorithm": {"repeat_times": 8},
    }
    config = load_config(merge(base, {"buffer": {"train_batch_size": 12}}))
    assert config.cluster.trainer_gpu_num == 6 and config.cluster.rollout_gpu_num == 2
    error = load_error(base)  # 16 experiences over 6 trainer GPUs
    issue = issue_at(error, "buffer.train_batch_size")
    assert issue.value == 16 and "world size (6 GPUs)" in issue.message
    error = load_error(merge(base, {"explorer": {"rollout_model": {"engine_num": 8}}}))
    assert (
        "no GPU left for the trainer"
        in issue_at(error, "explorer.rollout_model.engine_num").message
    )


def test_nccl_is_downgraded_where_it_cannot_work(caplog: pytest.LogCaptureFixture) -> None:
    for mode in ("explore", "train", "bench", "serve"):
        with caplog.at_level(logging.WARNING, logger="trinity.common.config"):
            caplog.clear()
            config = load_config({"mode": mode, "synchronizer": {"sync_method": "nccl"}})
        assert config.synchronizer.sync_method == "checkpoint"
        assert any("set to 'checkpoint'" in w and mode in w for w in config.warnings)
        assert any("set to 'checkpoint'" in r.getMessage() for r in caplog.records)


def test_nccl_without_cuda_is_downgraded_at_run_time(cuda, caplog) -> None:
    cuda(False)
    config = load_config(runnable())
    assert config.synchronizer.sync_method == "nccl"  # the schema does not look at this machine
    with caplog.at_level(logging.WARNING, logger="trinity.common.config"):
        config.check_and_update()
    assert config.synchronizer.sync_method == "checkpoint"
    assert config.explorer.rollout_model.sync_method == "checkpoint"
    assert any("CUDA is not available" in w for w in config.warnings)
    assert any("CUDA is not available" in r.getMessage() for r in caplog.records)
    cuda(True)
    assert load_config(runnable(), check=True).synchronizer.sync_method == "nccl"


def test_sync_interval_and_offset_bounds() -> None:
    error = load_error({"synchronizer": {"sync_interval": 0, "sync_offset": -2}})
    issue_at(error, "synchronizer.sync_interval")
    issue_at(error, "synchronizer.sync_offset")
    config = load_config({"synchronizer": {"sync_interval": 3, "sync_offset": 1}})
    assert config.synchronizer.trainer_sync_interval == 3


def test_eval_interval_is_aligned_with_sync_interval() -> None:
    config = load_config({"synchronizer": {"sync_interval": 4}, "explorer": {"eval_interval": 10}})
    assert config.explorer.eval_interval == 8
    assert any("eval_interval" in w for w in config.warnings)


def test_default_experience_buffer_for_mode_both() -> None:
    exp = load_config({}).buffer.trainer_input.experience_buffer
    assert exp is not None
    assert (exp.name, exp.storage_type) == ("experience_buffer", "queue")
    assert load_config({"mode": "train"}).buffer.trainer_input.experience_buffer is None
    config = load_config(
        {"buffer": {"trainer_input": {"experience_buffer": {"storage_type": "file"}}}}
    )
    assert config.buffer.trainer_input.experience_buffer.storage_type == "queue"
    assert any("'file' experience buffer" in w for w in config.warnings)


def test_mode_requirements_are_reported_together(cuda) -> None:
    error = load_error({"mode": "explore"}, check=True)
    paths = {issue.path for issue in error.errors}
    assert {"model.model_path", "buffer.explorer_input.taskset"} <= paths
    assert "checkpoint_root_dir" not in paths  # empty: the current directory, as Trinity-RFT
    assert "needs a train task set" in issue_at(error, "buffer.explorer_input.taskset").message

    error = load_error(runnable(buffer={"explorer_input": {"taskset": {"path": None}}}), check=True)
    issue_at(error, "buffer.explorer_input.taskset.path")

    error = load_error(runnable(mode="bench"), check=True)
    assert "eval task set" in issue_at(error, "buffer.explorer_input.eval_tasksets").message
    bench = runnable(
        mode="bench", buffer={"explorer_input": {"eval_tasksets": [{"path": DATA_DIR}]}}
    )
    assert load_config(bench, check=True).buffer.explorer_input.eval_tasksets[0].repeat_times == 1

    error = load_error(runnable(mode="train", buffer={"train_batch_size": 8}), check=True)
    message = issue_at(error, "buffer.trainer_input.experience_buffer").message
    assert "mode 'train' needs a data set or buffer" in message
    train = runnable(
        mode="train",
        buffer={
            "train_batch_size": 8,
            "trainer_input": {"experience_buffer": {"storage_type": "file", "path": DATA_DIR}},
        },
    )
    assert load_config(train, check=True).buffer.trainer_input.experience_buffer.batch_size == 8

    # an empty root is the current directory, as in Trinity-RFT 0.6 (with a warning)
    empty = load_config(runnable(checkpoint_root_dir=""), check=True)
    assert empty.checkpoint_root_dir == os.getcwd()
    assert any("checkpoint_root_dir is not set" in w for w in empty.warnings)


def test_sft_needs_explicit_train_batch_size(cuda) -> None:
    error = load_error(runnable(algorithm={"algorithm_type": "sft"}), check=True)
    issue_at(error, "buffer.train_batch_size")


def test_check_and_update_fills_run_paths_in_place(tmp_path: Path, cuda) -> None:
    config = load_config(runnable(checkpoint_root_dir=str(tmp_path / "ckpt")))
    assert config.check_and_update() is config
    job_dir = tmp_path / "ckpt" / "Trinity-RFT" / "rft"
    assert config.checkpoint_job_dir == str(job_dir)
    assert config.log.save_dir == str(job_dir / "log")
    assert config.buffer.trainer_input.experience_buffer.path == str(
        job_dir / "buffer" / "experience_buffer.jsonl"
    )
    assert config.data_processor.experience_pipeline.input_save_path.startswith("sqlite:///")
    assert not job_dir.exists()  # validation never touches the file system


def test_no_cache_path_is_made_up_for_an_sft_or_dpo_data_set(tmp_path: Path, cuda) -> None:
    # a buffer the run writes gets a cache path; a data set to train on must be named: no
    # empty file in the cache directory stands in for it (the algorithm type asks for a path)
    for algorithm_type in ("sft", "dpo"):
        config = load_config(
            runnable(
                mode="train",
                checkpoint_root_dir=str(tmp_path),
                algorithm={"algorithm_type": algorithm_type},
                buffer={
                    "train_batch_size": 4,
                    "trainer_input": {"experience_buffer": {"name": "d"}},
                },
            )
        )
        config.check_and_update()
        assert config.buffer.trainer_input.experience_buffer.path is None


def test_program_assignments_survive_check_and_update(cuda) -> None:
    config = load_config(runnable(buffer={"batch_size": 4}))
    config.cluster.node_num = 1
    config.cluster.gpu_per_node = 3  # 1 GPU for rollout, 2 for the trainer; 4 % 2 == 0
    config.check_and_update()
    assert config.cluster.trainer_gpu_num == 2
    config.cluster.gpu_per_node = 4  # 3 trainer GPUs do not divide 4 experiences
    with pytest.raises(ConfigError, match="train_batch_size"):
        config.check_and_update()


def test_tasksets_inherit_run_settings() -> None:
    config = load_config(
        {
            "algorithm": {"repeat_times": 4},
            "model": {"temperature": 0.7, "max_response_tokens": 256, "max_model_len": 1024},
            "buffer": {
                "batch_size": 3,
                "explorer_input": {
                    "default_workflow_type": "math_workflow",
                    "default_eval_workflow_type": "math_eval",
                    "taskset": {"path": "t", "repeat_times": 2},
                    "eval_tasksets": [{"path": "e", "rollout_args": {"temperature": 0.1}}],
                },
            },
        }
    )
    taskset = config.buffer.explorer_input.taskset
    assert taskset.repeat_times == 4 and taskset.batch_size == 3
    assert any("repeat_times (2)" in w for w in config.warnings)
    assert taskset.default_workflow_type == "math_workflow"
    assert taskset.rollout_args.temperature == 0.7 and taskset.rollout_args.max_tokens == 256
    (eval_set,) = config.buffer.explorer_input.eval_tasksets
    assert eval_set.name == "eval_taskset_0" and eval_set.is_eval is True
    assert eval_set.rollout_args.temperature == 0.1  # explicit values win
    assert eval_set.default_workflow_type == "math_eval"


def test_other_cross_field_checks() -> None:
    error = load_error(
        {
            "explorer": {
                "auxiliary_models": [{"engine_num": 1}],
                "over_rollout": {"ratio": 0.5},
            },
            "buffer": {"trainer_input": {"auxiliary_buffers": {"sft": {"storage_type": "file"}}}},
            "model": {"lora_configs": [{}, {}]},
        }
    )
    issue_at(error, "explorer.auxiliary_models[0].model_path")
    issue_at(error, "explorer.over_rollout.ratio")
    issue_at(error, "buffer.trainer_input.auxiliary_buffers.sft.path")
    assert "only one adapter is supported" in issue_at(error, "model.lora_configs").message
    error = load_error({"buffer": {"explorer_input": {"taskset": {}, "tasksets": [{}]}}})
    issue_at(error, "buffer.explorer_input.tasksets")
    error = load_error({"model": {"external_model": {"enable": True}}})
    issue_at(error, "model.external_model.enable")
    issue_at(error, "model.external_model.model_name")


def test_deprecated_keys_are_migrated_with_warnings() -> None:
    config = load_config(
        {
            "algorithm": {"optimizer": {"warmup_style": "cosine"}},
            "buffer": {
                "explorer_input": {"taskset": {"task_selector": {"selector_type": "shuffle"}}}
            },
        }
    )
    assert config.algorithm.optimizer.lr_scheduler_type == "cosine"
    assert config.buffer.explorer_input.taskset.data_selector.selector_type == "shuffle"
    assert len(config.warnings) == 2


# ------------------------------------------------------------------ stages


def test_stages_merge_partial_overrides_over_the_base() -> None:
    config = load_config(FULL)
    sft, grpo = list(config.iter_stages())
    assert sft.name == "grpo-gsm8k/sft_warmup" and grpo.name == "grpo-gsm8k/grpo"
    assert sft.mode == "train" and sft.algorithm.algorithm_type == "sft"
    assert sft.algorithm.repeat_times == 8  # inherited from the base
    assert sft.algorithm.optimizer.betas == [0.9, 0.99]
    exp = sft.buffer.trainer_input.experience_buffer
    assert (exp.storage_type, exp.path, exp.format.messages_key) == (
        "file",
        "/data/sft.jsonl",
        "messages",
    )
    assert sft.buffer.train_batch_size == 24 and sft.buffer.batch_size == 12
    assert sft.synchronizer.sync_method == "checkpoint"
    assert sft.trainer.save_hf_checkpoint == "last" and sft.stages == []
    assert grpo.algorithm.algorithm_type == "grpo" and grpo.synchronizer.sync_method == "nccl"
    assert any(w.startswith("stages[0]:") for w in config.warnings)


def test_stage_errors_are_located_under_the_stage(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        algorithm:
          algorithm_type: grpo
        stages:
          - stage_name: one
          - stage_name: two
            algorithm:
              algorithm_type: [not, a, name]
          - stage_name: three
            model:
              max_model_len: 10
              max_prompt_tokens: 8
              max_response_tokens: 8
        """,
    )
    error = load_error(path)
    issue = issue_at(error, "stages[1].algorithm.algorithm_type")
    assert "expected a string" in issue.message and issue.line == 8
    # a merged-stage error, after the stage's own fields are valid
    error = load_error(
        {
            "model": {"max_prompt_tokens": 8},
            "stages": [
                {"stage_name": "s", "model": {"max_model_len": 10, "max_response_tokens": 8}}
            ],
        }
    )
    issue_at(error, "stages[0].model.max_prompt_tokens")


# ------------------------------------------------------------------ round trip


def test_round_trip_save_and_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRINITY_TEST_CKPT_ROOT", raising=False)
    monkeypatch.delenv("TRINITY_TEST_MODEL_PATH", raising=False)
    config = load_config(FULL)
    assert config.model.custom_chat_template.count("${literal}") == 1
    out = tmp_path / "saved" / "config.yaml"
    save_config(config, out)
    again = load_config(out)
    assert again == config
    assert again.to_dict() == config.to_dict()
    assert again.model.custom_chat_template == config.model.custom_chat_template
    assert again.stages[0].overrides() == config.stages[0].overrides()
    assert [s.to_dict() for s in again.iter_stages()] == [s.to_dict() for s in config.iter_stages()]
    config.save(tmp_path / "again.yaml")
    assert load_config(tmp_path / "again.yaml") == config


def test_round_trip_of_defaults_and_checked_config(tmp_path: Path, cuda) -> None:
    save_config(Config(), tmp_path / "d.yaml")
    assert load_config(tmp_path / "d.yaml") == Config()
    checked = load_config(runnable(), check=True)
    save_config(checked, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml", check=True) == checked


def test_flatten_and_envs() -> None:
    config = load_config({"log": {"level": "debug"}})
    flat = config.flatten()
    assert flat["synchronizer.sync_interval"] == 1
    assert flat["algorithm.optimizer.betas.0"] == 0.9
    env = load_config({"explorer": {"env_vars": {"CUDA_LAUNCH_BLOCKING": 1}}})
    assert env.explorer.env_vars == {"CUDA_LAUNCH_BLOCKING": "1"}
    assert config.get_envs()["TRINITY_LOG_LEVEL"] == "DEBUG"


# ------------------------------------------------------------------ package boundaries


def test_core_config_never_imports_sibling_packages() -> None:
    imported: set[str] = set()
    for source in Path(config_module.__file__).parent.glob("*.py"):
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
    assert "pydantic" in imported  # the scan did see the modules
    forbidden = ("trinity.algorithm", "trinity.buffer", "trinity.workflows", "trinity.launcher")
    assert not [name for name in imported if name.startswith(forbidden)]


def test_public_names_are_exported() -> None:
    for name in config_module.__all__:
        assert hasattr(config_module, name), name
    assert config_module.FormatConfig is FormatConfig


# ------------------------------------------------------------------------ earlier runs


@pytest.mark.parametrize("mode", ["both", "explore", "train"])
def test_a_run_that_may_not_resume_is_renamed_beside_the_earlier_one(
    tmp_path: Path, cuda, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """continue_from_checkpoint false over an earlier run's output: Trinity-RFT's rule, the
    new run is named <name>_<timestamp> (never appended to, or mixed with, the old one)."""
    data = runnable(checkpoint_root_dir=str(tmp_path), name="exp", mode=mode)
    if mode == "train":
        data["buffer"]["trainer_input"] = {"experience_buffer": {"path": "/data/exps"}}
        data["buffer"]["train_batch_size"] = 4
        data["algorithm"] = {"algorithm_type": "sft"}
    config = load_config(dict(data, continue_from_checkpoint=False))
    config.check_and_update()
    assert config.name == "exp"  # nothing there yet: no rename
    (Path(config.checkpoint_job_dir) / "metrics.jsonl").parent.mkdir(parents=True)
    (Path(config.checkpoint_job_dir) / "metrics.jsonl").write_text("{}\n")

    again = load_config(dict(data, continue_from_checkpoint=False))
    with caplog.at_level(logging.WARNING):
        again.check_and_update()
    assert again.name.startswith("exp_") and len(again.name) == len("exp_20261125010203")
    assert again.checkpoint_job_dir == os.path.join(
        os.path.dirname(config.checkpoint_job_dir), again.name
    )
    assert f"this run is renamed {again.name!r}" in caplog.text
    resumed = load_config(data)  # continue_from_checkpoint (the default): the same directory
    resumed.check_and_update()
    assert resumed.name == "exp" and resumed.checkpoint_job_dir == config.checkpoint_job_dir


def test_bench_is_never_renamed(tmp_path: Path, cuda) -> None:
    data = runnable(checkpoint_root_dir=str(tmp_path), name="exp", mode="bench")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "1+1=", "answer": "2"}\n')
    data["buffer"]["explorer_input"]["eval_tasksets"] = [{"path": str(tasks)}]
    config = load_config(dict(data, continue_from_checkpoint=False))
    config.check_and_update()
    Path(config.checkpoint_job_dir).mkdir(parents=True)
    (Path(config.checkpoint_job_dir) / "global_step_1").mkdir()
    again = load_config(dict(data, continue_from_checkpoint=False))
    again.check_and_update()
    assert again.name == "exp"


def test_trinity_rft_enum_assignments_validate_as_their_values(tmp_path: Path, cuda) -> None:
    # Trinity-RFT's tests and examples assign the enums of trinity.common.constants to config
    # fields; check_and_update turns them into the plain values YAML configs carry, and the
    # config still saves (yaml cannot write an enum object)
    from trinity.common.config import save_config
    from trinity.common.constants import StorageType, SyncMethod, SyncStyle

    config = load_config(runnable(checkpoint_root_dir=str(tmp_path / "ckpt")))
    config.buffer.trainer_input.experience_buffer.storage_type = StorageType.SQL
    config.synchronizer.sync_method = SyncMethod.CHECKPOINT
    config.synchronizer.sync_style = SyncStyle.DYNAMIC_BY_EXPLORER
    config.check_and_update()
    assert type(config.buffer.trainer_input.experience_buffer.storage_type) is str
    assert config.buffer.trainer_input.experience_buffer.storage_type == "sql"
    assert type(config.synchronizer.sync_method) is str
    assert config.synchronizer.sync_style == "dynamic_by_explorer"
    save_config(config, str(tmp_path / "saved.yaml"))
    assert "storage_type: sql" in (tmp_path / "saved.yaml").read_text()


def test_lora_takes_one_adapter_and_refuses_what_it_cannot_honour() -> None:
    """``model.lora_configs``: one adapter trains on the trainer side and the rollout engines
    serve it (``enable_lora`` derived true, as Trinity-RFT does; false without an adapter);
    more adapters, an adapter name and Trinity-RFT's ``is_dummy`` are refused naming the
    field. An empty list is no LoRA."""
    config = load_config({"model": {"lora_configs": [{"lora_rank": 8}]}})
    assert config.model.lora_configs[0].lora_rank == 8
    assert config.explorer.rollout_model.enable_lora is True
    assert load_config({}).explorer.rollout_model.enable_lora is False
    error = load_error({"model": {"lora_configs": [{"lora_rank": 8}, {"lora_rank": 8}]}})
    assert "has 2 entries" in issue_at(error, "model.lora_configs").message
    error = load_error({"model": {"lora_configs": [{"is_dummy": True, "name": "a"}]}})
    assert "not supported yet" in issue_at(error, "model.lora_configs[0].is_dummy").message
    assert not [i for i in error.errors if i.path == "model.lora_configs[0].name"]  # engines' name
    assert load_config({"model": {"lora_configs": []}}).model.lora_configs == []
