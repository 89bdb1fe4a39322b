"""Every YAML snippet of the developer guides (English and Chinese) loads verbatim."""

from __future__ import annotations

from pathlib import Path

import pytest

from trinity.common.config import load_config

SNIPPETS = Path(__file__).parent / "snippets"


def test_taskset_snippet(monkeypatch):
    config = load_config(SNIPPETS / "guide_taskset.yaml")
    taskset = config.buffer.explorer_input.taskset
    assert taskset.default_workflow_type == "math_workflow"
    assert taskset.path == "/PATH/TO/FILE/DIR"
    assert (taskset.format.prompt_key, taskset.format.response_key) == ("question", "answer")
    assert taskset.rollout_args.temperature == 1.0


@pytest.mark.parametrize("value", ["/data/gsm8k", None])
def test_chinese_taskset_snippet_resolves_the_environment(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("TRINITY_TASKSET_PATH", raising=False)
        with pytest.raises(ValueError, match="TRINITY_TASKSET_PATH"):
            load_config(SNIPPETS / "guide_taskset_zh.yaml")
    else:
        monkeypatch.setenv("TRINITY_TASKSET_PATH", value)
        config = load_config(SNIPPETS / "guide_taskset_zh.yaml")
        assert config.buffer.explorer_input.taskset.path == value


def test_algorithm_snippets():
    assert load_config(SNIPPETS / "guide_algorithm.yaml").algorithm.algorithm_type == "opmd"
    algorithm = load_config(SNIPPETS / "guide_algorithm_args.yaml").algorithm
    assert algorithm.repeat_times == 8
    assert algorithm.advantage_fn_args == {"opmd_baseline": "logavgexp", "tau": 0.99}
    assert algorithm.policy_loss_fn_args == {"tau": 0.99}


def test_operator_and_synchronizer_snippet():
    config = load_config(SNIPPETS / "guide_operators.yaml")
    (op,) = config.data_processor.experience_pipeline.operators
    assert op.name == "reward_filter" and op.args == {"threshold": 0.1}
    assert config.synchronizer.sync_style == "dynamic_by_explorer"
    assert config.synchronizer.sync_interval == 2
