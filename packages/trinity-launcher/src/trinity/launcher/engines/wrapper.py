"""The ModelWrapper a workflow gets: core's contract over an engine, local or a Ray actor."""

from __future__ import annotations

import zlib
from typing import Any, Optional, Sequence

from torch import Tensor

from trinity.common.experience import Experience
from trinity.common.models import ModelWrapper
from trinity.launcher.engines.base import EngineSettings, load_tokenizer, render_chat

__all__ = ["EngineModelWrapper", "call_engine"]


def _is_actor(engine: Any) -> bool:
    try:
        from ray.actor import ActorHandle
    except ImportError:  # pragma: no cover - ray is a dependency
        return False
    return isinstance(engine, ActorHandle)


async def call_engine(engine: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """Await ``engine.method(*args, **kwargs)`` on an in-process engine or a Ray actor."""
    if _is_actor(engine):
        return await getattr(engine, method).remote(*args, **kwargs)
    return await getattr(engine, method)(*args, **kwargs)


class EngineModelWrapper(ModelWrapper):
    """:class:`~trinity.common.models.ModelWrapper` backed by a rollout engine.

    The engine does the sampling and scoring; the chat template is applied here too (with the
    same tokenizer) so :meth:`convert_messages_to_experience` needs no round trip. The wrapper
    holds no weights, so one is cheap to build per runner.
    """

    def __init__(self, engine: Any, settings: EngineSettings, api_address: Optional[str] = None):
        super().__init__(
            model_path=settings.served_model_name or settings.model_path,
            model_name=settings.display_name,
            enable_history=settings.enable_history,
            api_address=api_address,
            api_key=settings.api_key,
            temperature=settings.temperature,
            top_p=settings.top_p,
            top_k=None if settings.top_k in (None, -1, 0) else settings.top_k,
            max_tokens=settings.max_response_tokens,
            max_prompt_tokens=settings.max_prompt_tokens,
            max_model_len=settings.max_model_len,
        )
        self.engine = engine
        self.settings = settings
        self._tokenizer: Any = None
        self._task_seed: Optional[int] = None
        self._task_calls = 0

    def seed_task(self, *key: Any) -> None:
        """Seed the sampling of the task about to run (the runner calls this per task).

        Call ``i`` of the task samples with seed ``crc32((engine seed, *key)) + i`` unless
        the caller passes its own ``seed``. A per-request seed makes an engine's samples
        independent of how it batches concurrent requests (vLLM keeps a generator per seeded
        request), so a run with the same ``rollout_model.seed`` draws the same samples.
        """
        self._task_seed = zlib.crc32(repr((self.settings.seed, *key)).encode())
        self._task_calls = 0

    def _prepare_generation_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        merged = super()._prepare_generation_kwargs(kwargs)
        if self._task_seed is not None and merged.get("seed") is None:
            merged["seed"] = (self._task_seed + 7919 * self._task_calls) % 2**31
            self._task_calls += 1
        return merged

    @classmethod
    async def create(cls, engine: Any) -> EngineModelWrapper:
        """Build a wrapper from the engine's own settings and API address."""
        settings = await call_engine(engine, "get_settings")
        address = await call_engine(engine, "get_api_address")
        wrapper = cls(engine, settings, api_address=address)
        wrapper.model_version = await call_engine(engine, "get_model_version")
        return wrapper

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.settings)
        return self._tokenizer

    async def refresh_model_version(self) -> int:
        """Ask the engine which weights it serves now (after a synchronisation)."""
        self.model_version = await call_engine(self.engine, "get_model_version")
        return self.model_version

    # ------------------------------------------------------------------ engine hooks
    async def _chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> Sequence[Experience]:
        exps = await self._from_engine("chat", messages, kwargs)
        self._note_version(exps)
        return exps

    async def _generate(self, prompt: str, **kwargs: Any) -> Sequence[Experience]:
        exps = await self._from_engine("generate", prompt, kwargs)
        self._note_version(exps)
        return exps

    async def _from_engine(
        self, method: str, prompt: Any, kwargs: dict[str, Any]
    ) -> list[Experience]:
        """An actor is asked for its experiences as wire bytes (``chat_serialized``), which
        cost a fraction of pickling them; an in-process engine returns them as they are."""
        if _is_actor(self.engine):
            payload = await getattr(self.engine, f"{method}_serialized").remote(prompt, **kwargs)
            return Experience.deserialize_many(payload)
        return await getattr(self.engine, method)(prompt, **kwargs)

    async def _logprobs(self, tokens: list[int], temperature: float) -> Tensor:
        return await call_engine(self.engine, "logprobs", tokens, temperature)

    def _apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool,
        tools: Optional[list[dict[str, Any]]] = None,
    ) -> list[int]:
        return render_chat(
            self.tokenizer, messages, add_generation_prompt, tools, self.settings.enable_thinking
        )

    def _create_openai_client(self, async_client: bool) -> Any:
        if self.api_address is None and self.settings.base_url:
            import openai

            cls = openai.AsyncOpenAI if async_client else openai.OpenAI
            return cls(base_url=self.settings.base_url, api_key=self.settings.api_key)
        return super()._create_openai_client(async_client)

    def _note_version(self, exps: Sequence[Experience]) -> None:
        for e in exps:
            if e.model_version is not None and e.model_version > self.model_version:
                self.model_version = e.model_version
