"""Email search (ART's Enron task): the agent on a small local mailbox, ART's rubric reward.

The Enron database 0.6 reads is built from a Hugging Face data set, so the tests build a small
mailbox of the same layout (a row's ``emails``, or a file through ``create_email_database``).
The scripted agent answers from the conversation: search, read the email found, answer; the
judge is a second fake model.
"""

from __future__ import annotations

import json

import pytest

from trinity.common.models.testing import FakeModelWrapper, format_tool_call
from trinity.common.workflows import Task, run_task
from trinity.workflows.common import MissingTaskFieldError
from trinity.workflows.envs.email_db import EmailStore, create_email_database
from trinity.workflows.envs.email_search import (
    FINISH_HINT,
    EmailRubric,
    rubric_reward,
)

INBOX = "sara@enron.com"
EMAILS = [
    {
        "message_id": "<m1@enron>",
        "date": "2001-05-01 10:00:00",
        "subject": "Trip to Houston",
        "body": "The meeting with Ken moved to Tuesday 3pm, in Houston.",
        "from": "jeff@enron.com",
        "to": [INBOX],
    },
    {
        "message_id": "<m2@enron>",
        "date": "2001-05-03 09:00:00",
        "subject": "Lunch",
        "body": "Lunch on Friday? The meeting in Houston went fine.",
        "from": INBOX,
        "to": ["bob@enron.com"],
        "cc": ["jeff@enron.com"],
    },
    {  # after the query date: a search must not find it
        "message_id": "<m3@enron>",
        "date": "2001-06-10 12:00:00",
        "subject": "Recap",
        "body": "Recap of the meeting in Houston.",
        "from": "jeff@enron.com",
        "to": [INBOX],
    },
    {  # another inbox
        "message_id": "<m4@enron>",
        "date": "2001-04-01 12:00:00",
        "subject": "Elsewhere",
        "body": "A meeting in Houston for other people.",
        "from": "x@enron.com",
        "to": ["y@enron.com"],
    },
]
ROW = {
    "id": 7,
    "question": "When is the meeting with Ken?",
    "answer": "Tuesday at 3pm",
    "message_ids": ["<m1@enron>"],
    "how_realistic": 0.8,
    "inbox_address": INBOX,
    "query_date": "2001-05-20",
}


def searcher(answer: str = "Tuesday at 3pm", sources: tuple[str, ...] = ("<m1@enron>",)):
    """Search, read the first hit, answer."""

    def reply(messages: list[dict], sample_index: int) -> str:
        tools = [m for m in messages if m["role"] == "tool"]
        if not tools:
            keywords = ["meeting", "Houston"]
            args = {"inbox_address": INBOX, "query_date": "2001-05-20", "keywords": keywords}
            return "Let me search." + format_tool_call("search_emails", args)
        if len(tools) == 1:
            hits = json.loads(tools[0]["content"])
            return format_tool_call("read_email", {"message_id": hits[-1]["message_id"]})
        return format_tool_call("generate_response", {"answer": answer, "sources": list(sources)})

    return reply


def email_task(row: dict | None = None, repeat_times: int = 1, **kwargs) -> Task:
    return Task(
        workflow="email_search_workflow",
        raw_task={**ROW, "emails": EMAILS, **(row or {})},
        repeat_times=repeat_times,
        **kwargs,
    )


def judge(verdict: str) -> list[FakeModelWrapper]:
    return [FakeModelWrapper(verdict, model_path="fake/judge")]


def test_right_answer_with_its_source_earns_the_full_rubric():
    model = FakeModelWrapper(searcher())
    aux = judge("true")
    exps = run_task(email_task(repeat_times=2), model, aux)
    assert sorted((e.eid.run, e.eid.step) for e in exps) == [
        (r, s) for r in (0, 1) for s in (0, 1, 2)
    ]
    # accuracy 1 + format (1 + 0.3 right source + 0.1 / 1 source + 0.1 * (1 - 3 / 10))
    assert {round(e.reward, 6) for e in exps} == {2.47}
    exp = exps[0]
    assert exp.metrics["accuracy"] == 1.0 and exp.metrics["format"] == pytest.approx(1.47)
    assert exp.metrics["actual_turns"] == 3.0 and exp.info["stop_reason"] == "env_done"
    assert exp.info["answer"] == "Tuesday at 3pm" and exp.info["sources"] == ["<m1@enron>"]
    # the judge saw the question, the reference and the answer
    asked = aux[0].calls_of("openai.chat.completions")[0].messages[-1]["content"]
    assert "Reference answer: Tuesday at 3pm" in asked and "AI answer: Tuesday at 3pm" in asked
    # the prompt names the inbox and the date; the search kept to them
    first = model.calls_of("openai.chat.completions")[0].messages
    assert INBOX in first[0]["content"] and "2001-05-20" in first[0]["content"]
    after_search = next(
        c.messages for c in model.calls_of("openai.chat.completions") if len(c.messages) == 4
    )
    hits = json.loads(after_search[-1]["content"])
    assert [h["message_id"] for h in hits] == ["<m2@enron>", "<m1@enron>"]  # newest first
    assert "<b>" in hits[0]["snippet"]


def test_wrong_answer_keeps_only_partial_credit():
    [*exps] = run_task(email_task(), FakeModelWrapper(searcher("Monday")), judge("false"))
    assert exps[0].metrics["accuracy"] == -1.0
    assert exps[0].metrics["format"] == pytest.approx(0.3)  # found, read, cited the email
    assert exps[0].reward == pytest.approx(-0.7)


def test_no_final_answer_is_a_format_failure_after_reminders():
    model = FakeModelWrapper("I think it is on Tuesday.")
    exps = run_task(email_task(workflow_args={"max_turns": 3}), model, judge("true"))
    assert len(exps) == 3 and {e.reward for e in exps} == {-1.0}
    assert exps[0].metrics["format"] == -1.0 and exps[0].info["answer"] is None
    last = model.calls_of("openai.chat.completions")[-1].messages
    assert sum(m["content"] == FINISH_HINT for m in last) == 2


def test_a_text_reply_gets_a_reminder_then_the_answer_counts():
    def reply(messages, sample_index):
        if messages[-1]["content"] == FINISH_HINT:
            return format_tool_call("generate_response", {"answer": "Tuesday 3pm", "sources": []})
        return "It must be Tuesday."

    exps = run_task(email_task(), FakeModelWrapper(reply), judge("true"))
    assert [e.eid.step for e in exps] == [0, 1]
    # right answer, no sources: 1 + 1 + 0.1 * (1 - 2 / 10)
    assert exps[0].reward == pytest.approx(2.08)


def test_string_match_instead_of_a_judge():
    task = email_task(reward_fn_args={"llm_as_a_judge": False})
    exps = run_task(task, FakeModelWrapper(searcher("Tuesday at 3pm")))
    assert exps[0].reward == 1.0 and exps[0].metrics["format"] == 0.0
    exps = run_task(task, FakeModelWrapper(searcher("Wednesday")))
    assert exps[0].reward == 0.0


def test_tool_errors_are_shown_to_the_agent():
    def reply(messages, sample_index):
        turn = sum(m["role"] == "assistant" for m in messages)
        calls = [
            format_tool_call("read_email", {"message_id": "<nope>"}),
            format_tool_call(
                "search_emails", {"inbox_address": INBOX, "query_date": "May 20", "keywords": ["x"]}
            ),
            format_tool_call("generate_response", {"answer": "I don't know", "sources": []}),
        ]
        return calls[turn]

    model = FakeModelWrapper(reply)
    exps = run_task(email_task(), model, judge("false"))
    last = model.calls_of("openai.chat.completions")[-1].messages
    tools = [m["content"] for m in last if m["role"] == "tool"]
    assert "no email with message_id '<nope>'" in tools[0]
    assert "query_date must be YYYY-MM-DD" in tools[1]
    assert exps[0].info["num_tool_errors"] == 2
    assert exps[0].reward == pytest.approx(-1.0)  # "I don't know" the judge did not accept


def test_database_file_from_workflow_args_or_the_environment(tmp_path, monkeypatch):
    db = tmp_path / "enron_emails.db"
    create_email_database(db, EMAILS).close()
    row = {**ROW}
    task = Task(workflow="email_search_workflow", raw_task=row, workflow_args={"db_path": str(db)})
    exps = run_task(task, FakeModelWrapper(searcher()), judge("true"))
    assert exps[0].reward == pytest.approx(2.47)
    monkeypatch.setenv("DEFAULT_EMAIL_DB_PATH", str(db))
    exps = run_task(
        Task(workflow="email_search_workflow", raw_task=row),
        FakeModelWrapper(searcher()),
        judge("true"),
    )
    assert exps[0].reward == pytest.approx(2.47)
    store = EmailStore(db)
    assert store.read("<m2@enron>")["cc_addresses"] == ["jeff@enron.com"]
    assert (
        store.search(INBOX, ["meeting"], sent_after="2001-05-02")[0]["message_id"] == "<m3@enron>"
    )


def test_missing_pieces_are_named(monkeypatch):
    monkeypatch.delenv("DEFAULT_EMAIL_DB_PATH", raising=False)
    model = FakeModelWrapper()
    with pytest.raises(MissingTaskFieldError, match="corbt/enron-emails"):
        Task(workflow="email_search_workflow", raw_task=ROW).to_workflow(model, judge("true"))
    with pytest.raises(ValueError, match="needs a judge model"):
        email_task().to_workflow(model)
    with pytest.raises(MissingTaskFieldError, match="inbox_address"):
        email_task({"inbox_address": None}).to_workflow(model, judge("true"))


def test_rubric_reward_cases():
    right = EmailRubric(
        answer_correct=True, attempted_answer=True, sources_correct=True, num_sources=2, num_turns=5
    )
    assert rubric_reward(right, 10) == pytest.approx({"accuracy": 1.0, "format": 1.4})
    wrong = EmailRubric(attempted_answer=True, ever_found_right_email=True)
    assert rubric_reward(wrong, 10) == pytest.approx({"accuracy": -1.0, "format": 0.1})
    assert rubric_reward(EmailRubric(), 10) == {"accuracy": 0.0, "format": 0.0}
