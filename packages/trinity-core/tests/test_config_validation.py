"""Values no run can use are refused by the schema (or the run-level checks), each issue naming
the field path, the bad value and what is allowed; and the component-argument checker.

One test per rule family: strict numbers (no bool / string where a number belongs), finite
floats, ranges, token limits (absolute and against a local model's ``config.json``), choices
with "did you mean", usable paths (run level), all problems of a file reported together, and
:func:`check_component_args` (declared ``Args``, typed ``__init__``, undeclared ``**kwargs``).
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any, Optional

import pytest

from trinity.common import config as config_module
from trinity.common.config import (
    MAX_CONTEXT_TOKENS,
    ComponentArgs,
    ConfigError,
    Field,
    args_model,
    check_component_args,
    describe_args,
    is_open,
    load_config,
)

HERE = str(Path(__file__).resolve().parent)  # an existing directory, used as a data set
MODEL_DIR = str(Path(__file__).resolve().parent / "data" / "model")  # holds a config.json


def error_of(source: Any, **kwargs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(source, **kwargs)
    return info.value


def issue_at(error: ConfigError, path: str):
    matches = [issue for issue in error.errors if issue.path == path]
    assert matches, f"no issue at {path!r}; got {[str(i) for i in error.errors]}"
    return matches[0]


def runnable(**sections: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "checkpoint_root_dir": "/tmp/trinity-validation-test",
        "model": {"model_path": MODEL_DIR, "max_model_len": 2048},
        "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": HERE}}},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


@pytest.fixture(autouse=True)
def _cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module._utils, "cuda_is_available", lambda: True)


# ------------------------------------------------------------------ strict numbers


@pytest.mark.parametrize(
    "data, path",
    [
        ({"buffer": {"batch_size": True}}, "buffer.batch_size"),
        ({"algorithm": {"repeat_times": False}}, "algorithm.repeat_times"),
        ({"algorithm": {"optimizer": {"lr": True}}}, "algorithm.optimizer.lr"),
        (
            {"explorer": {"rollout_model": {"engine_num": True}}},
            "explorer.rollout_model.engine_num",
        ),
    ],
)
def test_a_boolean_where_a_number_belongs_is_refused(data, path) -> None:
    issue = issue_at(error_of(data), path)
    assert issue.kind == "type_error" and "got bool" in issue.message
    assert "an integer" in issue.message or "a number" in issue.message


@pytest.mark.parametrize(
    "data, path",
    [
        ({"algorithm": {"optimizer": {"lr": "1e-6"}}}, "algorithm.optimizer.lr"),
        ({"buffer": {"batch_size": "8"}}, "buffer.batch_size"),
        ({"model": {"temperature": "hot"}}, "model.temperature"),
    ],
)
def test_a_string_where_a_number_belongs_is_refused(data, path) -> None:
    issue = issue_at(error_of(data), path)
    assert "got str" in issue.message and issue.value == _leaf(data)


def _leaf(data: Any) -> Any:
    while isinstance(data, dict):
        data = next(iter(data.values()))
    return data


def test_an_env_interpolation_still_gives_a_number(monkeypatch: pytest.MonkeyPatch) -> None:
    """``${oc.env:...}`` resolves to a string; where a number belongs it is read as one."""
    monkeypatch.setenv("TRINITY_TEST_LR", "3e-4")
    config = load_config(
        {
            "model": {"max_model_len": "${oc.env:TRINITY_TEST_UNSET_LEN,4096}"},
            "algorithm": {"optimizer": {"lr": "${oc.env:TRINITY_TEST_LR}"}},
        }
    )
    assert config.model.max_model_len == 4096 and config.algorithm.optimizer.lr == 3e-4
    monkeypatch.setenv("TRINITY_TEST_LR", "fast")
    assert (
        "got str"
        in issue_at(
            error_of({"algorithm": {"optimizer": {"lr": "${oc.env:TRINITY_TEST_LR}"}}}),
            "algorithm.optimizer.lr",
        ).message
    )


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_refused(value: float) -> None:
    issue = issue_at(
        error_of({"algorithm": {"optimizer": {"lr": value}}}), "algorithm.optimizer.lr"
    )
    assert "finite" in issue.message and repr(value) in issue.message
    issue = issue_at(error_of({"model": {"top_p": value}}), "model.top_p")
    assert "finite" in issue.message


# ------------------------------------------------------------------ ranges


@pytest.mark.parametrize(
    "data, path, allowed",
    [
        ({"algorithm": {"optimizer": {"lr": 0}}}, "algorithm.optimizer.lr", "> 0"),
        ({"algorithm": {"optimizer": {"lr": -1e-5}}}, "algorithm.optimizer.lr", "> 0"),
        ({"model": {"temperature": -0.1}}, "model.temperature", ">= 0"),
        ({"model": {"top_k": -2}}, "model.top_k", ">= -1"),
        ({"model": {"top_p": 1.5}}, "model.top_p", "<= 1"),
        ({"buffer": {"batch_size": 0}}, "buffer.batch_size", ">= 1"),
        ({"algorithm": {"repeat_times": -3}}, "algorithm.repeat_times", ">= 1"),
        (
            {"explorer": {"rollout_model": {"gpu_memory_utilization": 1.2}}},
            "explorer.rollout_model.gpu_memory_utilization",
            "<= 1",
        ),
        (
            {"explorer": {"rollout_model": {"temperature": -1.0}}},
            "explorer.rollout_model.temperature",
            ">= 0",
        ),
        (
            {"algorithm": {"optimizer": {"betas": [0.9, 1.0]}}},
            "algorithm.optimizer.betas[1]",
            "< 1",
        ),
    ],
)
def test_values_outside_their_range_are_refused(data, path, allowed) -> None:
    issue = issue_at(error_of(data), path)
    assert issue.kind == "out_of_range" and allowed in issue.message, issue.message


def test_a_response_token_limit_no_model_has_is_refused() -> None:
    for field in ("max_response_tokens", "max_prompt_tokens", "max_model_len"):
        issue = issue_at(error_of({"model": {field: 10**12}}), f"model.{field}")
        assert str(MAX_CONTEXT_TOKENS) in issue.message and "10000000000" in issue.message
    issue = issue_at(
        error_of(
            {"buffer": {"explorer_input": {"taskset": {"rollout_args": {"max_tokens": 10**9}}}}}
        ),
        "buffer.explorer_input.taskset.rollout_args.max_tokens",
    )
    assert issue.kind == "out_of_range"


def _local_model(tmp_path: Path, positions: int, rope: Optional[dict] = None) -> str:
    model = tmp_path / "model"
    model.mkdir()
    hf = {"model_type": "qwen2", "max_position_embeddings": positions}
    if rope:
        hf["rope_scaling"] = rope
    (model / "config.json").write_text(json.dumps(hf), encoding="utf-8")
    return str(model)


def test_token_limits_must_fit_a_local_models_context(tmp_path: Path) -> None:
    model = _local_model(tmp_path, 64)
    issue = issue_at(
        error_of({"model": {"model_path": model, "max_model_len": 128}}), "model.max_model_len"
    )
    assert "max_position_embeddings" in issue.message and "64" in issue.message
    issue = issue_at(
        error_of(
            {"model": {"model_path": model, "max_prompt_tokens": 40, "max_response_tokens": 40}}
        ),
        "model.max_response_tokens",
    )
    assert "40 + 40" in issue.message
    issue = issue_at(
        error_of({"model": {"model_path": model, "max_response_tokens": 100}}),
        "model.max_response_tokens",
    )
    assert issue.value == 100
    issue = issue_at(
        error_of(
            {"model": {"model_path": model}, "explorer": {"rollout_model": {"max_model_len": 65}}}
        ),
        "explorer.rollout_model.max_model_len",
    )
    config = load_config({"model": {"model_path": model, "max_model_len": 64}})
    assert config.model.max_model_len == 64


def test_rope_scaling_extends_the_local_context(tmp_path: Path) -> None:
    model = _local_model(tmp_path, 64, rope={"rope_type": "yarn", "factor": 4.0})
    assert load_config({"model": {"model_path": model, "max_model_len": 256}})
    error_of({"model": {"model_path": model, "max_model_len": 257}})


def test_a_hub_model_is_not_read() -> None:
    config = load_config({"model": {"model_path": "Qwen/Qwen2.5-0.5B", "max_model_len": 131072}})
    assert config.model.max_model_len == 131072


# ------------------------------------------------------------------ choices


@pytest.mark.parametrize(
    "data, path, suggestion",
    [
        ({"mode": "bothh"}, "mode", "both"),
        (
            {"algorithm": {"optimizer": {"lr_scheduler_type": "cosin"}}},
            "algorithm.optimizer.lr_scheduler_type",
            "cosine",
        ),
        ({"synchronizer": {"sync_method": "ncl"}}, "synchronizer.sync_method", "nccl"),
        (
            {"explorer": {"rollout_model": {"engine_type": "vlm"}}},
            "explorer.rollout_model.engine_type",
            "vllm",
        ),
        ({"algorithm": {"loss_agg_mode": "token_mean"}}, "algorithm.loss_agg_mode", "token-mean"),
    ],
)
def test_a_misspelt_choice_gets_the_allowed_values_and_a_suggestion(data, path, suggestion) -> None:
    issue = issue_at(error_of(data), path)
    assert issue.kind == "invalid_choice"
    assert "allowed values" in issue.message and f"did you mean '{suggestion}'?" in issue.message


def test_trinity_rft_loss_agg_mode_token_sum_is_accepted() -> None:
    assert load_config({"algorithm": {"loss_agg_mode": "token-sum"}}).algorithm.loss_agg_mode


# ------------------------------------------------------------------ paths (run level)


def test_a_missing_local_input_is_refused_at_run_level_only() -> None:
    data = runnable(
        buffer={"batch_size": 4, "explorer_input": {"taskset": {"path": "./no/such/set"}}}
    )
    load_config(data)  # the schema alone does not look at the disk
    issue = issue_at(error_of(data, check=True), "buffer.explorer_input.taskset.path")
    assert "does not exist" in issue.message and issue.value == "./no/such/set"
    # a relative name may be a hub data set: left to the reader
    hub = runnable(
        buffer={"batch_size": 4, "explorer_input": {"taskset": {"path": "openai/gsm8k"}}}
    )
    load_config(hub, check=True)


def test_an_auxiliary_data_set_of_rows_needs_its_schema_type(tmp_path: Path) -> None:
    """mix's expert rows as a data set directory: without ``schema_type: sft`` the trainer
    would read them as a file of serialized experiences, find none, and stop the run with
    "storage is exhausted" at its first step."""
    rows = tmp_path / "sft"
    rows.mkdir()
    (rows / "train.jsonl").write_text('{"question": "1+1=", "answer": "2"}\n', encoding="utf-8")
    aux = {"storage_type": "file", "path": str(rows), "split": "train"}

    def config(**extra: Any) -> dict[str, Any]:
        return runnable(
            buffer={
                "batch_size": 4,
                "explorer_input": {"taskset": {"path": HERE}},
                "trainer_input": {"auxiliary_buffers": {"sft_dataset": {**aux, **extra}}},
            }
        )

    issue = issue_at(
        error_of(config(), check=True),
        "buffer.trainer_input.auxiliary_buffers.sft_dataset.schema_type",
    )
    assert str(rows) in issue.message and "train.jsonl" in issue.message
    assert "'sft'" in issue.message
    # the same rows as a single jsonl file
    issue = issue_at(
        error_of(config(path=str(rows / "train.jsonl")), check=True),
        "buffer.trainer_input.auxiliary_buffers.sft_dataset.schema_type",
    )
    assert "['answer', 'question']" in issue.message
    checked = load_config(config(schema_type="sft"), check=True)
    aux_cfg = checked.buffer.trainer_input.auxiliary_buffers["sft_dataset"]
    # read for buffer.total_epochs unless it sets its own
    assert aux_cfg.total_epochs == checked.buffer.total_epochs
    checked = load_config(config(schema_type="sft", total_epochs=7), check=True)
    assert checked.buffer.trainer_input.auxiliary_buffers["sft_dataset"].total_epochs == 7
    # an experience file a run wrote (lines with "exp") is what schema_type unset means
    (tmp_path / "exps.jsonl").write_text('{"exp": "AAAA", "eid": "x"}\n', encoding="utf-8")
    load_config(config(path=str(tmp_path / "exps.jsonl")), check=True)


def test_a_chat_template_file_must_be_readable(tmp_path: Path) -> None:
    data = runnable(model={"chat_template_path": str(tmp_path / "missing.jinja")})
    issue = issue_at(error_of(data, check=True), "model.chat_template_path")
    assert "readable file" in issue.message


def test_the_checkpoint_directory_must_be_creatable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    data = runnable(checkpoint_root_dir=str(blocker / "ckpt"))
    issue = issue_at(error_of(data, check=True), "checkpoint_root_dir")
    assert "must be a directory" in issue.message and str(blocker) in issue.message
    load_config(runnable(checkpoint_root_dir=str(tmp_path / "new" / "ckpt")), check=True)


@pytest.mark.parametrize("check", [False, True])
def test_a_nul_byte_in_any_value_is_refused_where_it_is(tmp_path: Path, check: bool) -> None:
    """No path can hold a NUL byte: ``os.path.exists`` would call such a checkpoint root
    "not there yet" and the run would fail only when it opens it. Refused at schema level,
    each place named with its value."""
    data = runnable(
        checkpoint_root_dir=f"{tmp_path}/ck\x00pt",
        name="run\x00",
        buffer={
            "batch_size": 4,
            "explorer_input": {
                "taskset": {"path": HERE, "workflow_args": {"note": "a\x00b", "ok": "fine"}}
            },
        },
    )
    error = error_of(data, check=check)
    for path in (
        "checkpoint_root_dir",
        "name",
        "buffer.explorer_input.taskset.workflow_args.note",
    ):
        issue = issue_at(error, path)
        assert "NUL byte" in issue.message and "\\x00" in issue.message
    assert not [i for i in error.errors if i.path.endswith("workflow_args.ok")]
    # the taskset is also mirrored into ``tasksets``: reported once
    assert len([i for i in error.errors if "workflow_args.note" in i.path]) == 1
    assert not (tmp_path / "ck").exists()


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No permission to download models and an empty Hugging Face cache (returned)."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for var in ("TRINITY_ALLOW_HUB_MODELS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    return cache


def _model_issue(data: dict[str, Any], path: str = "model.model_path"):
    return issue_at(error_of(data, check=True), path)


def test_a_model_path_must_be_a_local_model_directory(tmp_path: Path, no_hub: Path) -> None:
    missing = tmp_path / "no-model"
    issue = _model_issue(runnable(model={"model_path": str(missing), "max_model_len": 64}))
    assert f"no directory {missing}" in issue.message and issue.value == str(missing)
    empty = tmp_path / "empty"
    empty.mkdir()
    issue = _model_issue(runnable(model={"model_path": str(empty), "max_model_len": 64}))
    assert "no config.json" in issue.message and "it is empty" in issue.message
    (empty / "model.safetensors").write_text("x")
    issue = _model_issue(runnable(model={"model_path": str(empty), "max_model_len": 64}))
    assert "its files: model.safetensors" in issue.message
    file = tmp_path / "weights.bin"
    file.write_text("x")
    issue = _model_issue(runnable(model={"model_path": str(file), "max_model_len": 64}))
    assert "is a file" in issue.message
    load_config(runnable(model={"model_path": MODEL_DIR, "max_model_len": 64}), check=True)
    load_config(runnable(), check=False)  # the schema alone does not look at the disk


def test_a_relative_model_path_resolves_against_the_current_directory(
    tmp_path: Path, no_hub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    for typo in ("./tiny-modl", "checkpoints/tiny-modl", "checkpoints/a/tiny-modl"):
        issue = _model_issue(runnable(model={"model_path": typo, "max_model_len": 64}))
        assert "does not exist" in issue.message, typo
        assert str(tmp_path / typo.removeprefix("./")) in issue.message, typo
        assert f"current directory, {tmp_path}" in issue.message
    (tmp_path / "checkpoints" / "tiny").mkdir()
    (tmp_path / "checkpoints" / "tiny" / "config.json").write_text("{}")
    load_config(runnable(model={"model_path": "checkpoints/tiny", "max_model_len": 64}), check=True)


def test_a_hub_id_is_refused_unless_cached_or_allowed(
    no_hub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = runnable(model={"model_path": "Qwen/Qwen2.5-0.5B", "max_model_len": 64})
    issue = _model_issue(data)
    for part in (
        "'Qwen/Qwen2.5-0.5B' is not a local model directory",
        f"Hugging Face cache ({no_hub})",
        "no model hub is reachable from this machine",
        "huggingface-cli download Qwen/Qwen2.5-0.5B",
        "TRINITY_ALLOW_HUB_MODELS=1",
    ):
        assert part in issue.message, part
    assert "HF_HUB_OFFLINE" not in issue.message
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE is set" in _model_issue(data).message
    # downloaded into the cache: accepted
    snapshot = no_hub / "models--Qwen--Qwen2.5-0.5B" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    load_config(data, check=True)
    # allowed to download: accepted
    other = runnable(model={"model_path": "gpt2", "max_model_len": 64})
    assert "'gpt2' is not a local model directory" in _model_issue(other).message
    monkeypatch.setenv("TRINITY_ALLOW_HUB_MODELS", "1")
    load_config(other, check=True)
    # ... which does not make a local path with a typo a hub id
    local = runnable(model={"model_path": "/no/such/model", "max_model_len": 64})
    assert "does not exist" in _model_issue(local).message


def test_only_models_the_run_loads_are_checked(tmp_path: Path, no_hub: Path) -> None:
    missing = str(tmp_path / "missing")
    # the critic, rollout and auxiliary models, where the run loads them
    data = runnable(
        model={"model_path": MODEL_DIR, "critic_model_path": missing, "max_model_len": 64}
    )
    assert missing in _model_issue(data, "model.critic_model_path").message
    data = runnable(explorer={"rollout_model": {"model_path": missing}})
    assert missing in _model_issue(data, "explorer.rollout_model.model_path").message
    data = runnable(explorer={"auxiliary_models": [{"model_path": missing, "name": "judge"}]})
    assert missing in _model_issue(data, "explorer.auxiliary_models[0].model_path").message
    # a service serves the model: its path is a name, not a directory here
    eval_sets = {"eval_tasksets": [{"path": HERE}]}
    for data in (
        runnable(
            mode="explore",
            model={"model_path": "my-served-model", "max_model_len": 64},
            explorer={"rollout_model": {"engine_type": "external"}},
        ),
        runnable(
            mode="bench",
            model={
                "model_path": "my-served-model",
                "max_model_len": 64,
                "external_model": {"enable": True, "model_name": "m"},
            },
            buffer={"batch_size": 4, "explorer_input": {"taskset": {"path": HERE}, **eval_sets}},
        ),
    ):
        load_config(data, check=True)
    # a trainer loads it whatever the engines are
    data = runnable(
        model={"model_path": missing, "max_model_len": 64},
        explorer={"rollout_model": {"engine_type": "external"}},
    )
    assert "does not exist" in _model_issue(data).message


def test_a_relative_task_set_resolves_as_the_loader_resolves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "arithmetic").mkdir(parents=True)

    def taskset(path: str) -> dict[str, Any]:
        return runnable(buffer={"batch_size": 4, "explorer_input": {"taskset": {"path": path}}})

    for typo in ("data/arithmetc", "data/arithmetic/trian.jsonl", "tasks.jsonl"):
        issue = issue_at(error_of(taskset(typo), check=True), "buffer.explorer_input.taskset.path")
        assert f"a local path: {tmp_path / typo}" in issue.message, typo
        assert f"current directory, {tmp_path}" in issue.message
    load_config(taskset("data/arithmetic"), check=True)
    # what the loader would read from the hub is left to it
    load_config(taskset("openai/gsm8k"), check=True)
    load_config(taskset("gsm8k"), check=True)


def test_a_path_problem_carries_its_file_and_line(tmp_path: Path, no_hub: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            checkpoint_root_dir: {tmp_path / "ckpt"}
            model:
              model_path: {tmp_path / "no-model"}
              max_model_len: 64
            buffer:
              explorer_input:
                taskset:
                  path: ./no/such/set
            """
        ),
        encoding="utf-8",
    )
    error = error_of(path, check=True)
    assert issue_at(error, "model.model_path").line == 3
    assert issue_at(error, "buffer.explorer_input.taskset.path").line == 8
    assert f"{path}:3: model.model_path: the model does not exist" in str(error)


# ------------------------------------------------------------------ command-line overrides


def test_overrides_apply_to_the_file_before_validation(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "model:\n  model_path: /m\n  max_model_len: 64\nexplorer:\n  rollout_model:\n"
        "    model_path: ${model.model_path}\nbuffer:\n  total_steps: 5\n",
        encoding="utf-8",
    )
    config = load_config(
        path,
        overrides=[
            "buffer.total_steps=3",
            "model.model_path=/other",  # interpolations see the overridden value
            "trainer.trainer_config.x=[1,2]",
            "model.max_model_len=null",
            "buffer.total_steps=4",  # later wins
        ],
    )
    assert config.buffer.total_steps == 4
    assert config.explorer.rollout_model.model_path == "/other"
    assert config.trainer.trainer_config == {"x": [1, 2]}
    assert config.model.max_model_len is None
    # a mapping source takes them too
    assert load_config({"buffer": {"total_steps": 5}}, overrides=["buffer.total_steps=2"])


def test_a_bad_override_names_the_override_not_a_line(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("buffer:\n  total_steps: 5\n  batch_size: 0\n", encoding="utf-8")
    error = error_of(
        path,
        overrides=["buffer.total_stepz=3", "buffer.total_steps=0", "buffer.explorer_input"],
    )
    unknown = issue_at(error, "buffer.total_stepz")
    assert unknown.file == "override 'buffer.total_stepz=3'" and unknown.line is None
    assert "did you mean 'total_steps'?" in unknown.message
    steps = issue_at(error, "buffer.total_steps")  # in the file too: the override set it
    assert steps.file == "override 'buffer.total_steps=0'" and steps.line is None
    assert "not a KEY=VALUE override" in issue_at(error, "buffer.explorer_input").message
    # the file's own problem keeps its line
    assert issue_at(error, "buffer.batch_size").line == 3
    assert "override 'buffer.total_stepz=3': buffer.total_stepz: unknown key" in str(error)


# ------------------------------------------------------------------ all problems at once


def test_every_problem_of_a_file_is_reported_together(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        textwrap.dedent(
            """
            mode: bothh
            algorithm:
              repeat_times: true
              optimizer:
                lr: .nan
            model:
              max_response_tokens: 100000000000
            buffer:
              batch_size: "8"
              unknwon: 1
            """
        ),
        encoding="utf-8",
    )
    error = error_of(path)
    paths = {i.path for i in error.errors}
    assert paths == {
        "mode",
        "algorithm.repeat_times",
        "algorithm.optimizer.lr",
        "model.max_response_tokens",
        "buffer.batch_size",
        "buffer.unknwon",
    }
    text = str(error)
    assert "6 problems" in text and all(i.line for i in error.errors)
    assert "nan" in str(issue_at(error, "algorithm.optimizer.lr"))


# ------------------------------------------------------------------ component arguments


class Declared:
    """A component declaring an Args model."""

    class Args(ComponentArgs):
        clip_range: float = Field(0.2, ge=0.0, description="Clip epsilon.")
        loss_agg_mode: str = "token-mean"
        steps: int = Field(1, ge=1)

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class TypedInit:
    """A component declaring through a typed ``__init__`` (no ``**kwargs``)."""

    def __init__(self, tau: float = 1.0, name: str = "x") -> None:
        self.tau, self.name = tau, name


class Undeclared:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class SubclassWithOwnInit(Declared):
    """Changes ``__init__`` without a new Args: read from that ``__init__``."""

    def __init__(self, beta: float = 0.5) -> None:
        self.beta = beta


LOC = ("algorithm", "policy_loss_fn_args")


def test_declared_args_refuse_unknown_keys_with_the_closest_name() -> None:
    issues, warnings = check_component_args(Declared, {"clip_rnage": 0.1}, LOC)
    assert not warnings and [i.path for i in issues] == ["algorithm.policy_loss_fn_args.clip_rnage"]
    assert "did you mean 'clip_range'?" in issues[0].message


@pytest.mark.parametrize(
    "args, message",
    [
        ({"clip_range": "0.1"}, "expected a number, got str"),
        ({"clip_range": True}, "expected a number, got bool"),
        ({"clip_range": math.nan}, "finite"),
        ({"clip_range": -0.1}, ">= 0"),
        ({"steps": True}, "expected an integer, got bool"),
        ({"steps": 1.5}, "expected an integer"),
        ({"steps": 0}, ">= 1"),
    ],
)
def test_declared_args_are_strict(args, message) -> None:
    issues, _ = check_component_args(Declared, args, LOC)
    assert len(issues) == 1 and message in issues[0].message, issues
    assert issues[0].path == f"algorithm.policy_loss_fn_args.{next(iter(args))}"


def test_every_bad_argument_is_reported() -> None:
    issues, _ = check_component_args(Declared, {"clip_range": "x", "steps": 0, "nope": 1}, LOC)
    assert len(issues) == 3


def test_a_typed_init_is_a_declaration() -> None:
    assert list(args_model(TypedInit).model_fields) == ["tau", "name"]
    issues, _ = check_component_args(TypedInit, {"tau": "1"}, LOC)
    assert "got str" in issues[0].message
    issues, _ = check_component_args(TypedInit, {"tua": 1.0}, LOC)
    assert "did you mean 'tau'?" in issues[0].message
    assert check_component_args(TypedInit, {"tau": 2}, LOC) == ([], [])


class TypedWithKwargs:
    """The guides' style: typed named parameters plus ``**kwargs`` forwarded to a base."""

    def __init__(self, opmd_baseline: str = "mean", tau: float = 1.0, **kwargs: Any) -> None:
        self.tau = tau


def test_undeclared_kwargs_are_accepted_with_a_warning() -> None:
    assert is_open(args_model(Undeclared)) and not args_model(Undeclared).model_fields
    issues, warnings = check_component_args(Undeclared, {"anything": "goes"}, LOC)
    assert not issues and "declares no arguments" in warnings[0] and "anything" in warnings[0]
    assert check_component_args(Undeclared, {}, LOC) == ([], [])


def test_named_parameters_next_to_kwargs_are_checked_the_rest_warned() -> None:
    assert check_component_args(TypedWithKwargs, {"opmd_baseline": "x", "tau": 0.5}, LOC) == (
        [],
        [],
    )
    issues, _ = check_component_args(TypedWithKwargs, {"tau": "0.5"}, LOC)
    assert [i.path for i in issues] == ["algorithm.policy_loss_fn_args.tau"]
    issues, warnings = check_component_args(TypedWithKwargs, {"tau": 0.5, "extra": 1}, LOC)
    assert not issues and "does not declare ['extra']" in warnings[0]


def test_a_subclass_with_its_own_init_is_read_from_it() -> None:
    assert list(args_model(SubclassWithOwnInit).model_fields) == ["beta"]
    issues, _ = check_component_args(SubclassWithOwnInit, {"clip_range": 0.1}, LOC)
    assert "unknown key 'clip_range'" in issues[0].message


def test_without_derive_only_an_args_model_counts() -> None:
    """Workflows: ``workflow_args`` are checked only where the workflow declares Args."""
    assert check_component_args(TypedInit, {"free": 1}, LOC, derive=False) == ([], [])
    issues, _ = check_component_args(Declared, {"free": 1}, LOC, derive=False)
    assert issues and "unknown key 'free'" in issues[0].message


def test_describe_args_lists_names_types_defaults_and_ranges() -> None:
    rows = {row["name"]: row for row in describe_args(args_model(Declared))}
    assert rows["clip_range"]["type"] == "a number" and rows["clip_range"]["default"] == 0.2
    assert rows["clip_range"]["range"] == ">= 0.0" and rows["clip_range"]["description"]
    assert rows["steps"]["range"] == ">= 1"
    assert describe_args(None) == []


def test_colocate_is_synchronous_and_shares_every_gpu() -> None:
    """``mode: colocate``: the engine sleeps while the trainer trains on the same device, so
    ``sync_offset > 0`` and the dynamic sync styles are refused with the reason; nccl (the
    default) becomes memory; one GPU holds both (mode both refuses it)."""
    error = error_of(
        {
            "mode": "colocate",
            "synchronizer": {"sync_offset": 1, "sync_style": "dynamic_by_trainer"},
            "cluster": {"node_num": 1, "gpu_per_node": 2},
            "explorer": {"rollout_model": {"tensor_parallel_size": 2}},
            "buffer": {"batch_size": 2},
        }
    )
    offset = issue_at(error, "synchronizer.sync_offset")
    assert offset.value == 1 and "synchronous by construction" in str(offset)
    assert "allowed: 0" in str(offset) and "mode 'both'" in str(offset)
    assert "allowed: 'fixed'" in str(issue_at(error, "synchronizer.sync_style"))
    assert "half of several GPUs" in str(
        issue_at(error, "explorer.rollout_model.tensor_parallel_size")
    )
    one_gpu = {"cluster": {"node_num": 1, "gpu_per_node": 1}}
    config = load_config({"mode": "colocate", **one_gpu})
    assert config.synchronizer.sync_method == "memory"
    assert (config.cluster.rollout_gpu_num, config.cluster.trainer_gpu_num) == (1, 1)
    assert "no GPU left for the trainer" in str(error_of({"mode": "both", **one_gpu}))


def test_fully_async_reads_max_inflight_batches_and_other_styles_refuse_it() -> None:
    """``sync_style: fully_async`` (Trinity-RFT 0.6's name) is accepted, case-insensitively,
    and reads ``explorer.max_inflight_batches``; with another style a value other than the
    default is refused, naming the style that reads it; colocate stays synchronous."""
    config = load_config(
        {"synchronizer": {"sync_style": "FULLY_ASYNC"}, "explorer": {"max_inflight_batches": 3}}
    )
    assert config.synchronizer.sync_style == "fully_async"
    assert config.explorer.max_inflight_batches == 3
    error = error_of({"explorer": {"max_inflight_batches": 3}})
    issue = issue_at(error, "explorer.max_inflight_batches")
    assert issue.value == 3 and "not supported yet" in str(issue) and "fully_async" in str(issue)
    error = error_of({"mode": "colocate", "synchronizer": {"sync_style": "fully_async"}})
    assert "allowed: 'fixed'" in str(issue_at(error, "synchronizer.sync_style"))
    # the trainer's push interval (0.6's trainer_sync_interval) is read with fully_async only
    config = load_config(
        {"synchronizer": {"sync_style": "fully_async", "trainer_sync_interval": 2}}
    )
    assert (config.synchronizer.trainer_sync_interval, config.synchronizer.sync_interval) == (2, 1)
    issue = issue_at(
        error_of({"synchronizer": {"trainer_sync_interval": 2}}),
        "synchronizer.trainer_sync_interval",
    )
    assert "not supported yet" in str(issue) and "fully_async" in str(issue)
    # 0.6's explorer_sync_interval: under fully_async the engines take every push, and it
    # aligns eval_interval (rounded down to a multiple of it, as in 0.6); refused elsewhere
    config = load_config(
        {
            "synchronizer": {"sync_style": "fully_async", "explorer_sync_interval": 3},
            "explorer": {"eval_interval": 10},
        }
    )
    assert config.synchronizer.explorer_sync_interval == 3
    assert config.explorer.eval_interval == 9
    issue = issue_at(
        error_of({"synchronizer": {"explorer_sync_interval": 3}}),
        "synchronizer.explorer_sync_interval",
    )
    assert "not supported yet" in str(issue) and "fully_async" in str(issue)
    error = error_of({"synchronizer": {"sync_style": "fully_async", "sync_offset": 1}})
    issue = issue_at(error, "synchronizer.sync_offset")
    assert "max_inflight_batches" in str(issue) and "allowed: 0" in str(issue)
