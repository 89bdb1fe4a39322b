"""A deterministic, in-process :class:`ModelWrapper` for tests of every Trinity package.

:class:`FakeModelWrapper` needs no GPU, no network and no model files, yet behaves like a
served model where it matters for workflow, buffer and trainer tests:

* a tiny byte-level tokenizer (:class:`FakeTokenizer`) and chat template, exposed so tests
  can compute the exact tokens they expect;
* scripted responses (a callable, a list used in order, one string, or a default reply); a
  list is one script for the model and every clone of it
  (:meth:`~ModelWrapper.clone_with_isolated_history` shares the engine, and the script is the
  fake's engine): the n-th call, whichever clone makes it, gets the n-th reply, so runs of a
  task get the same replies sequentially and concurrently;
* logprobs that depend only on ``(context, token, temperature)`` through a cheap hash, so
  :meth:`~ModelWrapper.logprobs` reproduces the values reported at generation time;
* a record of every call (:attr:`FakeModelWrapper.calls`);
* real ``openai.OpenAI`` / ``openai.AsyncOpenAI`` clients whose HTTP goes to an in-process
  ``httpx.MockTransport`` serving ``/v1/models`` and ``/v1/chat/completions`` (with the
  vLLM ``return_token_ids`` extension), so history recording sees the exact sampled tokens.

Example::

    model = FakeModelWrapper(responses=["4", "5"], enable_history=True)
    exps = model.chat([{"role": "user", "content": "2+2?"}], n=2)
    assert [e.response_text for e in exps] == ["4", "5"]
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

import torch
from torch import Tensor

from trinity.common.experience import Experience
from trinity.common.models.fake_tokenizer import FakeTokenizer, format_tool_call, parse_tool_calls
from trinity.common.models.model import ModelWrapper, _validate_generation_kwargs
from trinity.common.models.utils import prompt_truncated_experiences

__all__ = [
    "FakeCall",
    "FakeModelWrapper",
    "FakeTokenizer",
    "ResponseSpec",
    "format_tool_call",
    "parse_tool_calls",
]

#: What a test passes as ``responses``: one reply for every sample, a list used in order
#: (cycled, across calls), or ``fn(messages_or_prompt, sample_index, **gen_kwargs) -> str``.
ResponseSpec = Union[None, str, Sequence[str], Callable[..., str]]


# --------------------------------------------------------------------------- call log
@dataclass
class FakeCall:
    """One request the fake received.

    ``kind`` is ``"chat"``, ``"generate"``, ``"logprobs"``,
    ``"convert_messages_to_experience"`` or ``"openai.chat.completions"``; ``kwargs`` are
    the caller's own keyword arguments (before defaults are merged; for OpenAI requests,
    the JSON body without ``messages`` and ``model``).
    """

    kind: str
    messages: Optional[List[Dict[str, Any]]] = None
    prompts: Optional[List[str]] = None
    tokens: Optional[List[int]] = None
    kwargs: Dict[str, Any] = field(default_factory=dict)


@dataclass
class _Sample:
    token_ids: List[int]
    logprobs: Tensor  # float32 [len(token_ids)]
    text: str
    finish_reason: str  # "stop" | "length"


# --------------------------------------------------------------------------- the script
class _Script:
    """The scripted responses and the position in a list of them: the fake's "engine".

    :meth:`ModelWrapper.clone_with_isolated_history` makes a shallow copy that shares the
    engine; a clone of the fake shares this object, so the model and all its clones answer
    from one script with one cursor (the n-th call made through any of them gets the n-th
    reply), as one served model answers every clone's requests.
    """

    __slots__ = ("responses", "cursor", "lock")

    def __init__(self, responses: ResponseSpec) -> None:
        self.responses: ResponseSpec = responses
        self.cursor = 0
        self.lock = threading.Lock()

    def take(self, items: Sequence[str], count: int) -> List[str]:
        """The next ``count`` replies of the list ``items`` (cycled), in one step: the samples
        of one call are consecutive replies even when other calls run at the same time."""
        with self.lock:
            start = self.cursor
            self.cursor += count
        return [items[(start + i) % len(items)] for i in range(count)]


# --------------------------------------------------------------------------- the double
class FakeModelWrapper(ModelWrapper):
    """Deterministic in-process model for tests (see the module docstring).

    Args:
        responses: ``None`` (default reply ``"Fake reply #<i> to: <last message>"``), a
            string, a list of strings used in order and cycled across calls, or a
            callable ``fn(messages_or_prompt, sample_index, **gen_kwargs) -> str`` (it gets
            only the keyword arguments its signature accepts). A list is shared with the
            model's clones (:meth:`clone_with_isolated_history`): the n-th call made through
            the model or any clone gets the n-th reply (a call with ``n`` samples takes ``n``
            consecutive replies at once). Concurrent runs of a task each get a clone, and the
            explorer starts them in run order, so a single-call run gets the reply its run
            would get sequentially; when runs call the model several times their calls
            interleave, and a callable that answers from the messages keeps the replies
            independent of the order.
        model_path: Served model name (``client.models.list().data[0].id``).
        enable_history: Record produced Experiences for ``extract_experience_from_history``.
        model_version: Initial version; settable (``model.model_version = 3``).
        **kwargs: Other :class:`ModelWrapper` options (``temperature``, ``max_tokens``,
            ``max_prompt_tokens``, ``max_model_len`` ...).

    Generation semantics: the reply text is scripted (``temperature``/``top_p``/``seed`` do
    not change it); response tokens are ``encode(reply) + [eos]``; ``stop`` strings cut the
    reply before the first match; ``max_tokens`` keeps the first ``max_tokens`` tokens and
    sets ``truncate_status="response_truncated"`` (OpenAI ``finish_reason="length"``).
    Logprobs are negative floats in ``[-5, -0.01] / temperature`` (temperature ``0`` counts
    as ``1``).
    """

    API_ADDRESS = "http://fake-model.trinity.invalid"

    def __init__(
        self,
        responses: ResponseSpec = None,
        *,
        model_path: str = "fake/trinity-model",
        enable_history: bool = False,
        model_version: int = 0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("api_address", self.API_ADDRESS)
        super().__init__(
            model_path=model_path,
            enable_history=enable_history,
            model_version=model_version,
            **kwargs,
        )
        self.tokenizer = FakeTokenizer()
        self._script = _Script(responses)
        self.calls: List[FakeCall] = []
        self._lock = threading.Lock()
        self._completion_counter = 0

    # ------------------------------------------------------------------ scripting
    @property
    def responses(self) -> ResponseSpec:
        """The scripted responses (shared with this model's clones)."""
        return self._script.responses

    @responses.setter
    def responses(self, responses: ResponseSpec) -> None:
        self._script.responses = responses

    def set_responses(self, responses: ResponseSpec) -> None:
        """Replace the scripted responses and restart list cycling (for the clones too)."""
        with self._script.lock:
            self._script.responses = responses
            self._script.cursor = 0

    def calls_of(self, kind: str) -> List[FakeCall]:
        """Recorded calls of one ``kind``."""
        return [c for c in self.calls if c.kind == kind]

    @staticmethod
    def default_reply(request: Union[str, List[Dict[str, Any]]], sample_index: int) -> str:
        """The reply used when no ``responses`` are scripted."""
        if isinstance(request, str):
            last = request
        else:
            last = FakeTokenizer.content_text(request[-1].get("content")) if request else ""
        return f"Fake reply #{sample_index} to: {last[-40:]}"

    def _replies(
        self,
        request: Union[str, List[Dict[str, Any]]],
        n: int,
        gen_kwargs: Dict[str, Any],
    ) -> List[str]:
        """The reply texts of the ``n`` samples of one call."""
        spec = self.responses
        if spec is None:
            return [self.default_reply(request, i) for i in range(n)]
        if isinstance(spec, str):
            return [spec] * n
        if callable(spec):
            kwargs = self._accepted_kwargs(spec, gen_kwargs)
            out = [spec(request, i, **kwargs) for i in range(n)]
            for item in out:
                if not isinstance(item, str):
                    raise TypeError(f"response callable must return str, got {type(item).__name__}")
            return out
        items = list(spec)
        if not items:
            raise ValueError("FakeModelWrapper responses list is empty")
        return self._script.take(items, n)

    @staticmethod
    def _accepted_kwargs(fn: Callable[..., Any], kwargs: Dict[str, Any]) -> Dict[str, Any]:
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            return dict(kwargs)
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return dict(kwargs)
        names = {
            p.name
            for p in params
            if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        }
        return {k: v for k, v in kwargs.items() if k in names}

    # ------------------------------------------------------------------ logprobs
    @staticmethod
    def _mix(state: int, token: int) -> int:
        """64-bit rolling hash step (splitmix-style); the state encodes the whole prefix."""
        mask = 0xFFFFFFFFFFFFFFFF
        x = (state ^ ((int(token) + 0x9E3779B97F4A7C15) & mask)) & mask
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        return x ^ (x >> 31)

    def token_logprobs(self, tokens: Sequence[int], temperature: float = 1.0) -> Tensor:
        """float32 ``[len(tokens) - 1]``: logprob of ``tokens[i + 1]`` given ``tokens[:i + 1]``.

        Depends only on the prefix and the token (and ``temperature``), so scoring a
        sampled sequence reproduces the logprobs reported when it was sampled.
        """
        scale = float(temperature) if temperature and temperature > 0 else 1.0
        state = 0x243F6A8885A308D3
        values: List[float] = []
        for i, tok in enumerate(tokens):
            state = self._mix(state, int(tok))
            if i == 0:
                continue
            u = (state >> 11) / float(1 << 53)
            values.append(-(0.01 + 4.99 * u) / scale)
        return torch.tensor(values, dtype=torch.float32)

    # ------------------------------------------------------------------ core sampling
    def _sample(
        self,
        request: Union[str, List[Dict[str, Any]]],
        prompt_ids: List[int],
        gen_kwargs: Dict[str, Any],
    ) -> List[_Sample]:
        n = int(gen_kwargs.get("n", 1))
        max_tokens = gen_kwargs.get("max_tokens")
        temperature = gen_kwargs.get("temperature", 1.0)
        stop = gen_kwargs.get("stop")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        samples = []
        for text in self._replies(request, n, gen_kwargs):
            cuts = [text.find(s) for s in stops if s and s in text]
            if cuts:
                text = text[: min(cuts)]
            ids = self.tokenizer.encode(text) + [self.tokenizer.eos_token_id]
            finish = "stop"
            if max_tokens is not None and len(ids) > max_tokens:
                ids = ids[:max_tokens]
                finish = "length"
            logprobs = self.token_logprobs(prompt_ids + ids, temperature)[len(prompt_ids) - 1 :]
            samples.append(
                _Sample(
                    token_ids=ids,
                    logprobs=logprobs,
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    finish_reason=finish,
                )
            )
        return samples

    def _prompt_truncated(self, prompt_ids: List[int], n: int) -> Optional[List[Experience]]:
        limit = self.max_prompt_tokens
        if limit is None or len(prompt_ids) <= limit:
            return None
        text = self.tokenizer.decode(prompt_ids[:limit])
        return prompt_truncated_experiences(prompt_ids, limit, n, text, self.model_version)

    def _experiences(
        self,
        request: Union[str, List[Dict[str, Any]]],
        prompt_ids: List[int],
        gen_kwargs: Dict[str, Any],
    ) -> List[Experience]:
        if not prompt_ids:
            raise ValueError("the prompt must contain at least one token")
        truncated = self._prompt_truncated(prompt_ids, int(gen_kwargs.get("n", 1)))
        if truncated is not None:
            return truncated
        prompt_text = self.tokenizer.decode(prompt_ids)
        return [
            Experience(
                tokens=prompt_ids + s.token_ids,
                prompt_length=len(prompt_ids),
                logprobs=s.logprobs,
                prompt_text=prompt_text,
                response_text=s.text,
                truncate_status="response_truncated" if s.finish_reason == "length" else None,
                model_version=self.model_version,
            )
            for s in self._sample(request, prompt_ids, gen_kwargs)
        ]

    # ------------------------------------------------------------------ ModelWrapper hooks
    def _record_call(self, kind: str, payload: Any, kwargs: Dict[str, Any]) -> None:
        call = FakeCall(kind=kind, kwargs=dict(kwargs))
        if kind == "generate":
            call.prompts = list(payload)
        elif kind == "logprobs":
            call.tokens = list(payload)
        else:
            call.messages = [dict(m) for m in payload]
        with self._lock:
            self.calls.append(call)

    def _apply_chat_template(
        self,
        messages: List[Dict[str, Any]],
        add_generation_prompt: bool,
        tools: Optional[List[Dict[str, Any]]] = None,
    ) -> List[int]:
        return self.tokenizer.apply_chat_template(  # type: ignore[return-value]
            messages, add_generation_prompt=add_generation_prompt, tools=tools
        )

    async def _chat(self, messages: List[Dict[str, Any]], **kwargs: Any) -> List[Experience]:
        prompt_ids = self._apply_chat_template(messages, True, tools=kwargs.get("tools"))
        return self._experiences(messages, prompt_ids, kwargs)

    async def _generate(self, prompt: str, **kwargs: Any) -> List[Experience]:
        return self._experiences(prompt, self.tokenizer.encode(prompt), kwargs)

    async def _logprobs(self, tokens: List[int], temperature: float) -> Tensor:
        return self.token_logprobs(tokens, temperature)

    # ------------------------------------------------------------------ OpenAI endpoint
    def http_transport(self) -> Any:
        """An ``httpx.MockTransport`` serving this model's OpenAI-compatible API."""
        import httpx

        return httpx.MockTransport(self._handle_http)

    def _create_openai_client(self, async_client: bool) -> Any:
        import httpx
        import openai

        base_url = f"{self.api_address}/v1"
        if async_client:
            return openai.AsyncOpenAI(
                base_url=base_url,
                api_key=self.api_key,
                max_retries=0,
                http_client=httpx.AsyncClient(transport=self.http_transport(), base_url=base_url),
            )
        return openai.OpenAI(
            base_url=base_url,
            api_key=self.api_key,
            max_retries=0,
            http_client=httpx.Client(transport=self.http_transport(), base_url=base_url),
        )

    @staticmethod
    def _error(status: int, message: str, err_type: str = "BadRequestError") -> Any:
        import httpx

        return httpx.Response(
            status,
            json={"error": {"message": message, "type": err_type, "code": status}},
        )

    def _handle_http(self, request: Any) -> Any:
        import httpx

        path = request.url.path.rstrip("/")
        if request.method == "GET" and path.endswith("/models"):
            return httpx.Response(
                200,
                json={
                    "object": "list",
                    "data": [
                        {
                            "id": self.model_path,
                            "object": "model",
                            "created": 0,
                            "owned_by": "trinity",
                            "root": self.model_path,
                        }
                    ],
                },
            )
        if request.method == "POST" and path.endswith("/chat/completions"):
            try:
                body = json.loads(request.content or b"{}")
            except json.JSONDecodeError as exc:
                return self._error(400, f"invalid JSON body: {exc}")
            try:
                return httpx.Response(200, json=self._chat_completion(body))
            except _HTTPError as exc:
                return self._error(exc.status, str(exc), exc.err_type)
            except (TypeError, ValueError) as exc:
                return self._error(400, str(exc))
        return self._error(
            404, f"{request.method} {path} is not served by FakeModelWrapper", "NotFoundError"
        )

    def _chat_completion(self, body: Dict[str, Any]) -> Dict[str, Any]:
        model = body.get("model")
        if model != self.model_path:
            raise _HTTPError(404, f"The model `{model}` does not exist.", "NotFoundError")
        if body.get("stream"):
            raise _HTTPError(400, "FakeModelWrapper does not support stream=True")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _HTTPError(400, "messages must be a non-empty list")
        request_kwargs = {k: v for k, v in body.items() if k not in ("messages", "model")}
        self._record_call("openai.chat.completions", messages, request_kwargs)

        gen = {k: v for k, v in self.default_generation_kwargs.items()}
        for key in ("n", "temperature", "top_p", "top_k", "seed", "stop"):
            if body.get(key) is not None:
                gen[key] = body[key]
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None:
            gen["max_tokens"] = max_tokens
        _validate_generation_kwargs(gen)
        tools = body.get("tools") or None
        use_tools = tools is not None and body.get("tool_choice") != "none"

        prompt_ids = self._apply_chat_template(messages, True, tools=tools)
        if self.max_prompt_tokens is not None and len(prompt_ids) > self.max_prompt_tokens:
            raise _HTTPError(
                400,
                f"This model's maximum prompt length is {self.max_prompt_tokens} tokens; "
                f"the messages have {len(prompt_ids)}.",
            )
        samples = self._sample(messages, prompt_ids, gen)
        with self._lock:
            self._completion_counter += 1
            completion_id = f"chatcmpl-fake-{self._completion_counter}"

        want_logprobs = bool(body.get("logprobs"))
        top_k = int(body.get("top_logprobs") or 0)
        return_ids = bool(body.get("return_token_ids"))
        choices = []
        for idx, s in enumerate(samples):
            content: Optional[str] = s.text
            finish = s.finish_reason
            message: Dict[str, Any] = {"role": "assistant"}
            if use_tools and finish == "stop":
                content, calls = parse_tool_calls(s.text)
                if calls:
                    message["tool_calls"] = [
                        {
                            "id": f"call_{completion_id}_{idx}_{j}",
                            "type": "function",
                            "function": {
                                "name": c["name"],
                                "arguments": c["arguments"]
                                if isinstance(c["arguments"], str)
                                else json.dumps(c["arguments"], ensure_ascii=False),
                            },
                        }
                        for j, c in enumerate(calls)
                    ]
                    finish = "tool_calls"
            message["content"] = content
            choice: Dict[str, Any] = {
                "index": idx,
                "message": message,
                "finish_reason": finish,
                "logprobs": None,
            }
            if want_logprobs:
                entries = []
                for tok, lp in zip(s.token_ids, s.logprobs.tolist(), strict=True):
                    text = self.tokenizer.token_text(tok)
                    entry = {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}
                    entry["top_logprobs"] = [dict(entry)] if top_k > 0 else []
                    entries.append(entry)
                choice["logprobs"] = {"content": entries}
            if return_ids:
                choice["token_ids"] = list(s.token_ids)
            choices.append(choice)
        completion_tokens = sum(len(s.token_ids) for s in samples)
        out: Dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion",
            "created": 0,
            "model": self.model_path,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": completion_tokens,
                "total_tokens": len(prompt_ids) + completion_tokens,
            },
        }
        if return_ids:
            out["prompt_token_ids"] = list(prompt_ids)
        return out


class _HTTPError(Exception):
    def __init__(self, status: int, message: str, err_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.err_type = err_type
