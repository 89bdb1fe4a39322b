"""LLM-as-judge reward with a FakeModelWrapper judge, alone and inside workflows."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import Task, run_task
from trinity.workflows.rewards.base import compute_reward, compute_reward_async
from trinity.workflows.rewards.judge import (
    AsyncLLMJudgeRewardFn,
    LLMJudgeRewardFn,
    parse_judge_score,
)
from trinity.workflows.single_turn import MATH_RM_RUBRIC


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Score: 7", 7.0),
        ("The answer is right.\nScore: 7.5", 7.5),
        ("**Score:** 8", 8.0),
        ("score = [[6]]", 6.0),
        ("Score: 3/5", 6.0),  # a fraction is rescaled to max_score
        ("Score: 7 out of 10", 7.0),
        ("On a scale (Score: 0-10) ... Final Score: 9", 9.0),  # the last one counts
        ("Score: 15", 10.0),  # clamped
        ("Score: -2", 0.0),  # clamped
    ],
)
def test_parse_judge_score(reply, expected):
    assert parse_judge_score(reply, max_score=10) == expected


@pytest.mark.parametrize("reply", ["I would give it a seven.", "", None, "Scores vary."])
def test_parse_judge_score_refuses_replies_without_a_score(reply):
    with pytest.raises(ValueError, match="no 'Score: <number>' line"):
        parse_judge_score(reply, max_score=10)


def grader(messages, sample_index):
    """Judge double: 9 when the graded response contains the reference, else 2."""
    text = messages[-1]["content"]
    response = text.split("[Response to grade]\n", 1)[1].split("\n\nGrade the response", 1)[0]
    reference = (
        text.split("[Reference answer]\n", 1)[1].split("\n", 1)[0] if "[Reference" in text else None
    )
    return "Looks right.\nScore: 9" if reference and reference in response else "Wrong.\nScore: 2"


def test_judge_given_as_model_wrapper_builds_the_prompt_and_normalizes():
    judge = FakeModelWrapper(responses=grader, model_path="fake/judge")
    fn = LLMJudgeRewardFn(auxiliary_models=[judge], rubric="Be strict.", temperature=0.0)
    assert fn(response="It is 4.", prompt="2+2?", truth="4") == {"judge_score": 0.9}
    assert fn(response="It is 5.", prompt="2+2?", truth="4") == {"judge_score": 0.2}
    call = judge.calls_of("openai.chat.completions")[0]
    assert call.kwargs["temperature"] == 0.0
    assert call.messages[0]["role"] == "system"
    user = call.messages[-1]["content"]
    assert user.startswith("Be strict.") and "[Question]\n2+2?" in user
    assert "[Reference answer]\n4" in user and "from 0 to 10" in user


def test_judge_given_as_openai_clients():
    judge = FakeModelWrapper(responses="Score: 6", model_path="fake/judge")
    sync_fn = LLMJudgeRewardFn(auxiliary_models=[judge.get_openai_client()], max_score=8)
    assert type(sync_fn) is LLMJudgeRewardFn
    assert sync_fn(response="x") == {"judge_score": 0.75}

    # a plain client without model_path: the model name comes from /v1/models
    base = f"{judge.API_ADDRESS}/v1"
    plain = openai.OpenAI(
        base_url=base,
        api_key="x",
        http_client=httpx.Client(transport=judge.http_transport(), base_url=base),
    )
    assert LLMJudgeRewardFn(auxiliary_models=[plain])(response="x") == {"judge_score": 0.6}

    async_fn = LLMJudgeRewardFn(auxiliary_models=[judge.get_openai_async_client()])
    assert isinstance(async_fn, AsyncLLMJudgeRewardFn)
    result = asyncio.run(compute_reward_async(async_fn, response="x", prompt="q"))
    assert result.reward == 0.6 and result.error is None


def test_judge_index_selects_the_auxiliary_model():
    first = FakeModelWrapper(responses="Score: 1", model_path="fake/a")
    second = FakeModelWrapper(responses="Score: 10", model_path="fake/b")
    fn = LLMJudgeRewardFn(auxiliary_models=[first, second], judge_index=1)
    assert fn(response="x") == {"judge_score": 1.0}
    assert first.calls == []


def test_judge_constructor_errors_are_clear():
    judge = FakeModelWrapper(responses="Score: 1")
    with pytest.raises(ValueError, match="configure explorer.auxiliary_models"):
        LLMJudgeRewardFn(auxiliary_models=None)
    with pytest.raises(ValueError, match="configure explorer.auxiliary_models"):
        LLMJudgeRewardFn(auxiliary_models=[])
    with pytest.raises(ValueError, match="judge_index=2 but only 1 auxiliary model"):
        LLMJudgeRewardFn(auxiliary_models=[judge], judge_index=2)
    with pytest.raises(ValueError, match=r"unknown placeholder\(s\) \{answer\}"):
        LLMJudgeRewardFn(auxiliary_models=[judge], prompt_template="Grade {answer}")
    with pytest.raises(ValueError, match=r"must contain \{response\}"):
        LLMJudgeRewardFn(auxiliary_models=[judge], prompt_template="Grade {prompt}")
    with pytest.raises(ValueError, match="max_score must be a number > 0"):
        LLMJudgeRewardFn(auxiliary_models=[judge], max_score=0)
    with pytest.raises(TypeError, match="must be a ModelWrapper, an openai.OpenAI or"):
        LLMJudgeRewardFn(auxiliary_models=["http://judge:8000"])


def test_custom_prompt_template():
    judge = FakeModelWrapper(responses="Score: 4", model_path="fake/judge")
    fn = LLMJudgeRewardFn(
        auxiliary_models=[judge],
        max_score=5,
        prompt_template="Q: {prompt}\nA: {response}\n{{0-{max_score}}}",
    )
    assert fn(response="yes", prompt="ok?") == {"judge_score": 0.8}
    assert (
        judge.calls_of("openai.chat.completions")[0].messages[-1]["content"]
        == "Q: ok?\nA: yes\n{0-5}"
    )


def test_judge_reply_without_score_gives_zero_and_reward_error():
    judge = FakeModelWrapper(responses="I cannot decide.", model_path="fake/judge")
    fn = LLMJudgeRewardFn(auxiliary_models=[judge])
    result = compute_reward(fn, response="x")
    assert result.reward == 0.0 and "I cannot decide." in result.error

    model = FakeModelWrapper(responses="<answer>4</answer>")
    task = Task(
        workflow="math_rm_workflow", raw_task={"prompt": "2+2?", "response": "4"}, repeat_times=2
    )
    exps = run_task(task, model, auxiliary_models=[judge])
    assert [e.reward for e in exps] == [0.0, 0.0]
    assert all(e.metrics["reward_error"] == 1.0 for e in exps)
    assert "no 'Score: <number>' line" in exps[0].info["reward_error"]
    assert "I cannot decide." in exps[0].info["reward_error"]


def test_math_rm_workflow_end_to_end_with_judge_wrapper():
    judge = FakeModelWrapper(responses=grader, model_path="fake/judge")
    model = FakeModelWrapper(
        responses=["<think>2+2</think><answer>4</answer>", "<answer>5</answer>"]
    )
    task = Task(
        workflow="math_rm_workflow", raw_task={"prompt": "2+2?", "response": "4"}, repeat_times=2
    )
    exps = run_task(task, model, auxiliary_models=[judge])

    assert [e.reward for e in exps] == [0.9, 0.2]
    assert [e.metrics["judge_score"] for e in exps] == [0.9, 0.2]
    assert [e.eid.run for e in exps] == [0, 1]
    graded = [c.messages[-1]["content"] for c in judge.calls_of("openai.chat.completions")]
    assert len(graded) == 2 and all(g.startswith(MATH_RM_RUBRIC) for g in graded)
    assert all("[Reference answer]\n4" in g for g in graded)


def test_math_rm_workflow_with_async_client_judge():
    judge = FakeModelWrapper(responses=grader, model_path="fake/judge")
    model = FakeModelWrapper(responses="<answer>4</answer>")
    task = Task(workflow="math_rm_workflow", raw_task={"prompt": "2+2?", "response": "4"})
    exps = run_task(task, model, auxiliary_models=[judge.get_openai_async_client()])
    assert exps[0].reward == 0.9 and exps[0].metrics["reward_error"] == 0.0


def test_math_rm_workflow_without_auxiliary_model_is_a_clear_error():
    task = Task(workflow="math_rm_workflow", raw_task={"prompt": "2+2?", "response": "4"})
    with pytest.raises(ValueError, match="explorer.auxiliary_models"):
        run_task(task, FakeModelWrapper(responses="4"))
