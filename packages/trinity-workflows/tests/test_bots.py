"""``bots_math_boxed_workflow`` (Trinity-RFT's BOTS example) and the new async twins."""

from __future__ import annotations

import pytest

from trinity.common.config import FormatConfig
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, run_task
from trinity.workflows.bots import BOTSMathBoxedWorkflow, bots_math_boxed_reward, nested_get
from trinity.workflows.common import MissingTaskFieldError
from trinity.workflows.single_turn import (
    BOXED_SYSTEM_PROMPT,
    AsyncMathBoxedWorkflow,
    AsyncMathRMWorkflow,
    MathBoxedWorkflow,
    MathRMWorkflow,
)

NESTED = FormatConfig(prompt_key="extra.prompt", response_key="reward_model.ground_truth")
MESSAGES = [
    {"role": "system", "content": "Box the answer."},
    {"role": "user", "content": "What is 2+2?"},
]
ROW = {"extra": {"prompt": MESSAGES}, "reward_model": {"ground_truth": "4"}}


def _task(row, repeat_times=2, format_args=NESTED, **kwargs):
    return Task(
        workflow="bots_math_boxed_workflow",
        raw_task=row,
        format_args=format_args,
        repeat_times=repeat_times,
        **kwargs,
    )


def test_nested_get():
    row = {"a": {"b": {"c": 1}}, "x.y": 2}
    assert nested_get(row, "a.b.c") == 1 and nested_get(row, "x.y") == 2
    assert nested_get(row, "a.z") is nested_get(row, "q") is nested_get(None, "a")


def test_message_prompts_are_sent_as_they_are_and_scored_with_the_bots_reward():
    model = FakeModelWrapper(["So \\boxed{4}", "\\boxed{\\frac{8}{2}}", "\\boxed{5}", "4"])
    exps = run_task(_task(ROW, 4), model)
    # boxed 4, boxed 8/2 (= 4), a wrong box, no box: the tail "4" is graded as it is
    assert [e.reward for e in exps] == [1.0, 1.0, 0.0, 1.0]
    assert exps[0].metrics == {"accuracy": 1.0, "format_score": 0.0, "reward_error": 0.0}
    (call,) = model.calls_of("chat")
    assert call.messages == MESSAGES and call.kwargs["n"] == 4
    exp = exps[0]
    prompt = model.tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)
    assert exp.tokens[: exp.prompt_length].tolist() == prompt


def test_with_think_costs_a_response_without_a_think_block():
    model = FakeModelWrapper(["<think>2+2</think>\\boxed{4}", "\\boxed{4}"])
    task = _task(ROW, workflow_args={"with_think": True, "format_score_coef": 0.2})
    assert [e.reward for e in run_task(task, model)] == [1.0, 0.8]


def test_the_answer_is_read_after_the_think_block():
    assert bots_math_boxed_reward("<think>\\boxed{4}</think> \\boxed{5}", "4")["accuracy"] == 0.0
    assert bots_math_boxed_reward("<think>maybe 5</think> \\boxed{4}", "4")["accuracy"] == 1.0
    with pytest.raises(ValueError, match="reference answer"):
        bots_math_boxed_reward("\\boxed{4}", None)


def test_a_string_prompt_is_asked_as_math_boxed_workflow_asks_it():
    model = FakeModelWrapper(["\\boxed{4}"])
    exps = run_task(
        _task({"q": "2+2?", "a": "4"}, 1, FormatConfig(prompt_key="q", response_key="a")), model
    )
    assert exps[0].reward == 1.0
    assert model.calls[0].messages == [
        {"role": "system", "content": BOXED_SYSTEM_PROMPT},
        {"role": "user", "content": "2+2?"},
    ]


def test_the_tasks_reward_function_is_not_used():
    exps = run_task(_task(ROW, 1, reward_fn="math_reward"), FakeModelWrapper(["\\boxed{4}"]))
    assert exps[0].reward == 1.0 and "accuracy" in exps[0].metrics


def test_bad_rows_are_refused_naming_the_path():
    with pytest.raises(MissingTaskFieldError, match=r"nothing at 'extra.prompt' \(set by format"):
        run_task(_task({"extra": {}, "reward_model": {"ground_truth": "4"}}), FakeModelWrapper("x"))
    with pytest.raises(
        MissingTaskFieldError, match=r"'reward_model.ground_truth'.*keys \['extra'\]"
    ):
        run_task(_task({"extra": {"prompt": MESSAGES}}), FakeModelWrapper("x"))
    with pytest.raises(ValueError, match=r"must be a string or a list of \{'role', 'content'\}"):
        run_task(_task({**ROW, "extra": {"prompt": [{"text": "hi"}]}}), FakeModelWrapper("x"))
    with pytest.raises(ValueError, match="use_base needs a string prompt"):
        run_task(_task(ROW, workflow_args={"use_base": True}), FakeModelWrapper("x"))


def test_registered_names():
    assert WORKFLOWS.get("bots_math_boxed_workflow") is BOTSMathBoxedWorkflow
    assert issubclass(BOTSMathBoxedWorkflow, MathBoxedWorkflow)


# ---------------------------------------------------------------------- the async twins
def test_async_math_boxed_workflow_is_math_boxed_workflow_under_trinity_rfts_name():
    from trinity.common.workflows.customized_math_workflows import (
        AsyncMathBoxedWorkflow as upstream_path,
    )

    assert WORKFLOWS.get("async_math_boxed_workflow") is AsyncMathBoxedWorkflow is upstream_path
    assert issubclass(AsyncMathBoxedWorkflow, MathBoxedWorkflow) and AsyncMathBoxedWorkflow.is_async
    task = Task(
        workflow="async_math_boxed_workflow",
        raw_task={"prompt": "2+2?", "response": "4"},
        repeat_times=2,
        workflow_args={"with_think": True},
    )
    exps = run_task(task, FakeModelWrapper(["<think>a</think>\\boxed{4}", "\\boxed{4}"]))
    assert [e.reward for e in exps] == [1.0, 0.9]


def test_async_math_rm_workflow_is_math_rm_workflow_under_trinity_rfts_name():
    assert WORKFLOWS.get("async_math_rm_workflow") is AsyncMathRMWorkflow
    assert issubclass(AsyncMathRMWorkflow, MathRMWorkflow)
    judge = FakeModelWrapper("Fine.\nScore: 7", model_path="fake/judge")
    task = Task(
        workflow="async_math_rm_workflow",
        raw_task={"prompt": "2+2?", "response": "4"},
        repeat_times=2,
    )
    exps = run_task(task, FakeModelWrapper(["4", "5"]), [judge])
    assert [e.reward for e in exps] == [0.7, 0.7]
    assert exps[0].metrics == {"judge_score": 0.7, "reward_error": 0.0}
    with pytest.raises(ValueError, match="needs a reward model"):
        run_task(task, FakeModelWrapper(["4"]))
