"""Rubric-judged workflows: the judge sees the prompt, the response and the row's rubrics, its
JSON rating becomes the reward, and an unusable reply scores 0 and shows in
``judge_success``. The API variant talks to a real HTTP server."""

from __future__ import annotations

import http.server
import threading

import httpx
import pytest

from trinity.common.config import FormatConfig, GenerationConfig
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import Task, run_task
from trinity.workflows.rubric_judge import (
    RUBRIC_JUDGE_SYSTEM_PROMPT,
    format_rubrics,
    parse_rating,
)

RUBRICS = [
    {"description": "States the capital correctly.", "weight": 3},
    {"description": "Is one sentence long.", "weight": 1},
]
ROW = {"question": "Capital of France?", "rubric": RUBRICS}


def _task(workflow: str = "rubric_judge_workflow", **kwargs) -> Task:
    task = Task(
        workflow=workflow,
        raw_task=ROW,
        repeat_times=3,
        format_args=FormatConfig(prompt_key="question"),
        **kwargs,
    )
    task.rollout_args = GenerationConfig(max_tokens=32)
    return task


def _judge(messages, sample_index):
    # rates by the response it is shown: Paris 9, London 2, anything else: no JSON block
    user = messages[-1]["content"]
    if "Paris" in user:
        return 'Good.\n```json\n{"rating": 9}\n```'
    if "London" in user:
        return '```json {"rating": 2} ```'
    return "I would give it a seven."


def test_the_judges_rating_against_the_rubrics_is_the_reward():
    student = FakeModelWrapper(["It is Paris.", "London, surely.", "No idea."])
    judge = FakeModelWrapper(_judge, model_path="fake/judge")
    exps = run_task(_task(), student, auxiliary_models=[judge])
    assert [e.reward for e in exps] == [pytest.approx(0.9), pytest.approx(0.2), 0.0]
    assert all(e.metrics["judge_success"] == pytest.approx(2 / 3) for e in exps)
    assert [e.eid.run for e in exps] == [0, 1, 2]
    calls = judge.calls_of("openai.chat.completions")
    assert len(calls) == 3
    system, user = calls[0].messages
    assert system == {"role": "system", "content": RUBRIC_JUDGE_SYSTEM_PROMPT}
    assert "Capital of France?" in user["content"]
    assert "Rubric 0 (weight: 3): States the capital correctly." in user["content"]
    assert "Rubric 1 (weight: 1): Is one sentence long." in user["content"]
    assert all(c.kwargs.get("temperature") == 0.0 for c in calls)


@pytest.mark.parametrize(
    ("reply", "rating"),
    [
        ('```json\n{"rating": 10}\n```', 1.0),
        ('text ```{"rating": 1}``` more', 0.1),
        ('```json {"rating": 11} ```', None),
        ('```json {"rating": 0} ```', None),
        ('```json {"rating": "7"} ```', None),
        ('```json {"rating": true} ```', None),
        ('```json {"score": 7} ```', None),
        ('```json {"rating": 7 ```', None),
        ("rating: 7", None),
        (None, None),
    ],
)
def test_parse_rating(reply, rating):
    assert parse_rating(reply) == rating


def test_bad_rubrics_and_no_judge_are_refused_naming_them():
    with pytest.raises(ValueError, match="rubric 0 of the row is 'be brief'"):
        format_rubrics(["be brief"])
    with pytest.raises(ValueError, match="must be a list"):
        format_rubrics("be brief")
    assert "No rubrics" in format_rubrics([])
    with pytest.raises(ValueError, match="explorer.auxiliary_models"):
        run_task(_task(), FakeModelWrapper("Paris"))


@pytest.fixture
def judge_server():
    """A real OpenAI-compatible HTTP server on loopback, answering as :func:`_judge`."""
    judge = FakeModelWrapper(_judge, model_path="api-judge")
    transport = judge.http_transport()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = httpx.Request(
                self.command,
                f"http://judge{self.path}",
                headers=dict(self.headers),
                content=body,
            )
            response = transport.handle_request(request)
            data = response.read()
            self.send_response(response.status_code)
            self.send_header(
                "Content-Type", response.headers.get("content-type", "application/json")
            )
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _forward

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", judge
    finally:
        server.shutdown()
        server.server_close()


def test_the_api_variant_asks_the_judge_at_the_url_the_environment_names(judge_server, monkeypatch):
    url, judge = judge_server
    monkeypatch.setenv("MY_JUDGE_URL", url)
    monkeypatch.setenv("MY_JUDGE_KEY", "secret")
    task = _task(
        "rubric_judge_openai_workflow",
        workflow_args={
            "judge_model_name": "api-judge",
            "judge_api_base_url_env": "MY_JUDGE_URL",
            "judge_api_key_env": "MY_JUDGE_KEY",
        },
    )
    student = FakeModelWrapper(["It is Paris.", "London, surely.", "Paris."])
    exps = run_task(task, student)
    assert [e.reward for e in exps] == [pytest.approx(0.9), pytest.approx(0.2), pytest.approx(0.9)]
    assert len(judge.calls_of("openai.chat.completions")) == 3
    # what the configuration lacks is named
    monkeypatch.delenv("MY_JUDGE_URL")
    with pytest.raises(ValueError, match="MY_JUDGE_URL"):
        run_task(task, student)
    task.workflow_args = {}
    with pytest.raises(ValueError, match="judge_model_name is missing"):
        run_task(task, student)
