"""What ``trinity-launch --dry-run`` and a run's start do with Trinity-RFT 0.6 config keys:
names this release does not ship are "not supported yet", ``taskset`` is checked once though it
also reads as ``tasksets[0]``, and cluster sizes left to Ray are read once Ray is up."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from trinity.common.config import ConfigError, load_config
from trinity.launcher import session as session_module
from trinity.launcher.validation import validate_config


def _config(tmp_path: Path, model_path: str, **taskset: Any) -> dict[str, Any]:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"prompt": "1+1=", "response": "2"}\n', encoding="utf-8")
    return {
        "mode": "explore",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "model": {"model_path": model_path, "max_prompt_tokens": 32, "max_response_tokens": 4},
        "buffer": {"explorer_input": {"taskset": {"path": str(tasks), **taskset}}},
    }


def _issues(data: dict[str, Any]) -> list[Any]:
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    return info.value.errors


def test_a_trinity_rft_workflow_not_shipped_is_not_supported_yet(
    tmp_path: Path, model_path: str
) -> None:
    data = _config(tmp_path, model_path, default_workflow_type="agentscopev0_react_math_workflow")
    (issue,) = _issues(data)  # once: the taskset and its tasksets[0] mirror are one task set
    assert issue.path == "buffer.explorer_input.taskset.default_workflow_type"
    assert (
        "'agentscopev0_react_math_workflow' is a Trinity-RFT 0.6 workflow that is not "
        "supported yet" in issue.message
    )


def test_images_need_an_engine_that_reads_them(tmp_path: Path, model_path: str) -> None:
    """simple_mm_workflow sends images: with the default vLLM engine (which does not read
    them yet) the config is refused at the engine type; with transformers it is valid."""
    data = _config(tmp_path, model_path, default_workflow_type="simple_mm_workflow")
    data["buffer"]["explorer_input"]["taskset"]["format"] = {"image_key": "images"}
    (issue,) = _issues(data)
    assert issue.path == "explorer.rollout_model.engine_type" and issue.value == "vllm"
    assert "'simple_mm_workflow' sends images" in issue.message
    assert "not supported yet" in issue.message and "transformers" in issue.message
    data["explorer"] = {"rollout_model": {"engine_type": "transformers"}}
    validate_config(data)


def test_an_unknown_workflow_keeps_its_did_you_mean(tmp_path: Path, model_path: str) -> None:
    data = _config(tmp_path, model_path, default_workflow_type="math_workflw")
    (issue,) = _issues(data)
    assert "not supported" not in issue.message and "'math_workflow'" in issue.message


def test_cpt_outside_mode_train_is_refused_naming_the_mode(tmp_path: Path, model_path: str) -> None:
    data = _config(tmp_path, model_path, default_workflow_type="math_workflow")
    data["algorithm"] = {"algorithm_type": "cpt"}  # continued pre-training: a data set of text
    data["buffer"]["train_batch_size"] = 4
    issue = next(i for i in _issues(data) if i.path == "algorithm.algorithm_type")
    assert (
        "'cpt' trains on a fixed data set" in issue.message and "use mode 'train'" in issue.message
    )


def test_the_tool_call_workflow_by_its_earlier_name(tmp_path: Path, model_path: str) -> None:
    data = _config(tmp_path, model_path, default_workflow_type="toolcall_workflow")
    config, _ = validate_config(data)
    assert config.buffer.explorer_input.tasksets[0].default_workflow_type == "toolcall_workflow"


def test_cluster_sizes_left_to_ray_are_read_before_the_trainer_is_laid_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run reads the sizes once Ray is up, then sizes the trainer from them."""
    import ray

    from trinity.launcher import placement
    from trinity.launcher.trainer import workers

    config = load_config({"mode": "both", "cluster": {"node_num": None, "gpu_per_node": None}})
    seen: list[str] = []

    @contextlib.contextmanager
    def fake_ray_session(cfg: Any):
        seen.append("ray")
        yield

    @contextlib.contextmanager
    def fake_placement(cfg: Any, **layout: Any):
        seen.append(f"placement {layout}")
        yield object()

    def fake_layout(cfg: Any) -> dict[str, Any]:
        seen.append(f"layout {cfg.cluster.node_num}x{cfg.cluster.gpu_per_node}")
        return {"trainer_ranks": 0}

    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True, "Resources": {"CPU": 2.0}}])
    monkeypatch.setattr(session_module, "ray_session", fake_ray_session)
    monkeypatch.setattr(placement, "placement_session", fake_placement)
    monkeypatch.setattr(workers, "trainer_layout", fake_layout)
    run = session_module.RunSession.__new__(session_module.RunSession)
    run.spec, run.config, run.explorer = config.run_mode, config, None
    monkeypatch.setattr(run, "_main_in_placement", lambda placement, early: "done")
    assert run._run_in_ray() == "done"
    assert seen == ["ray", "layout 1x0", "placement {'trainer_ranks': 0}"]
    assert (config.cluster.node_num, config.cluster.gpu_per_node) == (1, 0)
