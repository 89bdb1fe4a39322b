"""Built-in workflows and the guide's ExampleWorkflow, selected by name from YAML.

The guide's task-set snippet (``default_workflow: "math_workflow"`` over a jsonl of
``question`` / ``answer`` rows) is loaded as written, its path pointed at a real file; the
buffer's task-set reader turns rows into Tasks and ``run_task`` drives the installed
``math_workflow`` with the deterministic test double as the model — the path the explorer takes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trinity.buffer.taskset import get_taskset_reader
from trinity.common.config import load_config
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import WORKFLOWS, run_task

SNIPPETS = Path(__file__).parent / "snippets"
ROWS = [{"question": "1+1=", "answer": "2"}, {"question": "2+2=", "answer": "4"}]


def _answer_from_prompt(messages, sample_index):
    question = messages[-1]["content"]
    value = eval(question.rstrip("="), {})  # test-controlled input: "1+1=", "2+2="
    return f"<think>adding</think> <answer>{value + sample_index}</answer>"


def _config_with(tmp_path: Path, snippet: str, **taskset_overrides) -> Path:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "train.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    raw = yaml.safe_load((SNIPPETS / snippet).read_text())
    taskset = raw["buffer"]["explorer_input"]["taskset"]
    taskset["path"] = str(data)
    if "default_workflow_type" in taskset_overrides:
        taskset.pop("default_workflow")  # the guide's spelling; give only one of the two
    taskset.update(taskset_overrides)
    # a FakeModelWrapper answers: the model directory is a stand-in (a config.json), as
    # validation refuses a model path that is not a local model directory
    model = tmp_path / "fake-trinity-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    raw["model"] = {"model_path": str(model), "max_model_len": 256}
    raw["checkpoint_root_dir"] = str(tmp_path / "ckpt")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_guide_taskset_snippet_runs_math_workflow(tmp_path):
    path = _config_with(tmp_path, "guide_taskset.yaml")
    raw = yaml.safe_load(path.read_text())
    raw["algorithm"] = {"algorithm_type": "grpo", "repeat_times": 2}
    path.write_text(yaml.safe_dump(raw))
    config = load_config(path).check_and_update()  # train task sets take algorithm.repeat_times
    taskset = config.buffer.explorer_input.taskset
    assert taskset.default_workflow_type == "math_workflow"
    tasks = get_taskset_reader(taskset).read(2)
    model = FakeModelWrapper(_answer_from_prompt)
    rewards = [[e.reward for e in run_task(task, model)] for task in tasks]
    # sample 0 answers correctly, sample 1 is off by one; both follow the R1 format
    assert rewards == [[1.1, 0.1], [1.1, 0.1]]
    assert model.calls[0].kwargs["temperature"] == 1.0


@pytest.mark.parametrize(
    ("workflow", "reward", "expected"),
    [
        ("math_boxed_workflow", None, 0.0),  # the answers are not boxed
        ("simple_workflow", "math_reward", 1.1),
        ("async_simple_workflow", "math_reward", 1.1),  # Trinity-RFT's name, in a YAML
        ("arithmetic_workflow", None, 1.0),  # the first number in the answer is right
    ],
)
def test_other_builtins_by_name(tmp_path, workflow, reward, expected):
    overrides = {"default_workflow_type": workflow}
    if reward:
        overrides["default_reward_fn_type"] = reward
    config = load_config(_config_with(tmp_path, "guide_taskset.yaml", **overrides))
    (task, _) = get_taskset_reader(config.buffer.explorer_input.taskset).read(2)
    exps = run_task(task, FakeModelWrapper(_answer_from_prompt))
    assert [e.reward for e in exps] == [expected]


def test_example_workflow_and_builtins_share_one_registry(load_snippet, tmp_path):
    module = load_snippet("example_workflow_full")
    assert WORKFLOWS.get("example_workflow") is module.ExampleWorkflow
    assert {"example_workflow", "math_workflow", "code_workflow"} <= set(WORKFLOWS.list())
    config = load_config(
        _config_with(tmp_path, "guide_taskset.yaml", default_workflow_type="example_workflow")
    )
    (task, _) = get_taskset_reader(config.buffer.explorer_input.taskset).read(2)
    exps = run_task(task, FakeModelWrapper(["2"]))
    assert [e.reward for e in exps] == [1.0]
