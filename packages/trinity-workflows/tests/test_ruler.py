"""``math_ruler_workflow`` / ``async_math_ruler_workflow``: a judge scores each group (RULER)."""

from __future__ import annotations

import pytest

from trinity.common.config import FormatConfig
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, run_task
from trinity.workflows.common import WorkflowArgsError
from trinity.workflows.ruler import (
    AsyncMathRULERWorkflow,
    MathRULERWorkflow,
    build_ruler_messages,
    parse_ruler_scores,
)
from trinity.workflows.single_turn import R1_SYSTEM_PROMPT

QA = FormatConfig(prompt_key="question", response_key="answer")
ANSWERS = ["<think>2+2</think><answer>4</answer>", "<answer>5</answer>", "no idea"]


def _task(row, repeat_times=3, workflow="math_ruler_workflow", **kwargs):
    return Task(
        workflow=workflow, raw_task=row, format_args=QA, repeat_times=repeat_times, **kwargs
    )


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("[0.9, 0.1, 0.5]", [0.9, 0.1, 0.5]),
        ("First [1, 2, 3] is a scale.\nScores: [1, 0, 0.25]", [1.0, 0.0, 0.25]),  # last list
        ("[1.5, -0.2, 0.5]", [1.0, 0.0, 0.5]),  # clipped to [0, 1]
    ],
)
def test_parse_ruler_scores(reply, expected):
    assert parse_ruler_scores(reply, 3) == expected


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("all good", "no \\[score, ...\\] list"),
        (None, "no \\[score, ...\\] list"),
        ("[0.5, 0.5]", "gave 2 scores for 3 answers"),
        ("[0.5, 'high', 1]", "'high' is not a number"),
        ("[0.5, True, 1]", "True is not a number"),
        ("[a, b, c]", "not a list of numbers"),
        ("[0.5, nan, 1]", "not a list of numbers"),
    ],
)
def test_parse_ruler_scores_refuses_bad_lists(reply, message):
    with pytest.raises(ValueError, match=message):
        parse_ruler_scores(reply, 3)


def test_judge_messages_show_the_question_every_answer_and_the_instructions():
    messages = build_ruler_messages("2+2?", ["4", "5"], instructions="Use tags.")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "2 candidate answers" in messages[0]["content"]
    user = messages[1]["content"]
    assert user.startswith("[Question]\n2+2?\n")
    assert "[Instructions the candidates were given]\nUse tags." in user
    assert "[Candidate 1]\n4\n\n[Candidate 2]\n5" in user
    assert user.rstrip().endswith("[score of candidate 1, ..., score of candidate 2]")
    assert "Instructions" not in build_ruler_messages("q", ["a"])[1]["content"]


def judge_by_content(messages, sample_index):
    """Scores 1 for a candidate holding <answer>4</answer>, 0.5 for any other <answer>, else 0."""
    user = messages[-1]["content"]
    blocks = user.split("[Candidate ")[1:]
    scores = []
    for block in blocks:
        body = block.split("\n", 1)[1]
        scores.append(1.0 if "<answer>4</answer>" in body else 0.5 if "<answer>" in body else 0)
    return f"Compared them.\n{scores}"


def test_rewards_are_the_judges_scores_and_the_gold_reward_is_a_metric():
    model = FakeModelWrapper(ANSWERS)
    judge = FakeModelWrapper(judge_by_content, model_path="fake/judge")
    exps = run_task(_task({"question": "2+2?", "answer": "4"}), model, [judge])
    assert [e.reward for e in exps] == [1.0, 0.5, 0.0]
    assert [e.eid.run for e in exps] == [0, 1, 2]
    # math_reward: accuracy + format (+0.1 for the R1 format, -0.1 without)
    assert exps[0].metrics == {
        "accuracy": 1.0,
        "format_score": 0.1,
        "reward_error": 0.0,
        "gold_reward": 1.1,
        "judge_success": 1.0,
    }
    assert [e.metrics["gold_reward"] for e in exps] == [1.1, -0.1, -0.1]
    # one judge call for the whole group, through the auxiliary model's OpenAI API
    (judged,) = judge.calls_of("openai.chat.completions")
    user = judged.messages[-1]["content"]
    assert "[Question]\n2+2?" in user and R1_SYSTEM_PROMPT in user
    assert all(f"[Candidate {i + 1}]\n{a}" in user for i, a in enumerate(ANSWERS))
    # the policy saw the R1 prompt, as math_workflow asks
    assert model.calls_of("chat")[0].messages[0] == {"role": "system", "content": R1_SYSTEM_PROMPT}


def test_a_bad_judge_reply_gives_the_group_zero_and_says_why():
    judge = FakeModelWrapper("They all look fine to me.", model_path="fake/judge")
    exps = run_task(_task({"question": "2+2?", "answer": "4"}), FakeModelWrapper(ANSWERS), [judge])
    assert [e.reward for e in exps] == [0.0, 0.0, 0.0]
    assert all(e.metrics["judge_success"] == 0.0 for e in exps)
    assert "no [score, ...] list" in exps[0].info["judge_error"]
    assert exps[0].metrics["gold_reward"] == 1.1  # the reference still scored


def test_without_a_reference_no_gold_reward_is_reported():
    judge = FakeModelWrapper("[0.2, 0.8]", model_path="fake/judge")
    exps = run_task(_task({"question": "Tell a joke."}, 2), FakeModelWrapper(ANSWERS), [judge])
    assert [e.reward for e in exps] == [0.2, 0.8]
    assert [e.eid.run for e in exps] == [0, 1]
    assert exps[0].metrics == {"judge_success": 1.0}


def test_judge_index_and_max_tokens():
    first = FakeModelWrapper("[0, 0]", model_path="fake/first")
    second = FakeModelWrapper("[1, 1]", model_path="fake/second")
    task = _task(
        {"question": "q", "answer": "4"},
        2,
        workflow_args={"judge_index": 1, "judge_max_tokens": 99},
    )
    exps = run_task(task, FakeModelWrapper(ANSWERS), [first, second])
    assert [e.reward for e in exps] == [1.0, 1.0]
    assert not first.calls and second.calls[0].kwargs["max_tokens"] == 99


def test_an_openai_client_given_directly_works_as_judge():
    """Trinity-RFT's older API hands workflows ``openai.OpenAI`` clients."""
    judge = FakeModelWrapper("[0.3, 0.7]", model_path="fake/judge")
    exps = run_task(
        _task({"question": "q", "answer": "4"}, 2),
        FakeModelWrapper(ANSWERS),
        [judge.get_openai_client()],
    )
    assert [e.reward for e in exps] == [0.3, 0.7]


def test_configuration_errors_are_named():
    row = {"question": "q", "answer": "4"}
    with pytest.raises(ValueError, match="needs a judge model.*explorer.auxiliary_models"):
        run_task(_task(row), FakeModelWrapper(ANSWERS))
    judge = FakeModelWrapper("[1]", model_path="fake/judge")
    with pytest.raises(ValueError, match=r"judge_index is 2, but only 1 auxiliary.*allowed: 0"):
        run_task(_task(row, workflow_args={"judge_index": 2}), FakeModelWrapper("x"), [judge])
    with pytest.raises(WorkflowArgsError, match=r"workflow_args.judge_index: must be >= 0"):
        run_task(_task(row, workflow_args={"judge_index": -1}), FakeModelWrapper("x"), [judge])
    with pytest.raises(WorkflowArgsError, match=r"unknown key 'judge'"):
        run_task(_task(row, workflow_args={"judge": 0}), FakeModelWrapper("x"), [judge])


def test_async_twin():
    assert WORKFLOWS.get("math_ruler_workflow") is MathRULERWorkflow
    assert WORKFLOWS.get("async_math_ruler_workflow") is AsyncMathRULERWorkflow
    assert issubclass(AsyncMathRULERWorkflow, MathRULERWorkflow)
    judge = FakeModelWrapper(judge_by_content, model_path="fake/judge")
    exps = run_task(
        _task({"question": "2+2?", "answer": "4"}, workflow="async_math_ruler_workflow"),
        FakeModelWrapper(ANSWERS),
        [judge],
    )
    assert [e.reward for e in exps] == [1.0, 0.5, 0.0]


# ---------------------------------------------------------------- the policy as its own judge
def _policy(messages, sample_index):
    """Answers the question; asked to judge (the RULER system prompt), scores the group."""
    if messages[0]["content"].startswith("You are an impartial judge"):
        return ["[1.0, 0.0, 0.0]", "I think [0.5, 0.5, 0.5]", "no list"][sample_index % 3]
    return ANSWERS[sample_index % 3]


def test_trainable_ruler_with_the_reference_trains_the_judging_too():
    model = FakeModelWrapper(_policy)
    task = _task(
        {"question": "2+2?", "answer": "4"},
        workflow="math_trainable_ruler_workflow",
        workflow_args={"ground_truth_probability": 1.0},
        task_id=0,
    )
    exps = run_task(task, model)
    answers, judged = exps[:3], exps[3:]
    assert [e.reward for e in answers] == [1.1, -0.1, -0.1]  # the gold rewards
    assert len(judged) == 3 and {e.eid.task for e in judged} == {"0-ruler"}
    assert {e.eid.task for e in answers} == {0}  # the answers' group is the task's
    assert [e.eid.run for e in judged] == [0, 1, 2]
    # 1 - mean |score - scaled gold|, scaled gold = [1.0, 0.0, 0.0]
    assert [e.reward for e in judged] == pytest.approx([1.0, 1 - (0.5 + 0.5 + 0.5) / 3, 0.0])
    assert all(e.metrics["judge_success"] == pytest.approx(2 / 3) for e in exps)
    # the policy judged: no auxiliary model
    assert len(model.calls_of("chat")) == 2


def test_trainable_ruler_without_the_reference_rewards_the_policys_scores():
    model = FakeModelWrapper(_policy)
    task = _task(
        {"question": "2+2?", "answer": "4"},
        workflow="math_trainable_ruler_workflow",
        workflow_args={"ground_truth_probability": 0.0},
    )
    exps = run_task(task, model)
    assert [e.reward for e in exps] == [1.0, 0.0, 0.0]  # the one judge sample's scores
    assert [e.metrics["gold_reward"] for e in exps] == [1.1, -0.1, -0.1]
    assert all(e.metrics["judge_success"] == 1.0 for e in exps)
