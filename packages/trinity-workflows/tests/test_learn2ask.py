"""``learn2ask_workflow``: the Learn-to-Ask example's doctor workflow, judged by a fake model."""

from __future__ import annotations

import pytest

from trinity.common.config import FormatConfig
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, run_task
from trinity.workflows.common import WorkflowArgsError
from trinity.workflows.learn2ask import (
    ROLLOUT_PROMPT,
    ROLLOUT_PROMPT_ASK_ONLY,
    STOP_MARKER,
    Learn2AskWorkflow,
    fuse_scores,
    parse_judge_tags,
)

FMT = FormatConfig(prompt_key="messages", response_key="action_truth")
DIALOGUE = [
    {"role": "user", "content": "I have had a headache since yesterday."},
    {"role": "assistant", "content": "Is the pain sharp, dull or throbbing?"},
    {"role": "user", "content": "Throbbing."},
]
QUESTION = "Do you also feel nauseous, dizzy, or neither?"


def _row(decision="continue", info="nausea; fever"):
    return {"messages": DIALOGUE, "decision_truth": decision, "info_truth": info}


def _task(row, repeat_times=1, **kwargs):
    return Task(
        workflow="learn2ask_workflow",
        raw_task=row,
        format_args=FMT,
        repeat_times=repeat_times,
        **kwargs,
    )


def _judge(
    reply="<think>one relevant question</think><format_score>1.0</format_score>"
    "<content_score>0.5</content_score>",
):
    return FakeModelWrapper(reply, model_path="fake/judge")


def test_parse_judge_tags():
    assert parse_judge_tags(
        "<format_score> 0.5 </format_score><content_score>1</content_score>"
    ) == {
        "format_score": 0.5,
        "content_score": 1.0,
    }
    assert parse_judge_tags("<format_score>high</format_score>") == {
        "format_score": 0.0,
        "content_score": 0.0,
    }
    assert parse_judge_tags("<content_score>7</content_score>")["content_score"] == 1.0
    assert parse_judge_tags(None) == {"format_score": 0.0, "content_score": 0.0}


@pytest.mark.parametrize(
    ("train_mode", "fusion_mode", "expected"),
    [
        ("Ra+Rs", "default", 1.0 * (1 + 2 * 0.5) + 0.25),
        ("Ra+Rs", "sum", 1.0 + 0.5 + 0.25),
        ("Ra", "default", 2 * 0.5 + 0.25),
        ("Rs", "sum", 3 * 1.0 + 0.25),
    ],
)
def test_fuse_scores(train_mode, fusion_mode, expected):
    scores = {"action_score": 1.0, "content_score": 0.5, "format_score": 0.25}
    assert fuse_scores(scores, train_mode, fusion_mode) == expected


def test_a_question_is_judged_and_the_scores_fused():
    model = FakeModelWrapper([QUESTION, STOP_MARKER])
    judge = _judge()
    exps = run_task(_task(_row(), repeat_times=2), model, [judge])
    # a question where the doctor continued: action 1, judge's format 1.0 and content 0.5
    # -> 1 * (1 + 2 * 0.5) + 1.0; a stop where the doctor continued: all 0
    assert [e.reward for e in exps] == [3.0, 0.0]
    assert exps[0].metrics == {
        "action_score": 1.0,
        "content_score": 0.5,
        "format_score": 1.0,
        "reward_error": 0.0,
    }
    assert [e.eid.run for e in exps] == [0, 1]
    (call,) = model.calls_of("chat")
    assert call.messages == [{"role": "system", "content": ROLLOUT_PROMPT}, *DIALOGUE]
    assert STOP_MARKER in ROLLOUT_PROMPT and STOP_MARKER not in ROLLOUT_PROMPT_ASK_ONLY
    # the judge saw the reference facts and the dialogue ending with the model's question
    (judged,) = judge.calls_of("openai.chat.completions")
    assert "nausea; fever" in judged.messages[0]["content"]
    assert "<format_score>" in judged.messages[0]["content"]
    assert judged.messages[1]["content"] == (
        "patient: I have had a headache since yesterday.\n"
        "doctor: Is the pain sharp, dull or throbbing?\n"
        "patient: Throbbing.\n"
        f"doctor: {QUESTION}\n"
    )
    exp = exps[0]
    prompt = model.tokenizer.apply_chat_template(call.messages, add_generation_prompt=True)
    assert exp.tokens[: exp.prompt_length].tolist() == prompt


def test_a_stop_where_the_doctor_stopped_needs_no_judge():
    model = FakeModelWrapper([STOP_MARKER, f"I think we can stop. {STOP_MARKER}", QUESTION])
    judge = _judge()
    exps = run_task(_task(_row("stop"), repeat_times=3), model, [judge])
    # exact marker: 1 * (1 + 2) + 1; marker with text: format 0; a question: all 0
    assert [e.reward for e in exps] == [4.0, 3.0, 0.0]
    assert not judge.calls


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"train_mode": "Ra"}, 2 * 0.5 + 1.0),
        ({"train_mode": "Rs"}, 3 * 1.0 + 1.0),
        ({"fusion_mode": "sum"}, 1.0 + 0.5 + 1.0),
    ],
)
def test_train_and_fusion_modes(args, expected):
    model = FakeModelWrapper(QUESTION)
    exps = run_task(_task(_row(), workflow_args=args), model, [_judge()])
    assert exps[0].reward == expected
    system = model.calls[0].messages[0]["content"]
    assert system == (ROLLOUT_PROMPT_ASK_ONLY if args.get("train_mode") == "Ra" else ROLLOUT_PROMPT)


def test_a_string_prompt_is_one_patient_message_and_defaults_apply():
    model = FakeModelWrapper(QUESTION)
    judge = _judge()
    exps = run_task(_task({"messages": "My head hurts."}), model, [judge])
    assert exps[0].reward == 3.0  # decision_truth defaults to continue
    assert model.calls[0].messages[1] == {"role": "user", "content": "My head hurts."}
    (judged,) = judge.calls_of("openai.chat.completions")
    assert "None" in judged.messages[0]["content"]  # info_truth's default


def test_a_failing_judge_is_retried_then_costs_the_answer_its_reward(monkeypatch):
    import trinity.workflows.learn2ask as learn2ask

    calls, waits = [], []

    async def failing_judge(judge, messages, max_tokens):
        calls.append(messages)
        raise ConnectionError("judge unreachable")

    async def no_wait(seconds):
        waits.append(seconds)

    monkeypatch.setattr(learn2ask, "ask_judge", failing_judge)
    monkeypatch.setattr(learn2ask, "_wait", no_wait)
    task = _task(_row(), workflow_args={"judge_retries": 2})
    exps = run_task(task, FakeModelWrapper(QUESTION), [_judge()])
    assert len(calls) == 3 and waits == [1, 2]
    assert exps[0].reward == 0.0 and exps[0].metrics["reward_error"] == 1.0
    assert "ConnectionError: judge unreachable" in exps[0].info["reward_error"]


def test_configuration_and_row_errors_are_named():
    with pytest.raises(ValueError, match="needs a judge model.*explorer.auxiliary_models"):
        run_task(_task(_row()), FakeModelWrapper(QUESTION))
    with pytest.raises(
        ValueError, match=r"'decision_truth' is 'maybe'; allowed: 'continue', 'stop'"
    ):
        run_task(_task(_row("maybe")), FakeModelWrapper(QUESTION), [_judge()])
    bad = {**_row(), "messages": [{"role": "doctor", "content": "hi"}]}
    with pytest.raises(ValueError, match=r"'messages' must be a list of \{'role': 'user'"):
        run_task(_task(bad), FakeModelWrapper(QUESTION), [_judge()])
    with pytest.raises(WorkflowArgsError, match=r"train_mode: invalid value 'RaRs'"):
        run_task(
            _task(_row(), workflow_args={"train_mode": "RaRs"}), FakeModelWrapper("x"), [_judge()]
        )
    with pytest.raises(WorkflowArgsError, match=r"judge_retries: must be >= 0"):
        run_task(
            _task(_row(), workflow_args={"judge_retries": -1}), FakeModelWrapper("x"), [_judge()]
        )


def test_registered_under_the_examples_name():
    assert WORKFLOWS.get("learn2ask_workflow") is Learn2AskWorkflow
