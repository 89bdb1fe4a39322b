"""The ModelWrapper a workflow gets: core's contract over an engine, local or a Ray actor."""

from __future__ import annotations

import asyncio
import zlib
from typing import Any, Optional, Sequence

from torch import Tensor

from trinity.common.experience import Experience
from trinity.common.models import ModelWrapper
from trinity.launcher.engines.base import (
    EngineSettings,
    assemble_experiences,
    load_tokenizer,
    render_chat,
)
from trinity.launcher.engines.batched_draws import DrawBatcher

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

    Over an engine's Ray actor the wrapper asks for the samples as plain values
    (:meth:`~trinity.launcher.engines.base.BaseRolloutEngine.draw_chat`) and assembles the
    Experiences itself: the engine's event loop, which every sample of every runner waits on,
    builds and encodes no Experience objects, and the runners (separate processes) do that in
    parallel. An engine that replaces ``chat`` / ``generate`` is asked for its wire-format
    Experiences instead.
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
        #: the engine's actor serves ``draw_chat`` / ``draw_generate`` (asked by :meth:`create`)
        self._draws = False
        #: the model-version ask in flight, per engine; shared by this wrapper's clones
        #: (shallow copies), so the tasks a runner starts together ask once between them
        self._version_asks: dict[int, asyncio.Future] = {}
        #: the concurrent draw_chat calls of this runner's tasks as one engine call (an actor
        #: that serves draws); shared by this wrapper's clones, one per runner
        self._batcher: Optional[DrawBatcher] = None
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
        if _is_actor(engine):
            try:
                wrapper._draws = bool(await engine.serves_draws.remote())
                if wrapper._draws:
                    wrapper._batcher = DrawBatcher(engine, asyncio.get_running_loop())
            except AttributeError:  # an engine class of its own, without the method
                wrapper._draws = False
        return wrapper

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.settings)
        return self._tokenizer

    async def refresh_model_version(self) -> int:
        """Ask the engine which weights it serves now (after a synchronisation).

        Clones asking while an ask is in flight share its answer: a runner starts its tasks
        together, and one round trip through the engine's event loop (the one every sample
        waits on) answers them all. The answer is a floor either way: experiences carry the
        version their engine sampled them with (:meth:`_note_version`).
        """
        key = id(self.engine)
        ask = self._version_asks.get(key)
        if ask is None:
            ask = asyncio.ensure_future(call_engine(self.engine, "get_model_version"))
            self._version_asks[key] = ask
            ask.add_done_callback(lambda _done: self._version_asks.pop(key, None))
        self.model_version = await asyncio.shield(ask)
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
        """An in-process engine returns its Experiences as they are. An actor that serves
        draws returns its samples (``draw_chat``), assembled here; any other is asked for its
        Experiences as wire bytes (``chat_serialized``), which cost a fraction of pickling
        them."""
        if not _is_actor(self.engine):
            return await getattr(self.engine, method)(prompt, **kwargs)
        if not self._draws:
            payload = await getattr(self.engine, f"{method}_serialized").remote(prompt, **kwargs)
            return Experience.deserialize_many(payload)
        if method == "chat" and self._batcher is not None:
            draws = await self._batcher.draw_chat(prompt, kwargs)
        else:
            draws = await getattr(self.engine, f"draw_{method}").remote(prompt, **kwargs)
        return assemble_experiences(draws)

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
