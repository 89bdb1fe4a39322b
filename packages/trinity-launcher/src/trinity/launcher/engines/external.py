"""``engine_type: external``: any OpenAI-compatible server, reached by URL.

Used for auxiliary models (judges, user simulators, tools) and for ``bench`` mode against a
served model (``model.external_model``: the URL and key are read from the environment variables
it names, so no secret is written into a config). The server is not started, stopped or
trained by Trinity.

Workflows mostly use such a model through its OpenAI client (``api_address`` is the server).
``chat`` / ``generate`` also work and return Experiences, when the server returns token ids
(vLLM's ``return_token_ids`` extension): the tokens are then exactly what the server saw and
sampled, never a re-tokenization of its text. A server without that extension (most hosted
APIs) answers those two calls with an error that says so; scoring tokens (``logprobs``) needs
the weights and is refused.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from trinity.common.experience import Experience
from trinity.common.models import experiences_from_chat_completion
from trinity.launcher.engines.base import BaseRolloutEngine, EngineSettings

__all__ = ["ExternalEngine", "api_root"]

#: Sampling keys forwarded as top-level OpenAI arguments; the rest go in ``extra_body``.
_OPENAI_ARGS = (
    "n",
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "tools",
    "tool_choice",
)


def api_root(url: str) -> str:
    """``http://host:port`` of a base URL given with or without the ``/v1`` suffix."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class ExternalEngine(BaseRolloutEngine):
    """An OpenAI-compatible server at ``settings.base_url``, model ``served_model_name``."""

    def __init__(self, settings: EngineSettings) -> None:
        if not settings.base_url:
            raise ValueError(
                f"{settings.display_name}: engine_type 'external' needs the server's URL: set "
                "model.external_model.base_url_env (default OPENAI_BASE_URL) to the name of an "
                "environment variable holding it, e.g. http://127.0.0.1:8000/v1"
            )
        super().__init__(settings)
        self.api_address: Optional[str] = api_root(settings.base_url)
        self._client: Any = None

    def _load_tokenizer(self, settings: EngineSettings) -> Any:
        """None: there are no local weights; the tokenizer is the server's (token ids come
        back with its answers)."""
        return None

    def _openai(self) -> Any:
        if self._client is None:
            import openai

            self._client = openai.AsyncOpenAI(
                base_url=f"{self.api_address}/v1", api_key=self.settings.api_key or "EMPTY"
            )
        return self._client

    def _request(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        s = self.settings
        merged: dict[str, Any] = {"temperature": s.temperature, "top_p": s.top_p}
        if s.max_response_tokens is not None:
            merged["max_tokens"] = s.max_response_tokens
        merged.update({k: v for k, v in kwargs.items() if v is not None})
        merged.pop("logprobs", None)
        request = {k: merged.pop(k) for k in _OPENAI_ARGS if k in merged}
        request["logprobs"] = True
        request["model"] = s.served_model_name or s.model_path
        request["extra_body"] = {**merged, "return_token_ids": True}
        return request

    async def shutdown(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> list[Experience]:
        response = await self._openai().chat.completions.create(
            messages=messages, **self._request(kwargs)
        )
        exps = experiences_from_chat_completion(response, model_version=self.model_version)
        for exp in exps:
            exp.messages = list(messages)
        return exps

    async def generate(self, prompt: str, **kwargs: Any) -> list[Experience]:
        request = self._request(kwargs)
        request.pop("tools", None)
        request.pop("tool_choice", None)
        request["logprobs"] = 1  # the completions API takes a count here
        response = await self._openai().completions.create(prompt=prompt, **request)
        prompt_ids = getattr(response.choices[0], "prompt_token_ids", None)
        exps = []
        for choice in response.choices:
            token_ids = getattr(choice, "token_ids", None)
            if prompt_ids is None or token_ids is None:
                raise RuntimeError(
                    f"the server at {self.api_address} returned no token ids; experiences "
                    "need a server with vLLM's return_token_ids extension"
                )
            logprobs = list(choice.logprobs.token_logprobs) if choice.logprobs else []
            if len(logprobs) != len(token_ids):
                raise RuntimeError(
                    f"the server returned {len(token_ids)} tokens but {len(logprobs)} logprobs"
                )
            exps.append(
                Experience(
                    tokens=list(prompt_ids) + list(token_ids),
                    prompt_length=len(prompt_ids),
                    logprobs=torch.tensor(logprobs, dtype=torch.float32),
                    prompt_text=prompt,
                    response_text=choice.text,
                    truncate_status="response_truncated"
                    if choice.finish_reason == "length"
                    else None,
                    model_version=self.model_version,
                )
            )
        return exps

    async def logprobs(self, tokens: Sequence[int], temperature: float = 1.0) -> Tensor:
        raise NotImplementedError(
            f"{self.settings.display_name}: an external OpenAI-compatible server cannot score "
            "given tokens; use a vllm or transformers engine where logprobs are needed"
        )

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> list[int]:
        raise NotImplementedError(
            f"{self.settings.display_name}: the chat template of an external server is not "
            "known locally"
        )
