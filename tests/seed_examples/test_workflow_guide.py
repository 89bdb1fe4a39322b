"""The Workflows part of the developer guides, run verbatim against trinity-core.

The guide's ExampleWorkflow (step by step, full, and the older guide's argument order), cut out of
the guide texts at test time and run verbatim (``seed_guides.py``), is registered by its decorator, selected by name as YAML would, built with ``Task.to_workflow`` and
driven with the deterministic test double standing in for the rollout engine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from trinity.common.config import GenerationConfig, load_config
from trinity.common.experience import Experience
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, run_task, run_task_async
from trinity.utils.aio import run_sync

SNIPPETS = Path(__file__).parent / "snippets"
ALL_VERSIONS = ["example_workflow_full", "example_workflow_steps", "example_workflow_v0"]


def _answers(mapping):
    """Scripted replies: sample i of the question in the prompt answers mapping[question][i]."""

    def reply(messages, sample_index, **_):
        question = messages[-1]["content"].removeprefix("Question:\n")
        options = mapping[question]
        return options[sample_index % len(options)]

    return reply


@pytest.mark.parametrize("snippet", ALL_VERSIONS)
def test_example_workflow_runs_through_task_to_workflow(load_snippet, snippet):
    module = load_snippet(snippet)
    assert WORKFLOWS.get("example_workflow") is module.ExampleWorkflow

    model = FakeModelWrapper(_answers({"1+1=": ["2", "3", "2"]}))
    task = Task(
        workflow="example_workflow",
        raw_task={"question": "1+1=", "answer": "2"},
        rollout_args=GenerationConfig(n=3, temperature=0.7),
    )
    workflow = task.to_workflow(model)
    assert isinstance(workflow, module.ExampleWorkflow)
    assert workflow.task is task and workflow.model is model

    exps = workflow.run()
    assert [e.reward for e in exps] == [1.0, 0.0, 1.0]
    assert all(isinstance(e, Experience) for e in exps)
    # the model was asked exactly as the guide's run() says
    (call,) = model.calls
    assert call.messages == [{"role": "user", "content": "Question:\n1+1="}]
    assert call.kwargs["n"] == 3 and call.kwargs["temperature"] == 0.7
    for exp, text in zip(exps, ["2", "3", "2"], strict=True):
        response_tokens = exp.tokens[exp.prompt_length :]
        assert model.tokenizer.decode(response_tokens, skip_special_tokens=True) == text
        assert exp.logprobs.shape == response_tokens.shape
        assert torch.all(exp.action_mask == 1)
        # logprobs the workflow kept are the ones the model reports for that sequence
        full = model.logprobs(exp.tokens.tolist(), temperature=0.7)
        assert torch.allclose(full[exp.prompt_length - 1 :], exp.logprobs)


@pytest.mark.parametrize("snippet", ALL_VERSIONS)
def test_reset_reuses_the_workflow_for_the_next_task(load_snippet, snippet):
    load_snippet(snippet)
    model = FakeModelWrapper(_answers({"1+1=": ["2"], "2+2=": ["4", "5"]}))
    # the guide's reset() keeps the first task's rollout_args, so both tasks share them
    rollout = GenerationConfig(n=2)
    first = Task(
        workflow="example_workflow",
        raw_task={"question": "1+1=", "answer": "2"},
        rollout_args=rollout,
        batch_id=0,
        task_id=0,
    )
    exps, workflow = _run(first, model)
    assert [e.reward for e in exps] == [1.0, 1.0]
    assert workflow.resettable()

    second = Task(
        workflow="example_workflow",
        raw_task={"question": "2+2=", "answer": "4"},
        rollout_args=rollout,
        repeat_times=2,
        batch_id=0,
        task_id=1,
    )
    exps2, again = _run(second, model, workflow)
    assert again is workflow, "a resettable workflow is reused, not rebuilt"
    assert workflow.question == "2+2=" and workflow.answer == "4"
    # repeat_times=2 runs of a non-repeatable workflow, n=2 samples each
    assert [e.reward for e in exps2] == [1.0, 0.0, 1.0, 0.0]
    assert [e.eid.run for e in exps2] == [0, 0, 1, 1]
    assert {e.eid.tid for e in exps2} == {"0/1"}


def _run(task, model, workflow=None):
    return run_sync(run_task_async(task, model, workflow=workflow))


def test_guide_yaml_selects_the_workflow_by_name(load_snippet, tmp_path, monkeypatch):
    load_snippet("example_workflow_full")
    data = tmp_path / "tasks.jsonl"
    rows = [{"question": "1+1=", "answer": "2"}, {"question": "2+2=", "answer": "4"}]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    monkeypatch.setenv("SEED_TASKSET_PATH", str(data))
    base = {
        "model": {"model_path": "fake/trinity-model"},
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
    }
    raw = (SNIPPETS / "use_workflow.yaml").read_text()
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(base) + raw)
    config = load_config(config_file)
    taskset = config.buffer.explorer_input.taskset
    assert taskset.default_workflow_type == "example_workflow"
    assert taskset.path == str(data)

    model = FakeModelWrapper(_answers({"1+1=": ["2"], "2+2=": ["5"]}))
    rewards = []
    for i, line in enumerate(data.read_text().splitlines()):
        task = Task(
            workflow=taskset.default_workflow_type,
            format_args=taskset.format,
            rollout_args=taskset.rollout_args,
            raw_task=json.loads(line),
            batch_id=0,
            task_id=i,
        )
        rewards += [e.reward for e in run_task(task, model)]
    assert rewards == [1.0, 0.0]


def test_example_workflow_with_a_duck_typed_model(load_snippet):
    """Any object with the guide's `chat` contract drives the guide's workflow."""
    load_snippet("example_workflow_full")

    class Response:
        def __init__(self, text):
            self.response_text = text
            self.tokens = torch.tensor([7, 8, 9])
            self.prompt_length = 2
            self.logprobs = torch.tensor([-0.5])

    class PlainModel:
        def chat(self, messages, n=1, temperature=1.0):
            return [Response("2") for _ in range(n)]

    task = Task(
        workflow="example_workflow",
        raw_task={"question": "1+1=", "answer": "2"},
        rollout_args=GenerationConfig(n=2),
        repeat_times=2,
    )
    exps = run_task(task, PlainModel())
    assert [e.reward for e in exps] == [1.0] * 4
    assert [e.eid.run for e in exps] == [0, 0, 1, 1]
    assert all(e.model_version is None for e in exps)
