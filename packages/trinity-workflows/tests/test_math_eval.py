"""``math_eval_workflow`` / ``async_math_eval_workflow``: Qwen2.5-Math style evaluation."""

from __future__ import annotations

import pytest

from trinity.common.config import FormatConfig, GenerationConfig
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, run_task
from trinity.workflows.common import MissingTaskFieldError, WorkflowArgsError
from trinity.workflows.math_eval import (
    EVAL_SYSTEM_PROMPT,
    AsyncMathEvalWorkflow,
    MathEvalWorkflow,
    math_eval_accuracy,
    reference_answer,
)
from trinity.workflows.single_turn import BOXED_SYSTEM_PROMPT

QA = FormatConfig(prompt_key="question", response_key="answer")


def _task(row, repeat_times=1, workflow="math_eval_workflow", **kwargs):
    kwargs.setdefault("format_args", QA)
    return Task(workflow=workflow, raw_task=row, repeat_times=repeat_times, **kwargs)


def test_asks_with_the_eval_prompt_and_scores_accuracy():
    model = FakeModelWrapper(
        ["Half of it: \\boxed{\\frac{1}{2}}", "So the final answer is 0.5.", "It is 2", ""]
    )
    task = _task({"question": "Half of 1?", "answer": "\\frac{1}{2}"}, repeat_times=4)
    task.rollout_args = GenerationConfig(temperature=1.0, top_p=1.0, max_tokens=64)
    exps = run_task(task, model)
    # boxed 1/2, "answer is 0.5" (= 1/2), the last number 2 (wrong), nothing (wrong); the
    # reward stays 0.0 as in Trinity-RFT 0.6 (accuracy is the evaluation's measure)
    assert [e.reward for e in exps] == [0.0, 0.0, 0.0, 0.0]
    assert [e.metrics for e in exps] == [
        {"accuracy": 1.0, "reward_error": 0.0},
        {"accuracy": 1.0, "reward_error": 0.0},
        {"accuracy": 0.0, "reward_error": 0.0},
        {"accuracy": 0.0, "reward_error": 0.0},
    ]
    assert [e.eid.run for e in exps] == [0, 1, 2, 3]
    (call,) = model.calls_of("chat")
    assert call.messages == [
        {"role": "system", "content": EVAL_SYSTEM_PROMPT},
        {"role": "user", "content": f"Half of 1?\n{BOXED_SYSTEM_PROMPT}"},
    ]
    # Qwen2.5-Math's sampling settings replace the task's; its other settings stay
    assert call.kwargs["temperature"] == 0.6 and call.kwargs["top_p"] == 0.8
    assert call.kwargs["max_tokens"] == 64 and call.kwargs["n"] == 4
    # the experience holds exactly the sampled tokens
    exp = exps[0]
    prompt_ids = model.tokenizer.apply_chat_template(call.messages, add_generation_prompt=True)
    assert exp.tokens[: exp.prompt_length].tolist() == prompt_ids
    response = exp.tokens[exp.prompt_length :].tolist()
    assert response == model.tokenizer.encode(exp.response_text) + [model.tokenizer.eos_token_id]


def test_sampling_settings_and_system_prompt_come_from_workflow_args():
    model = FakeModelWrapper(["\\boxed{4}"])
    task = _task(
        {"question": "2+2?", "answer": "4"},
        workflow_args={"temperature": 0, "top_p": 1.0, "system_prompt": "Be brief."},
    )
    assert run_task(task, model)[0].metrics["accuracy"] == 1.0
    (call,) = model.calls_of("chat")
    assert call.kwargs["temperature"] == 0.0 and call.kwargs["top_p"] == 1.0
    assert call.messages[0] == {"role": "system", "content": "Be brief."}


def test_reads_the_question_column_when_the_prompt_key_is_absent():
    """Trinity-RFT's workflow reads ``question`` whatever format.prompt_key says."""
    model = FakeModelWrapper(["\\boxed{4}"])
    task = _task({"question": "2+2?", "response": "4"}, format_args=FormatConfig())
    assert run_task(task, model)[0].metrics["accuracy"] == 1.0
    assert model.calls[0].messages[1]["content"].startswith("2+2?\n")


def test_the_tasks_reward_function_is_not_used():
    model = FakeModelWrapper(["<think>x</think><answer>4</answer> so \\boxed{4}"])
    task = _task({"question": "2+2?", "answer": "4"}, reward_fn="math_reward")
    exp = run_task(task, model)[0]
    assert exp.metrics["accuracy"] == 1.0 and set(exp.metrics) == {"accuracy", "reward_error"}


def test_reward_is_accuracy_sets_the_reward_to_the_accuracy():
    model = FakeModelWrapper(["\\boxed{4}", "\\boxed{5}"])
    task = _task({"question": "2+2?", "answer": "4"}, 2, workflow_args={"reward_is_accuracy": True})
    exps = run_task(task, model)
    assert [e.reward for e in exps] == [1.0, 0.0]
    assert [e.metrics["accuracy"] for e in exps] == [1.0, 0.0]


@pytest.mark.parametrize(
    ("truth", "expected"),
    [
        ("\\frac{1}{2}", "\\frac{1}{2}"),  # bare: whole, not its last number
        ("The area is \\boxed{12}.", "12"),
        ("3 + 4 = 7 apples.\n#### 7", "7"),
        (42, "42"),
    ],
)
def test_reference_answer(truth, expected):
    assert reference_answer(truth) == expected


def test_accuracy_function_compares_values_not_strings():
    assert math_eval_accuracy("\\boxed{0.5}", "\\frac{1}{2}") == {"accuracy": 1.0}
    assert math_eval_accuracy("The answer is 1,000.", "1000") == {"accuracy": 1.0}
    assert math_eval_accuracy("\\boxed{3}", "#### 4") == {"accuracy": 0.0}
    with pytest.raises(ValueError, match="reference answer"):
        math_eval_accuracy("\\boxed{3}", " ")


def test_missing_columns_are_named():
    with pytest.raises(MissingTaskFieldError, match=r"neither 'question'.*nor 'question'"):
        run_task(_task({"answer": "4"}), FakeModelWrapper("x"))
    with pytest.raises(MissingTaskFieldError, match=r"neither 'prompt'.*has keys \['answer'\]"):
        run_task(_task({"answer": "4"}, format_args=FormatConfig()), FakeModelWrapper("x"))
    with pytest.raises(MissingTaskFieldError, match=r"'answer' \(set by format.response_key\)"):
        run_task(_task({"question": "2+2?"}), FakeModelWrapper("x"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"temperature": -1}, r"workflow_args.temperature: must be >= 0.0, got -1"),
        ({"top_p": 1.5}, r"workflow_args.top_p: must be <= 1.0, got 1.5"),
        ({"temprature": 0.5}, r"unknown key 'temprature'; did you mean 'temperature'"),
        ({"temperature": "hot"}, r"workflow_args.temperature"),
        ({"reward_timeout": 0}, r"workflow_args.reward_timeout: must be > 0"),
    ],
)
def test_bad_workflow_args_are_refused_naming_the_key(args, message):
    task = _task({"question": "2+2?", "answer": "4"}, workflow_args=args)
    with pytest.raises(WorkflowArgsError, match=message) as info:
        run_task(task, FakeModelWrapper("x"))
    assert "math_eval_workflow" in str(info.value)


def test_async_twin_and_trinity_rft_names():
    from trinity.common.workflows import AsyncMathEvalWorkflow as by_guide_path

    assert WORKFLOWS.get("math_eval_workflow") is MathEvalWorkflow
    assert WORKFLOWS.get("async_math_eval_workflow") is AsyncMathEvalWorkflow is by_guide_path
    assert issubclass(AsyncMathEvalWorkflow, MathEvalWorkflow) and AsyncMathEvalWorkflow.is_async
    exps = run_task(
        _task({"question": "2+2?", "answer": "4"}, 2, "async_math_eval_workflow"),
        FakeModelWrapper(["\\boxed{4}", "\\boxed{5}"]),
    )
    assert [e.metrics["accuracy"] for e in exps] == [1.0, 0.0]
    assert [e.reward for e in exps] == [0.0, 0.0]
