"""A rollout engine without a model, for tests of the code above the engines.

:class:`FakeEngine` serves core's :class:`~trinity.common.models.testing.FakeModelWrapper`
(scripted replies, byte-level tokenizer, deterministic logprobs) through the engine interface,
so the runner pool, the explorer and user workflows can be tested in Ray actors in milliseconds.
The real engines (vLLM, transformers) are tested against real tiny models.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, Optional, Sequence

from torch import Tensor

from trinity.common.experience import Experience
from trinity.common.models.testing import FakeModelWrapper
from trinity.launcher.engines.base import (
    CALL_LOG_SIZE,
    BaseRolloutEngine,
    Draws,
    EngineSettings,
    Sample,
)
from trinity.launcher.engines.batched_draws import DrawRegistry

__all__ = ["FakeEngine"]


class FakeEngine(BaseRolloutEngine):
    """Engine type ``fake``: replies are scripted by ``extra_engine_args['responses']`` (a
    string or a list cycled through), else ``"Fake reply #i to: ..."``.

    Fault injection for the restart tests: with ``extra_engine_args['exit_after_calls']: k``
    the process exits (``os._exit``, as a crash would) on its ``k+1``-th chat/generate call;
    with ``exit_once_file`` too, only while that file does not exist (it is created first), so
    exactly one engine instance of a run dies.

    A hanging engine call: a chat whose last message contains ``<engine-sleep:S>`` waits ``S``
    seconds in the engine before it replies, and :meth:`sleep_log` records ``started`` and
    then ``cancelled`` or ``done`` for each such call, so a test can see whether the callers
    that gave up on it (a task past ``explorer.max_timeout``) also stopped the engine's work.
    """

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        args = dict(settings.extra_engine_args or {})
        self.fake = FakeModelWrapper(
            args.get("responses"),
            model_path=settings.model_path,
            max_prompt_tokens=settings.max_prompt_tokens,
            temperature=settings.temperature,
        )
        self.tokenizer = self.fake.tokenizer
        self.model_version = 0
        self.api_address: Optional[str] = None
        self.asleep: Optional[int] = None
        self.call_log: deque[tuple[str, int]] = deque(maxlen=CALL_LOG_SIZE)

        self._calls = 0
        self._sleep_log: list[str] = []
        self._draw_batches: list[int] = []
        self._draws_in_flight = DrawRegistry()

    def _maybe_die(self) -> None:
        args = self.settings.extra_engine_args or {}
        limit = args.get("exit_after_calls")
        if limit is None:
            return
        self._calls += 1
        if self._calls <= int(limit):
            return
        once = args.get("exit_once_file")
        if once:
            if os.path.exists(once):
                return
            open(once, "w").close()
        print(f"FakeEngine {self.settings.engine_id}: exiting after {limit} calls", flush=True)
        sys.stderr.write("FakeEngine: simulated crash\n")
        sys.stderr.flush()
        os._exit(1)

    async def _maybe_sleep(self, messages: list[dict[str, Any]]) -> None:
        text = str(messages[-1].get("content", "")) if messages else ""
        match = re.search(r"<engine-sleep:([0-9.]+)>", text)
        if match is None:
            return
        self._sleep_log.append("started")
        try:
            await asyncio.sleep(float(match.group(1)))
        except asyncio.CancelledError:
            self._sleep_log.append("cancelled")
            raise
        self._sleep_log.append("done")

    async def serves_draws(self) -> bool:
        """With ``extra_engine_args['serve_draws']``, as the real engines: wrappers over its
        actor ask for draws (:meth:`draw_chat`, batched: :meth:`draw_chat_many`;
        :meth:`draw_generate`)."""
        settings = getattr(self, "settings", None)  # None: not set up (asked of the class)
        return bool(settings is not None and (settings.extra_engine_args or {}).get("serve_draws"))

    async def draw_chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> Draws:
        """:meth:`chat`'s replies as the samples of a real engine's draw."""
        return self._as_draws(await self.chat(messages, **kwargs))

    async def draw_generate(self, prompt: str, **kwargs: Any) -> Draws:
        """:meth:`generate`'s replies as the samples of a real engine's draw."""
        return self._as_draws(await self.generate(prompt, **kwargs))

    def _as_draws(self, exps: list[Experience]) -> Draws:
        first = exps[0]
        prompt_ids = [int(t) for t in first.tokens[: first.prompt_length]]
        samples = [
            Sample(
                [int(t) for t in e.tokens[e.prompt_length :]],
                [float(x) for x in e.logprobs],
                "stop",
                e.response_text,
            )
            for e in exps
        ]
        return Draws(prompt_ids, first.prompt_text or "", samples, self.model_version, len(exps))

    async def draw_chat_many(
        self, calls: Sequence[tuple[str, Any, dict[str, Any]]]
    ) -> AsyncIterator[list[tuple[int, Any]]]:
        self._draw_batches.append(len(calls))
        async for finished in super().draw_chat_many(calls):
            yield finished

    async def draw_batch_sizes(self) -> list[int]:
        """The size of each :meth:`draw_chat_many` call so far."""
        return list(self._draw_batches)

    async def sleep_log(self) -> list[str]:
        """What the ``<engine-sleep:S>`` calls did: ``started``, then ``cancelled``/``done``."""
        return list(self._sleep_log)

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> list[Experience]:
        self._maybe_die()
        self._check_awake("generate")
        await self._maybe_sleep(messages)
        self.fake.model_version = self.model_version
        return await self.fake.chat_async(messages, **kwargs)

    async def generate(self, prompt: str, **kwargs: Any) -> list[Experience]:
        self._maybe_die()
        self._check_awake("generate")
        self.fake.model_version = self.model_version
        return await self.fake.generate_async([prompt], **kwargs)

    async def logprobs(self, tokens: Sequence[int], temperature: float = 1.0) -> Tensor:
        return await self.fake.logprobs_async(list(tokens), temperature=temperature)

    async def _load_weights(self, weights: dict[str, Tensor]) -> None:
        return None  # no weights; only the version changes
