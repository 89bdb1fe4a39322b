"""Keys of Trinity-RFT 0.6 configs (and of its older examples) this release reads differently:
each one is read the way a run can use it, or refused as "not supported yet" naming its field.

Every config here is written for the test (minimal, our own); tests/trinity_rft_compat/
test_upstream_examples.py runs the same checks over Trinity-RFT's own example files.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from trinity.common import config as config_module
from trinity.common.config import (
    Config,
    ConfigError,
    TasksetConfig,
    apply_cluster_sizes,
    cluster_sizes_from_nodes,
    load_config,
    save_config,
)

HERE = Path(__file__).resolve().parent
MODEL_DIR = str(HERE / "data" / "model")  # holds a config.json
DATA_DIR = str(HERE)  # an existing directory, as a data set


@pytest.fixture(autouse=True)
def _cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module._utils, "cuda_is_available", lambda: True)


def runnable(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """A config that passes the run-level checks in mode both, with ``sections`` merged in."""
    data: dict[str, Any] = {
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "model": {"model_path": MODEL_DIR, "max_model_len": 2048},
        "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": DATA_DIR}}},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


def issue_at(error: ConfigError, path: str):
    matches = [issue for issue in error.errors if issue.path == path]
    assert matches, f"no issue at {path!r}; got {[str(i) for i in error.errors]}"
    return matches[0]


def refused(source: Any, **kwargs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(source, **kwargs)
    return info.value


# ------------------------------------------------------------ 1. algorithm.sample_strategy


def test_unset_sample_strategy_reads_default_once_checked(tmp_path: Path) -> None:
    config = load_config(runnable(tmp_path))
    assert config.algorithm.sample_strategy is None  # the schema keeps what was written
    config.check_and_update()
    assert config.algorithm.sample_strategy == "default"
    # derived, not the user's: the algorithm type still decides what a run samples with
    assert "sample_strategy" not in config.algorithm.model_fields_set
    assert config.check_and_update().algorithm.sample_strategy == "default"


def test_a_written_sample_strategy_is_kept(tmp_path: Path) -> None:
    data = runnable(tmp_path, algorithm={"sample_strategy": "warmup"})
    config = load_config(data, check=True)
    assert config.algorithm.sample_strategy == "warmup"


# ------------------------------------------------------------ 2. cluster sizes left to Ray


def test_null_cluster_sizes_are_accepted_and_left_to_ray(tmp_path: Path) -> None:
    data = runnable(tmp_path, cluster={"node_num": None, "gpu_per_node": None})
    config = load_config(data, check=True)  # no Ray started by the check
    assert config.cluster.node_num is None and config.cluster.gpu_per_node is None
    assert config.cluster.trainer_gpu_num == 0  # nothing allocated before the sizes are known


def test_null_assigned_in_code_then_checked(tmp_path: Path) -> None:
    """Trinity-RFT's own tests assign None and call check_and_update."""
    config = load_config(runnable(tmp_path))
    config.cluster.node_num = None
    config.cluster.gpu_per_node = None
    config.check_and_update()
    assert config.cluster.node_num is None


def test_cluster_sizes_read_as_trinity_rft_reads_them() -> None:
    nodes = [
        {"Alive": False, "Resources": {"GPU": 8.0}},
        {"Alive": True, "Resources": {"CPU": 8.0}},
        {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 4.0}},
    ]
    assert cluster_sizes_from_nodes(nodes) == (2, 4)
    assert cluster_sizes_from_nodes([{"Alive": True, "Resources": {"CPU": 2.0}}]) == (1, 0)


def test_ray_sizes_on_a_cpu_machine_change_nothing_else(tmp_path: Path) -> None:
    config = load_config(runnable(tmp_path, cluster={"node_num": None, "gpu_per_node": None}))
    before = config.to_dict()
    read = apply_cluster_sizes(config, [{"Alive": True, "Resources": {"CPU": 2.0}}])
    assert read == {"node_num": 1, "gpu_per_node": 0}
    assert (config.cluster.node_num, config.cluster.gpu_per_node) == (1, 0)
    after = config.to_dict()
    after["cluster"].update(node_num=None, gpu_per_node=None)
    assert after == before  # the CPU path: no GPU allocation, nothing else derived


def test_ray_sizes_allocate_gpus_as_written_sizes_do(tmp_path: Path) -> None:
    buffer = {"batch_size": 6, "explorer_input": {"taskset": {"path": DATA_DIR}}}
    sizes = {"node_num": None, "gpu_per_node": None}
    left = load_config(runnable(tmp_path, cluster=sizes, buffer=buffer))
    apply_cluster_sizes(left, [{"Alive": True, "Resources": {"GPU": 4.0}}])
    written = load_config(
        runnable(tmp_path, cluster={"node_num": 1, "gpu_per_node": 4}, buffer=buffer)
    )
    for name in ("rollout_gpu_num", "trainer_gpu_num", "trainer_node_num", "total_gpu_num"):
        assert getattr(left.cluster, name) == getattr(written.cluster, name), name
    assert left.cluster.trainer_gpu_num == 3
    assert left.synchronizer.explorer_world_size == written.synchronizer.explorer_world_size


def test_ray_sizes_that_cannot_hold_the_run_are_refused_saying_where_they_came_from(
    tmp_path: Path,
) -> None:
    config = load_config(runnable(tmp_path, cluster={"node_num": None, "gpu_per_node": None}))
    with pytest.raises(ConfigError) as info:
        apply_cluster_sizes(config, [{"Alive": True, "Resources": {"GPU": 1.0}}])
    issue = issue_at(info.value, "explorer.rollout_model.engine_num")
    assert "no GPU left for the trainer" in issue.message
    assert "cluster.node_num=1, cluster.gpu_per_node=1 read from the Ray cluster" in issue.message
    assert "'colocate'" in issue.message


def test_written_sizes_and_zero_are_not_read_from_ray(tmp_path: Path) -> None:
    config = load_config(runnable(tmp_path, cluster={"node_num": 0, "gpu_per_node": 0}))
    assert apply_cluster_sizes(config, [{"Alive": True, "Resources": {"GPU": 8.0}}]) == {}
    assert (config.cluster.node_num, config.cluster.gpu_per_node) == (0, 0)


# ------------------------------------------------------------ 3. taskset / tasksets


def test_taskset_reads_as_tasksets_too(tmp_path: Path) -> None:
    config = load_config(runnable(tmp_path), check=True)
    explorer_input = config.buffer.explorer_input
    assert explorer_input.tasksets == [explorer_input.taskset]
    assert explorer_input.tasksets[0] is explorer_input.taskset  # one task set, two names
    assert explorer_input.get_tasksets() == [explorer_input.taskset]
    assert explorer_input.tasksets[0].repeat_times == config.algorithm.repeat_times


def test_tasksets_alone_still_work(tmp_path: Path) -> None:
    data = runnable(tmp_path)
    data["buffer"]["explorer_input"] = {"tasksets": [{"path": DATA_DIR}]}
    config = load_config(data, check=True)
    assert config.buffer.explorer_input.taskset is None
    assert config.buffer.explorer_input.tasksets[0].name == "taskset_0"


def test_taskset_and_tasksets_both_written_are_refused(tmp_path: Path) -> None:
    data = runnable(tmp_path)
    data["buffer"]["explorer_input"]["tasksets"] = [{"path": DATA_DIR}]
    issue = issue_at(refused(data), "buffer.explorer_input.tasksets")
    assert "both set" in issue.message and "allowed: one of them" in issue.message


def test_a_saved_config_with_the_mirror_loads_back(tmp_path: Path) -> None:
    config = load_config(runnable(tmp_path), check=True)
    path = tmp_path / "saved.yaml"
    save_config(config, path)
    again = load_config(path)
    assert again == config
    assert again.buffer.explorer_input.tasksets[0] is again.buffer.explorer_input.taskset


# ------------------------------------------------------------ 4. trainer keys


def test_ppo_max_token_len_per_gpu_is_read_as_max_token_len_per_gpu(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="trinity.common.config"):
        config = load_config(runnable(tmp_path, trainer={"ppo_max_token_len_per_gpu": 16384}))
    assert config.trainer.max_token_len_per_gpu == 16384
    # the user's value (the trainer raises derived budgets only)
    assert "max_token_len_per_gpu" in config.trainer.model_fields_set
    warning = next(w for w in config.warnings if "ppo_max_token_len_per_gpu" in w)
    assert "deprecated" in warning and "trainer.max_token_len_per_gpu" in warning
    assert any("trainer.max_token_len_per_gpu" in r.getMessage() for r in caplog.records)


def test_both_max_token_keys_must_agree(tmp_path: Path) -> None:
    same = runnable(tmp_path, trainer={"ppo_max_token_len_per_gpu": 8, "max_token_len_per_gpu": 8})
    assert load_config(same).trainer.max_token_len_per_gpu == 8
    data = runnable(tmp_path, trainer={"ppo_max_token_len_per_gpu": 8, "max_token_len_per_gpu": 9})
    issue = issue_at(refused(data), "trainer.ppo_max_token_len_per_gpu")
    assert issue.value == 8 and "set to 9" in issue.message


@pytest.mark.parametrize(
    "trainer, path",
    [
        ({"trainer_type": "tinker"}, "trainer.trainer_type"),
        ({"trainer_strategy": "megatron"}, "trainer.trainer_strategy"),
        (
            {"trainer_config": {"actor_rollout_ref": {"actor": {"strategy": "megatron"}}}},
            "trainer.trainer_config.actor_rollout_ref.actor.strategy",
        ),
        (
            {"trainer_config": {"critic": {"strategy": "megatron"}}},
            "trainer.trainer_config.critic.strategy",
        ),
    ],
)
def test_backends_nothing_here_runs_are_not_supported_yet(
    tmp_path: Path, trainer: dict[str, Any], path: str
) -> None:
    issue = issue_at(refused(runnable(tmp_path, trainer=trainer)), path)
    assert "not supported yet" in issue.message and "allowed" in issue.message


def test_trainer_keys_of_trinity_rft_examples_that_a_run_reads(tmp_path: Path) -> None:
    trainer = {
        "grad_clip": 0.5,
        "use_dynamic_bsz": False,
        "ulysses_sequence_parallel_size": 2,
        "trainer_config": {"actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 2}}},
    }
    config = load_config(runnable(tmp_path, trainer=trainer), check=True)
    assert config.trainer.grad_clip == 0.5 and config.trainer.use_dynamic_bsz is False
    assert config.trainer.ulysses_sequence_parallel_size == 2
    assert config.trainer.trainer_config == trainer["trainer_config"]


def test_a_separate_verl_config_file_is_refused_naming_the_field(tmp_path: Path) -> None:
    data = runnable(tmp_path, trainer={"trainer_config_path": "verl.yaml"})
    issue = issue_at(refused(data), "trainer.trainer_config_path")
    assert "not supported" in issue.message and "trainer.trainer_config" in issue.message


# ------------------------------------------------------------ 6. task pipeline output


def _pipeline_config(tmp_path: Path, algorithm: str) -> dict[str, Any]:
    data = runnable(tmp_path, mode="train", algorithm={"algorithm_type": algorithm})
    data["buffer"] = {
        "train_batch_size": 4,
        "trainer_input": {
            "experience_buffer": {"name": "prefs", "storage_type": "file", "path": DATA_DIR}
        },
    }
    data["data_processor"] = {"task_pipeline": {"inputs": ["raw.jsonl"]}}
    return data


@pytest.mark.parametrize("algorithm", ["dpo", "sft"])
def test_train_mode_pipeline_writes_the_trainers_data_set(tmp_path: Path, algorithm: str) -> None:
    config = load_config(_pipeline_config(tmp_path, algorithm), check=True)
    output = config.data_processor.task_pipeline.output
    assert isinstance(output, TasksetConfig)
    exp = config.buffer.trainer_input.experience_buffer
    assert (output.path, output.storage_type, output.name) == (exp.path, "file", "prefs")
    assert "output" not in config.data_processor.task_pipeline.model_fields_set


def test_train_mode_pipeline_of_another_algorithm_still_needs_an_output(tmp_path: Path) -> None:
    data = _pipeline_config(tmp_path, "ppo")
    issue = issue_at(refused(data, check=True), "data_processor.task_pipeline.output")
    assert "experience_buffer" in issue.message


def test_exploring_pipeline_still_writes_the_train_task_set(tmp_path: Path) -> None:
    data = runnable(tmp_path, data_processor={"task_pipeline": {"inputs": ["raw.jsonl"]}})
    config = load_config(data, check=True)
    assert config.data_processor.task_pipeline.output.path == DATA_DIR


# ------------------------------------------------------------ 8. tinker


def test_a_tinker_section_switched_off_passes(tmp_path: Path) -> None:
    data = runnable(tmp_path, model={"tinker": {"enable": False, "rank": 8}})
    data["model"].update(model_path=MODEL_DIR, max_model_len=2048)
    config = load_config(data, check=True)
    assert config.model.tinker.enable is False


def test_tinker_enabled_is_not_supported_yet(tmp_path: Path) -> None:
    data = runnable(tmp_path)
    data["model"]["tinker"] = {"enable": True}
    issue = issue_at(refused(data), "model.tinker.enable")
    assert "not supported yet" in issue.message and "allowed: false" in issue.message


@pytest.mark.parametrize("engine_type", ["tinker", "sglang"])
def test_engine_types_no_engine_serves_are_refused_by_the_run_checks(
    tmp_path: Path, engine_type: str
) -> None:
    data = runnable(tmp_path, explorer={"rollout_model": {"engine_type": engine_type}})
    assert load_config(data).explorer.rollout_model.engine_type == engine_type  # schema: loads
    issue = issue_at(refused(data, check=True), "explorer.rollout_model.engine_type")
    # the allowed names are the installed engines (none where trinity-launcher is absent)
    assert "not supported yet" in issue.message and "allowed:" in issue.message


def test_config_value_semantics_hold_for_the_new_rules(tmp_path: Path) -> None:
    """Derived values (sample strategy, mirrored task set) stay out of what the user wrote."""
    config = load_config(runnable(tmp_path, trainer={"ppo_max_token_len_per_gpu": 64}))
    config.check_and_update()
    again = Config.from_dict(config.to_dict())
    assert again == config
    stage = load_config(
        {**runnable(tmp_path), "stages": [{"stage_name": "a", "buffer": {"batch_size": 2}}]}
    )
    (merged,) = list(stage.iter_stages())
    assert merged.buffer.explorer_input.tasksets[0] is merged.buffer.explorer_input.taskset


# ------------------------------------------------------------ 9. fields no code reads


def test_only_written_values_other_than_the_accepted_ones_are_reported(tmp_path: Path) -> None:
    """A field nothing reads is refused (or warned about) only where a config writes a value
    that would need code: its default, a derived value or a section left out is not."""
    quiet = load_config(
        runnable(
            tmp_path,
            trainer={"grad_offload": False, "save_strategy": "unrestricted"},
            explorer={"rollout_model": {"use_v1": True, "logprobs": 0}},
            synchronizer={"sync_interval": 2, "explorer_sync_interval": 2},
        ),
        check=True,
    )
    assert not any("ignored" in w for w in quiet.warnings)
    error = refused(
        runnable(
            tmp_path, explorer={"auxiliary_models": [{"model_path": MODEL_DIR, "use_v1": False}]}
        )
    )
    assert "not supported yet" in issue_at(error, "explorer.auxiliary_models[0].use_v1").message


def test_a_saved_config_loads_back_without_refusals_or_warnings(tmp_path: Path) -> None:
    """``save_config`` writes every field, derived ones included (Trinity-RFT's saved configs
    too): the computed values agree with what the rules compute again, so nothing is reported
    but the fields a run ignores."""
    data = runnable(tmp_path, cluster={"node_num": 1, "gpu_per_node": 5})
    data["buffer"]["explorer_input"]["eval_tasksets"] = [{"path": DATA_DIR}]
    config = load_config(data, check=True)
    save_config(config, tmp_path / "saved.yaml")
    again = load_config(tmp_path / "saved.yaml", check=True)
    assert again == config
    assert [w for w in again.warnings if "computed" in w] == []


def test_a_computed_value_written_differently_is_ignored_with_a_warning(tmp_path: Path) -> None:
    config = load_config(runnable(tmp_path, explorer={"rollout_model": {"gpu_per_engine": 4}}))
    assert config.explorer.rollout_model.gpu_per_engine == 1
    (warning,) = [w for w in config.warnings if "gpu_per_engine" in w]
    assert "the value written (4) is ignored, 1 is used" in warning


def test_a_stage_writing_an_unsupported_field_is_refused_under_the_stage(tmp_path: Path) -> None:
    data = {
        **runnable(tmp_path),
        "stages": [{"stage_name": "a", "trainer": {"grad_offload": True}}],
    }
    assert "not supported yet" in issue_at(refused(data), "stages[0].trainer.grad_offload").message
