"""Mode serve's proxy in front of an engine's OpenAI server, without Ray: the guards (API key,
body size, malformed requests, requests in flight), what an engine that hangs, fails or is gone
gives the client, and what is recorded, rewarded and committed.

The engine here is a small HTTP server speaking vLLM's OpenAI dialect (token ids and
log-probs) that can be told to hang or fail -- the faults a real engine shows. The real
engine, the openai client and a trainer are test_serve_e2e.py's.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from types import SimpleNamespace

import pytest

fastapi = pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse, StreamingResponse  # noqa: E402
from ports import free_port  # noqa: E402

from trinity.launcher.serve.app import VERSION_HEADER, _StreamAggregate, build_app  # noqa: E402
from trinity.launcher.serve.recorder import SessionRecorder  # noqa: E402
from trinity.launcher.serve.service import ServeService, latest_trained_step  # noqa: E402


def _completion(n: int) -> dict:
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "model": "m",
        "prompt_token_ids": [1, 2, 3],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "7"},
                "logprobs": {"content": [{"token": "7", "logprob": -0.5}]},
                "token_ids": [9],
                "finish_reason": "stop",
            }
        ],
    }


class _Engine:
    """An OpenAI-dialect server on a free port; ``mode``: ok | hang | fail."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.count = 0
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            self.count += 1
            n = self.count
            if self.mode == "hang":
                await asyncio.sleep(4)  # past the proxy's 1 s timeout
            if self.mode == "fail":
                return JSONResponse({"error": {"message": "bad params"}}, status_code=400)
            assert body["return_token_ids"] is True and body["logprobs"] is True
            if body.get("tools"):  # tool calls: what vLLM's parser returns, passed through
                done = _completion(n)
                done["choices"][0]["message"] = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {
                                "name": body["tools"][0]["function"]["name"],
                                "arguments": "{}",
                            },
                        }
                    ],
                }
                done["choices"][0]["finish_reason"] = "tool_calls"
                return JSONResponse(done)
            if body.get("stream"):

                async def events():
                    full = _completion(n)
                    first = {
                        "id": full["id"],
                        "prompt_token_ids": [1, 2, 3],
                        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
                    }
                    yield f"data: {json.dumps(first)}\n\n"
                    for tok, piece in ((9, "7"), (10, "!")):
                        chunk = {
                            "id": full["id"],
                            "choices": [
                                {
                                    "index": 0,
                                    "delta": {"content": piece},
                                    "token_ids": [tok],
                                    "logprobs": {"content": [{"token": piece, "logprob": -0.25}]},
                                }
                            ],
                        }
                        yield f"data: {json.dumps(chunk)}\n\n"
                    last = {
                        "id": full["id"],
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    }
                    yield f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n"

                return StreamingResponse(events(), media_type="text/event-stream")
            return JSONResponse(_completion(n))

        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class _Handle:
    """What the service calls on a rollout engine actor (``.remote()`` methods)."""

    def __init__(self, address: str) -> None:
        async def get_api_address():
            return address

        self.get_api_address = SimpleNamespace(remote=get_api_address)


@pytest.fixture(scope="module")
def engine():
    server = _Engine()
    yield server
    server.stop()


def _service(address: str, committed: list, **kwargs):
    async def commit(exps):
        committed.extend(exps)
        return {"pipeline/experience_count": float(len(exps))}

    return ServeService([_Handle(address)], commit, job_dir="/nonexistent", **kwargs)


def _client(app):
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve")


CHAT = {"model": "m", "messages": [{"role": "user", "content": "3+4="}]}


def test_a_completion_is_recorded_rewarded_and_committed(engine):
    engine.mode = "ok"
    committed: list = []
    service = _service(engine.address, committed)
    app = build_app(service, temperature=1.0)

    async def go():
        async with _client(app) as client:
            r = await client.post("/v1/chat/completions", json=CHAT)
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["model_version"] == 0 and r.headers[VERSION_HEADER] == "0"
            stream = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
            assert stream.status_code == 200
            lines = [x for x in stream.text.splitlines() if x.startswith("data: {")]
            stream_id = json.loads(lines[0][6:])["id"]
            assert all(json.loads(x[6:])["model_version"] == 0 for x in lines)
            m = (await client.get("/metrics")).json()
            assert m["serve/waiting_experiences"] == 2 and m["serve/requests"] == 2
            fb = await client.post(
                "/feedback",
                json={"msg_ids": [body["id"], stream_id, "nope"], "reward": 1, "task_id": "t"},
            )
            assert fb.json()["rewarded"] == [body["id"], stream_id]
            assert fb.json()["unknown"] == ["nope"]
            done = await client.post("/commit")
            assert done.json()["committed"] == 2
            again = await client.post("/commit")
            assert again.json()["committed"] == 0

    asyncio.run(go())
    plain, streamed = committed
    assert plain.tokens.tolist() == [1, 2, 3, 9] and plain.prompt_length == 3
    assert plain.logprobs.tolist() == [-0.5] and plain.reward == 1.0
    assert plain.eid.task == "t" and plain.messages[-1]["content"] == "7"
    # the stream's pieces add up: both tokens, both log-probs, the whole text
    assert streamed.tokens.tolist() == [1, 2, 3, 9, 10]
    assert streamed.logprobs.tolist() == [-0.25, -0.25]
    assert streamed.response_text == "7!"


def test_the_api_key_body_size_and_malformed_requests_get_4xx(engine):
    engine.mode = "ok"
    app = build_app(
        _service(engine.address, []), temperature=1.0, api_key="k", max_request_bytes=2048
    )
    key = {"Authorization": "Bearer k"}

    async def go():
        async with _client(app) as client:
            assert (await client.get("/health")).status_code == 200  # no key needed
            assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 401
            wrong = {"Authorization": "Bearer x"}
            assert (await client.get("/metrics", headers=wrong)).status_code == 401
            big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
            r = await client.post("/v1/chat/completions", json=big, headers=key)
            assert r.status_code == 413 and "2048 bytes" in r.json()["error"]["message"]
            r = await client.post("/v1/chat/completions", content=b"{not json", headers=key)
            assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
            r = await client.post("/v1/chat/completions", json=[1], headers=key)
            assert r.status_code == 400
            r = await client.post("/v1/chat/completions", json={"model": "m"}, headers=key)
            assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
            for bad in (
                {"reward": 1},
                {"msg_ids": "a", "reward": 1},
                {"msg_ids": ["a"], "reward": "high"},
                {"msg_ids": ["a"], "reward": True},
                {"msg_ids": ["a"], "reward": 1, "run_id": "x"},
            ):
                r = await client.post("/feedback", json=bad, headers=key)
                assert r.status_code == 400, bad
            r = await client.post("/v1/chat/completions", json=CHAT, headers=key)
            assert r.status_code == 200

    asyncio.run(go())


def test_an_engine_that_hangs_fails_or_is_gone_gives_504_4xx_502_and_a_bound_gives_429(engine):
    committed: list = []
    service = _service(engine.address, committed)
    app = build_app(service, temperature=1.0, max_concurrent_requests=1, timeout=1.0)

    async def go():
        async with _client(app) as client:
            engine.mode = "hang"
            hung = asyncio.create_task(client.post("/v1/chat/completions", json=CHAT))
            await asyncio.sleep(0.3)
            busy = await client.post("/v1/chat/completions", json=CHAT)
            assert busy.status_code == 429, busy.text
            began = time.monotonic()
            r = await hung
            assert r.status_code == 504 and time.monotonic() - began < 5
            engine.mode = "fail"
            r = await client.post("/v1/chat/completions", json=CHAT)
            assert r.status_code == 400 and r.json()["error"]["message"] == "bad params"
            # an engine that is gone (nothing listens on its port)
            service.engines[:] = [_Handle("http://127.0.0.1:1")]
            service.reset_addresses()
            r = await client.post("/v1/chat/completions", json=CHAT)
            assert r.status_code == 502 and "failed" in r.json()["error"]["message"]
            m = (await client.get("/metrics")).json()
            assert m["serve/failed_requests"] == 3 and m["serve/in_flight"] == 0

    asyncio.run(go())
    assert committed == [] and service.recorder.recorded == 0


def test_a_failed_commit_keeps_its_experiences_for_the_next_one(engine):
    engine.mode = "ok"
    calls = []

    async def commit(exps):
        calls.append(len(exps))
        if len(calls) == 1:
            raise OSError("database is locked")
        return {}

    service = ServeService([_Handle(engine.address)], commit, job_dir="/nonexistent")
    app = build_app(service, temperature=1.0)

    async def go():
        async with _client(app) as client:
            body = (await client.post("/v1/chat/completions", json=CHAT)).json()
            await client.post("/feedback", json={"msg_ids": [body["id"]], "reward": 0.5})
            r = await client.post("/commit")
            assert r.status_code == 503 and "kept for the next one" in r.json()["error"]["message"]
            r = await client.post("/commit")
            assert r.status_code == 200 and r.json()["committed"] == 1

    asyncio.run(go())
    assert calls == [1, 1]


def test_commit_every_commits_without_a_commit_call(engine):
    engine.mode = "ok"
    committed: list = []
    service = _service(engine.address, committed, commit_every=2)
    app = build_app(service, temperature=1.0)

    async def go():
        async with _client(app) as client:
            ids = [
                (await client.post("/v1/chat/completions", json=CHAT)).json()["id"]
                for _ in range(3)
            ]
            r = await client.post("/feedback", json={"msg_ids": ids[:1], "reward": 1})
            assert "committed" not in r.json()
            r = await client.post("/feedback", json={"msg_ids": ids[1:], "reward": 0})
            assert r.json()["committed"] == 3

    asyncio.run(go())
    assert [e.reward for e in committed] == [1.0, 0.0, 0.0]


def test_the_recorder_drops_the_oldest_unrewarded_past_its_bound():
    import torch

    from trinity.common.experience import Experience

    recorder = SessionRecorder(max_pending=2)
    for i in range(3):
        recorder.record(f"m{i}", [Experience(tokens=torch.tensor([1, 2]), prompt_length=1)])
    assert recorder.dropped == 1 and recorder.waiting == 2
    assert recorder.feedback(["m0", "m2"], 1.0, "t", 0).unknown == ["m0"]
    assert recorder.ready == 1


def test_a_stream_without_token_ids_is_not_recorded():
    aggregate = _StreamAggregate()
    aggregate.add({"id": "x", "choices": [{"index": 0, "delta": {"content": "7"}}]})
    assert aggregate.completion() is None


def test_latest_trained_step_needs_the_marker_and_the_weights(tmp_path):
    assert latest_trained_step(str(tmp_path)) is None
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    assert latest_trained_step(str(tmp_path)) is None  # no HF weights at step 3
    weights = tmp_path / "global_step_3" / "actor" / "huggingface"
    weights.mkdir(parents=True)
    (weights / "config.json").write_text("{}")
    assert latest_trained_step(str(tmp_path)) == 3


def test_tools_reach_the_engine_and_its_tool_calls_reach_the_client(engine):
    engine.mode = "ok"
    service = _service(engine.address, [])
    app = build_app(service, temperature=1.0)
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]

    async def go():
        async with _client(app) as client:
            r = await client.post("/v1/chat/completions", json={**CHAT, "tools": tools})
            return r.json()

    body = asyncio.run(go())
    call = body["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "add" and body["choices"][0]["finish_reason"] == "tool_calls"
    assert service.recorder.waiting == 1  # recorded like any answer (its token ids)


def test_an_idle_client_connection_outlives_the_clients_pool_expiry(engine):
    """The service keeps an idle connection open longer than httpx (the openai client's pool)
    keeps it, so a client never sends a request on a connection the server is closing: after
    6 s idle (uvicorn's default closes at 5 s, httpx's pool expires at 5 s) a second request
    on the same socket is answered."""
    from trinity.launcher.serve.run import server_config

    app = build_app(_service(engine.address, []), temperature=1.0)
    port = free_port()
    config = server_config(app, "127.0.0.1", port)
    assert config.timeout_keep_alive > httpx.Limits().keepalive_expiry
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.05)
        request = b"GET /health HTTP/1.1\r\nHost: serve\r\n\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(request)
            assert conn.recv(4096).startswith(b"HTTP/1.1 200")
            time.sleep(6)
            conn.sendall(request)
            assert conn.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        server.should_exit = True
        thread.join(timeout=30)
