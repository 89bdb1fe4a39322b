"""Single-turn built-in workflows, driven like the explorer drives them (``run_task``)."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from trinity.common.config import FormatConfig, GenerationConfig
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.common.workflows import WORKFLOWS, Task, run_task, run_task_async
from trinity.utils.aio import run_sync
from trinity.workflows.common import MissingTaskFieldError
from trinity.workflows.single_turn import (
    BOXED_SYSTEM_PROMPT,
    R1_SYSTEM_PROMPT,
    ArithmeticWorkflow,
    MathBoxedWorkflow,
    MathWorkflow,
)

QA = FormatConfig(prompt_key="question", response_key="answer")


def _task(workflow, row, repeat_times=1, **kwargs):
    return Task(
        workflow=workflow, raw_task=row, format_args=QA, repeat_times=repeat_times, **kwargs
    )


def test_math_workflow_scores_every_sample_in_one_call():
    model = FakeModelWrapper(
        ["<think>half</think><answer>\\frac{1}{2}</answer>", "<think>?</think><answer>2</answer>"]
    )
    task = _task("math_workflow", {"question": "What is 1/2?", "answer": "0.5"}, repeat_times=4)
    task.rollout_args = GenerationConfig(temperature=0.7, max_tokens=64)
    exps = run_task(task, model)
    assert [e.reward for e in exps] == [1.1, 0.1, 1.1, 0.1]
    assert [e.eid.run for e in exps] == [0, 1, 2, 3]
    assert exps[0].metrics == {"accuracy": 1.0, "format_score": 0.1, "reward_error": 0.0}
    (call,) = model.calls_of("chat")
    assert call.kwargs["n"] == 4 and call.kwargs["temperature"] == 0.7
    assert call.kwargs["max_tokens"] == 64
    assert call.messages == [
        {"role": "system", "content": R1_SYSTEM_PROMPT},
        {"role": "user", "content": "What is 1/2?"},
    ]
    # the experience holds exactly what the model produced, with its logprobs
    exp = exps[0]
    response = model.tokenizer.decode(exp.tokens[exp.prompt_length :], skip_special_tokens=True)
    assert response == "<think>half</think><answer>\\frac{1}{2}</answer>"
    assert exp.logprobs.shape == exp.tokens[exp.prompt_length :].shape


def test_math_workflow_uses_the_tasks_reward_and_no_r1_prompt_for_it():
    model = FakeModelWrapper(["\\boxed{3}"])
    task = _task(
        "math_workflow", {"question": "1+2?", "answer": "3"}, reward_fn="math_boxed_reward"
    )
    exps = run_task(task, model)
    assert exps[0].reward == 1.0
    assert model.calls[0].messages == [{"role": "user", "content": "1+2?"}]


def test_system_prompt_sources_in_order_of_precedence():
    row = {"question": "q", "answer": "1", "sys": "row prompt"}
    model = FakeModelWrapper(["\\boxed{1}"])
    fmt = FormatConfig(prompt_key="question", response_key="answer", system_prompt_key="sys")
    run_task(Task(workflow="math_boxed_workflow", raw_task=row, format_args=fmt), model)
    fmt2 = FormatConfig(prompt_key="question", response_key="answer", system_prompt="set prompt")
    run_task(Task(workflow="math_boxed_workflow", raw_task=row, format_args=fmt2), model)
    run_task(_task("math_boxed_workflow", row), model)
    systems = [c.messages[0]["content"] for c in model.calls_of("chat")]
    assert systems == ["row prompt", "set prompt", BOXED_SYSTEM_PROMPT]


def test_math_boxed_workflow_with_think_and_base_model_prompt():
    model = FakeModelWrapper(["\\boxed{4}", "<think>2+2</think>\\boxed{4}"])
    task = _task(
        "math_boxed_workflow",
        {"question": "2+2?", "answer": "4"},
        repeat_times=2,
        workflow_args={"with_think": True, "format_score_coef": 0.25},
    )
    exps = run_task(task, model)
    assert [e.reward for e in exps] == [0.75, 1.0]
    assert "<think>" in model.calls[0].messages[0]["content"]

    base = FakeModelWrapper(["\\boxed{4}"])
    task = _task("math_boxed_workflow", {"question": "2+2?", "answer": "4"}, repeat_times=2)
    task.workflow_args = {"use_base": True}
    exps = run_task(task, base)
    assert [e.reward for e in exps] == [1.0, 1.0]
    (call,) = base.calls_of("generate")
    assert call.prompts[0].endswith("User:\n2+2?\nAssistant:\n")


def test_countdown_workflow_builds_its_prompt_and_truth():
    model = FakeModelWrapper(["<answer>(1 + 2) * 3</answer>", "<answer>1+2+3</answer>", "none"])
    task = Task(workflow="countdown_workflow", raw_task={"nums": [1, 2, 3], "target": 9})
    task.repeat_times = 3
    exps = run_task(task, model)
    assert [e.reward for e in exps] == [1.0, 0.1, 0.0]
    prompt = model.calls[0].messages[-1]["content"]
    assert "[1, 2, 3]" in prompt and "equals 9" in prompt


def test_arithmetic_workflow_is_the_quickstart_task():
    model = FakeModelWrapper(["12", " 12 apples", "13", "twelve"])
    exps = run_task(_task("arithmetic_workflow", {"question": "7+5=", "answer": "12"}, 4), model)
    assert [e.reward for e in exps] == [1.0, 1.0, 0.0, 0.0]
    # the bare question, no system prompt: a tiny model sees only "7+5="
    assert model.calls[0].messages == [{"role": "user", "content": "7+5="}]
    # rows without an answer get it computed from the question
    exps = run_task(_task("arithmetic_workflow", {"question": "3*4="}), FakeModelWrapper("12"))
    assert exps[0].reward == 1.0


def test_arithmetic_reward_options():
    fn = REWARD_FUNCTIONS.get("arithmetic_reward")
    assert fn()(response="12 or 13", truth="12") == {"accuracy": 1.0}
    assert fn(strict=True)(response="12 or 13", truth="12") == {"accuracy": 0.0}
    assert fn(partial_credit=True)(response="17", truth="12") == {
        "accuracy": 0.0,
        "digit_score": 0.25,
    }


def test_simple_workflow_with_a_user_reward_function():
    @REWARD_FUNCTIONS.register_module("test_length_reward")
    class LengthReward(RewardFn):
        def __call__(self, response, truth=None, **kwargs):
            return {"short": float(len(response) <= self.limit)}

    try:
        model = FakeModelWrapper(["ok", "far too long"])
        task = _task("simple_workflow", {"question": "say ok"}, repeat_times=2)
        task.reward_fn = "test_length_reward"
        task.reward_fn_args = {"limit": 3}
        assert [e.reward for e in run_task(task, model)] == [1.0, 0.0]
    finally:
        REWARD_FUNCTIONS.unregister("test_length_reward")


def test_simple_workflow_without_reward_function_says_so():
    exps = run_task(_task("simple_workflow", {"question": "hi"}), FakeModelWrapper("x"))
    assert exps[0].reward == 0.0
    assert exps[0].info["reward_error"] == "no reward function configured"


def test_missing_columns_are_named():
    with pytest.raises(MissingTaskFieldError, match=r"'answer' \(set by format.response_key\)"):
        run_task(_task("math_workflow", {"question": "q"}), FakeModelWrapper("x"))
    with pytest.raises(MissingTaskFieldError, match=r"lacks 'question'.*has keys \['prompt'\]"):
        run_task(_task("simple_workflow", {"prompt": "q"}), FakeModelWrapper("x"))
    with pytest.raises(MissingTaskFieldError, match="countdown_workflow.*'target'"):
        run_task(Task(workflow="countdown_workflow", raw_task={"nums": [1]}), FakeModelWrapper("x"))


def test_unknown_reward_name_suggests_the_closest():
    task = _task("math_workflow", {"question": "q", "answer": "1"}, reward_fn="math_rewrd")
    with pytest.raises(KeyError, match="Did you mean 'math_reward'"):
        run_task(task, FakeModelWrapper("x"))


def test_reset_reuses_the_instance_and_switches_task():
    model = FakeModelWrapper(lambda messages, i: messages[-1]["content"].split("=")[0][-1])
    first = _task("arithmetic_workflow", {"question": "1+1=", "answer": "1"}, 2)
    exps, workflow = run_sync(run_task_async(first, model))
    assert [e.reward for e in exps] == [1.0, 1.0]
    second = _task("arithmetic_workflow", {"question": "2+2=", "answer": "4"}, 3)
    exps, again = run_sync(run_task_async(second, model, workflow=workflow))
    assert again is workflow and workflow.task_desc == "2+2="
    assert [e.reward for e in exps] == [0.0, 0.0, 0.0]
    assert len(exps) == 3


def test_sync_run_and_async_run_agree():
    task = _task("math_boxed_workflow", {"question": "q", "answer": "5"}, 2)
    workflow = task.to_workflow(FakeModelWrapper(["\\boxed{5}", "\\boxed{6}"]))
    workflow.set_repeat_times(2, run_id_base=4)
    sync = workflow.run()
    workflow.model.set_responses(["\\boxed{5}", "\\boxed{6}"])
    asynced = asyncio.run(workflow.run_async())
    assert [e.reward for e in sync] == [e.reward for e in asynced] == [1.0, 0.0]
    assert [e.eid.run for e in sync] == [4, 5]
    assert all(torch.equal(a.tokens, b.tokens) for a, b in zip(sync, asynced, strict=True))


def test_built_ins_resolve_by_name_and_by_the_guides_path():
    from trinity.common.workflows import MathBoxedWorkflow as boxed
    from trinity.common.workflows import MathWorkflow as math_wf

    assert math_wf is MathWorkflow and boxed is MathBoxedWorkflow
    assert WORKFLOWS.get("arithmetic_workflow") is ArithmeticWorkflow
    assert json.loads(json.dumps(WORKFLOWS.list()))  # names are plain strings
