"""Mode ``serve``'s HTTP side: an OpenAI-compatible proxy in front of the rollout engines'
own OpenAI servers (vLLM's), recording each answer for training.

Endpoints (Trinity-RFT 0.6's): ``POST /v1/chat/completions`` (streaming or not; tool calls and
every other field pass through to vLLM), ``GET /v1/models``, ``GET /health``, ``GET /metrics``,
``POST /feedback`` (``{"msg_ids": [...], "reward": r, "task_id": ..., "run_id": 0}``: the
response ids are the completions' ``id``), ``POST /commit``.

Each completion carries ``model_version`` (also the ``X-Trinity-Model-Version`` header): the
weights that answered. Requests are forced to return token ids and log-probs (the recording
needs them) at the configured temperature (the behaviour policy the trainer assumes).

Guards: an optional API key (``Authorization: Bearer <key>``; else 401), a body size bound
(413), a bound on requests in flight (429 past it, never a queue that grows), 4xx with a
message for a malformed request, 502/504 when an engine fails or times out -- never a 500
from a bad request, never a hang past ``timeout``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from types import SimpleNamespace
from typing import Any, AsyncIterator, Optional

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from trinity.launcher.serve.service import ServeService

logger = logging.getLogger(__name__)

VERSION_HEADER = "X-Trinity-Model-Version"


def _error(status: int, message: str, kind: str) -> Any:
    return JSONResponse(
        status_code=status, content={"error": {"message": message, "type": kind, "code": status}}
    )


def _namespace(value: Any) -> Any:
    """JSON -> attribute access (what ``experiences_from_chat_completion`` reads)."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _namespace(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_namespace(v) for v in value]
    return value


def record_completion(
    service: ServeService, body: dict[str, Any], messages: list[Any], version: int
) -> None:
    """Record a (non-streamed or aggregated) completion ``body`` as experiences."""
    from trinity.common.models.model import experiences_from_chat_completion

    exps = experiences_from_chat_completion(_namespace(body), model_version=version)
    for exp, choice in zip(exps, body.get("choices", []), strict=False):
        exp.eid.suffix = str(body.get("id", exp.eid.suffix))
        exp.messages = [*messages, choice.get("message") or {}]
    service.record(str(body.get("id")), exps)


class _StreamAggregate:
    """Builds the completion a stream of ``chat.completion.chunk`` events adds up to."""

    def __init__(self) -> None:
        self.body: dict[str, Any] = {"choices": []}
        self._choices: dict[int, dict[str, Any]] = {}

    def add(self, chunk: dict[str, Any]) -> None:
        for key in ("id", "model", "created"):
            if key in chunk and key not in self.body:
                self.body[key] = chunk[key]
        if chunk.get("prompt_token_ids") is not None:
            self.body["prompt_token_ids"] = chunk["prompt_token_ids"]
        for part in chunk.get("choices") or []:
            index = int(part.get("index", 0))
            choice = self._choices.setdefault(
                index,
                {
                    "index": index,
                    "message": {"role": "assistant", "content": ""},
                    "logprobs": {"content": []},
                    "token_ids": [],
                    "finish_reason": None,
                },
            )
            delta = part.get("delta") or {}
            if delta.get("content"):
                choice["message"]["content"] += delta["content"]
            if delta.get("tool_calls"):
                choice["message"].setdefault("tool_calls", []).extend(delta["tool_calls"])
            logprobs = (part.get("logprobs") or {}).get("content") or []
            choice["logprobs"]["content"].extend(logprobs)
            choice["token_ids"].extend(part.get("token_ids") or [])
            if part.get("finish_reason"):
                choice["finish_reason"] = part["finish_reason"]

    def completion(self) -> Optional[dict[str, Any]]:
        if "prompt_token_ids" not in self.body or not self._choices:
            return None
        self.body["choices"] = [self._choices[i] for i in sorted(self._choices)]
        return self.body


class _Proxy:
    """The endpoints' state and handlers: the engines' HTTP client, the requests in flight,
    the limits (see :func:`build_app`)."""

    def __init__(
        self,
        service: ServeService,
        *,
        temperature: float,
        api_key: Optional[str],
        max_request_bytes: int,
        max_concurrent_requests: int,
        timeout: float,
    ) -> None:
        self.service = service
        self.temperature = temperature
        self.api_key = api_key
        self.max_request_bytes = max_request_bytes
        self.max_concurrent_requests = max_concurrent_requests
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0))
        self.in_flight = 0
        self.models_cache: Optional[Any] = None

    # ------------------------------------------------------------------ guards
    async def guard(self, request: Request, call_next: Any) -> Any:
        """API key (all but /health) and the declared body size, before any handler."""
        if self.api_key and request.url.path != "/health":
            if request.headers.get("authorization", "") != f"Bearer {self.api_key}":
                return _error(401, "missing or wrong API key (Authorization: Bearer <key>)", "auth")
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_request_bytes):
            return _error(
                413,
                f"request body over {self.max_request_bytes} bytes (content-length {length})",
                "request_too_large",
            )
        return await call_next(request)

    async def read_json(self, request: Request) -> Any:
        """The body as a JSON object, or the 4xx response saying why not."""
        raw = await request.body()
        if len(raw) > self.max_request_bytes:
            return _error(
                413, f"request body over {self.max_request_bytes} bytes", "request_too_large"
            )
        try:
            data = json.loads(raw)
        except ValueError as exc:
            return _error(400, f"the body is not JSON: {exc}", "invalid_request_error")
        if not isinstance(data, dict):
            return _error(400, "the body must be a JSON object", "invalid_request_error")
        return data

    # ------------------------------------------------------------------ completions
    async def chat_completions(self, request: Request) -> Any:
        data = await self.read_json(request)
        if not isinstance(data, dict):
            return data
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "'messages' must be a non-empty list", "invalid_request_error")
        if self.in_flight >= self.max_concurrent_requests:
            return _error(
                429, f"{self.max_concurrent_requests} requests in flight; try again", "rate_limit"
            )
        # the recording needs token ids and log-probs; the trainer assumes this temperature
        data.update(return_token_ids=True, logprobs=True, temperature=self.temperature)
        self.in_flight += 1
        self.service.requests += 1
        streaming = False
        try:
            try:
                address, version = await self.service.allocate()
            except Exception as exc:
                self.service.failed_requests += 1
                return _error(503, f"no rollout engine available: {exc}", "unavailable")
            upstream = await self._send(address, data)
            if not isinstance(upstream, httpx.Response):
                return upstream  # the engine failed or timed out: 502 / 504
            if upstream.status_code >= 400:  # the engine refused the request: its 4xx
                body = await upstream.aread()
                await upstream.aclose()
                self.service.failed_requests += 1
                return Response(
                    body, status_code=upstream.status_code, media_type="application/json"
                )
            if data.get("stream"):
                streaming = True  # the stream's end releases the slot
                return StreamingResponse(
                    self._relay(upstream, messages, version),
                    media_type="text/event-stream",
                    headers={VERSION_HEADER: str(version)},
                )
            raw = await upstream.aread()
            await upstream.aclose()
            try:
                body = json.loads(raw)
            except ValueError:
                self.service.failed_requests += 1
                return _error(502, f"the engine at {address} answered no JSON", "upstream")
            try:
                record_completion(self.service, body, messages, version)
            except Exception as exc:  # answered, but nothing can be trained from it
                logger.warning("serve: a completion was not recorded: %s", exc)
            body["model_version"] = version
            return JSONResponse(body, headers={VERSION_HEADER: str(version)})
        finally:
            if not streaming:
                self.in_flight -= 1

    async def _send(self, address: str, data: dict[str, Any]) -> Any:
        """The engine's response (its body not read yet), or the 502 / 504 answer."""
        try:
            request = self.client.build_request("POST", f"{address}/v1/chat/completions", json=data)
            return await self.client.send(request, stream=True)
        except httpx.TimeoutException:
            self.service.failed_requests += 1
            return _error(504, f"the engine at {address} timed out", "upstream_timeout")
        except httpx.RequestError as exc:
            self.service.failed_requests += 1
            return _error(502, f"the engine at {address} failed: {exc}", "upstream")

    async def _relay(
        self, upstream: Any, messages: list[Any], version: int
    ) -> AsyncIterator[bytes]:
        """Pass the engine's events on (each chunk with ``model_version``) and record the
        completion they add up to, before the client reads the stream's end (``[DONE]``): a
        client that has its whole answer finds it recorded (its feedback, ``/metrics``)."""
        aggregate = _StreamAggregate()
        recorded = False

        def record() -> None:
            body = aggregate.completion()
            if body is not None:
                try:
                    record_completion(self.service, body, messages, version)
                except Exception as exc:
                    logger.warning("serve: a streamed completion was not recorded: %s", exc)

        try:
            async for line in upstream.aiter_lines():
                if line.startswith("data:"):
                    payload = line[5:].strip()
                    if payload == "[DONE]" and not recorded:
                        record()
                        recorded = True
                    elif payload and payload != "[DONE]":
                        try:
                            chunk = json.loads(payload)
                        except ValueError:
                            chunk = None
                        if isinstance(chunk, dict):
                            aggregate.add(chunk)
                            chunk["model_version"] = version
                            line = "data: " + json.dumps(chunk)
                yield (line + "\n").encode()
            if not recorded:  # a stream that ended without [DONE]
                record()
        finally:
            await upstream.aclose()
            self.in_flight -= 1

    # ------------------------------------------------------------------ the rest
    async def models(self) -> Any:
        if self.models_cache is None:
            try:
                address, _ = await self.service.allocate()
                upstream = await self.client.get(f"{address}/v1/models")
            except Exception as exc:
                return _error(502, f"the engine failed: {exc}", "upstream")
            if upstream.status_code >= 400:
                return Response(upstream.content, status_code=upstream.status_code)
            self.models_cache = upstream.json()
        return JSONResponse(self.models_cache)

    async def health(self) -> Any:
        return Response(status_code=200)

    async def metrics(self) -> Any:
        return JSONResponse({**self.service.metrics(), "serve/in_flight": self.in_flight})

    async def feedback(self, request: Request) -> Any:
        data = await self.read_json(request)
        if not isinstance(data, dict):
            return data
        msg_ids, reward = data.get("msg_ids"), data.get("reward")
        if msg_ids is None or reward is None:
            return JSONResponse(
                status_code=400, content={"error": "msg_ids and reward are required"}
            )
        if (
            not isinstance(msg_ids, list)
            or not all(isinstance(m, str) for m in msg_ids)
            or isinstance(reward, bool)
            or not isinstance(reward, (int, float))
        ):
            return JSONResponse(
                status_code=400,
                content={"error": "msg_ids must be a list of strings and reward a number"},
            )
        run_id = data.get("run_id", 0)
        if isinstance(run_id, bool) or not isinstance(run_id, int):
            return JSONResponse(status_code=400, content={"error": "run_id must be an integer"})
        task_id = data.get("task_id")
        task = None if task_id is None else str(task_id)
        return JSONResponse(await self.service.feedback(msg_ids, float(reward), task, run_id))

    async def commit(self) -> Any:
        began = time.perf_counter()
        try:
            result = await self.service.commit()
        except Exception as exc:
            logger.exception("serve: commit failed")
            return _error(503, f"the commit failed (kept for the next one): {exc}", "commit")
        result["seconds"] = time.perf_counter() - began
        return JSONResponse(result)


def build_app(
    service: ServeService,
    *,
    temperature: float,
    api_key: Optional[str] = None,
    max_request_bytes: int = 1 << 20,
    max_concurrent_requests: int = 128,
    timeout: float = 600.0,
) -> Any:
    """The FastAPI application of ``service`` (see the module docstring)."""
    proxy = _Proxy(
        service,
        temperature=temperature,
        api_key=api_key,
        max_request_bytes=max_request_bytes,
        max_concurrent_requests=max_concurrent_requests,
        timeout=timeout,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await proxy.client.aclose()

    app = FastAPI(title="Trinity serve", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.middleware("http")(proxy.guard)
    app.add_api_route("/v1/chat/completions", proxy.chat_completions, methods=["POST"])
    app.add_api_route("/v1/models", proxy.models, methods=["GET"])
    app.add_api_route("/health", proxy.health, methods=["GET"])
    app.add_api_route("/metrics", proxy.metrics, methods=["GET"])
    app.add_api_route("/feedback", proxy.feedback, methods=["POST"])
    app.add_api_route("/commit", proxy.commit, methods=["POST"])
    return app
