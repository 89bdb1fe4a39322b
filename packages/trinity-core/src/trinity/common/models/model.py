"""The model contract that workflows program against.

:class:`ModelWrapper` is what a :class:`~trinity.common.workflows.Workflow` receives as
``self.model``. It hides which inference engine (vLLM, HF transformers, an external
OpenAI-compatible server, or the in-process test double in
:mod:`trinity.common.models.testing`) actually produces tokens, and returns
:class:`~trinity.common.experience.Experience` objects that already carry the token ids
and the per-token logprobs the trainer needs.

Engines subclass :class:`ModelWrapper` and implement three small async hooks
(``_chat``, ``_generate``, ``_logprobs``) plus, optionally, ``_apply_chat_template`` (which
unlocks :meth:`ModelWrapper.convert_messages_to_experience`) and ``_create_openai_client``.
Everything else — sync twins, kwargs validation, history recording, the OpenAI client
wrapper that records token ids and logprobs — lives here once.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, TypeVar, Union

import torch
from torch import Tensor

from trinity.common.experience import Experience
from trinity.common.models.utils import tokenize_and_mask_messages
from trinity.utils.aio import run_sync
from trinity.utils.log import get_logger

if TYPE_CHECKING:  # pragma: no cover - import only for type checkers
    import openai

__all__ = [
    "GENERATION_KWARGS",
    "ModelWrapper",
    "experiences_from_chat_completion",
    "run_sync",
]

logger = get_logger(__name__)

T = TypeVar("T")

#: Sampling keyword arguments every engine understands (the fields of ``GenerationConfig``
#: and the common vLLM ``SamplingParams`` / OpenAI request fields). Unknown keywords are
#: passed through to the engine and logged once, because Trinity-RFT silently ignores
#: sampling parameters an engine does not know (it only copies attributes the engine's
#: ``SamplingParams`` has), and workflows routinely forward a whole ``rollout_args``.
GENERATION_KWARGS = frozenset(
    {
        "n",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "max_tokens",
        "min_tokens",
        "logprobs",
        "seed",
        "stop",
        "stop_token_ids",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "ignore_eos",
        "include_stop_str_in_output",
        "skip_special_tokens",
        "tools",
    }
)

_warned_unknown_kwargs: set[str] = set()


# --------------------------------------------------------------------------- helpers
def _as_token_list(tokens: Union[Sequence[int], Tensor]) -> List[int]:
    if isinstance(tokens, Tensor):
        if tokens.dim() != 1:
            raise ValueError(f"tokens must be 1-D, got shape {tuple(tokens.shape)}")
        return [int(t) for t in tokens.tolist()]
    if isinstance(tokens, (str, bytes)):
        raise TypeError("tokens must be a sequence of token ids, not text")
    return [int(t) for t in tokens]


def _check_messages(messages: Any) -> List[Dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, (list, tuple)):
        raise TypeError(
            "messages must be a list of {'role': ..., 'content': ...} dicts, got "
            f"{type(messages).__name__}; use generate([prompt]) for raw text prompts"
        )
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise TypeError(f"messages[{i}] must be a dict with a 'role' key, got {m!r}")
    return list(messages)


def _validate_generation_kwargs(kwargs: Dict[str, Any]) -> None:
    n = kwargs.get("n", 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    temperature = kwargs.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or temperature < 0
    ):
        raise ValueError(f"temperature must be a non-negative number, got {temperature!r}")
    top_p = kwargs.get("top_p")
    if top_p is not None and (not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    max_tokens = kwargs.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise ValueError(f"max_tokens must be a positive int or None, got {max_tokens!r}")


def experiences_from_chat_completion(response: Any, model_version: int = 0) -> List[Experience]:
    """Turn an OpenAI ``ChatCompletion`` with vLLM token ids into one Experience per choice.

    Requires the ``return_token_ids`` extension (``response.prompt_token_ids`` and
    ``choice.token_ids``) so the recorded tokens are exactly what the engine saw and
    produced — re-tokenizing the text would drift from the sampled tokens and their logprobs.

    Shapes: ``tokens`` ``[prompt_len + resp_len]`` (int32), ``logprobs`` ``[resp_len]``.
    """
    prompt_ids = getattr(response, "prompt_token_ids", None)
    exps: List[Experience] = []
    for choice in response.choices:
        token_ids = getattr(choice, "token_ids", None)
        if prompt_ids is None or token_ids is None:
            raise RuntimeError(
                "The OpenAI-compatible server did not return token ids "
                "(`prompt_token_ids` / `choices[i].token_ids`); history recording needs an "
                "engine that supports `return_token_ids`."
            )
        content = getattr(choice.logprobs, "content", None) if choice.logprobs else None
        logprobs = [float(c.logprob) for c in content] if content else []
        if len(logprobs) != len(token_ids):
            raise RuntimeError(
                f"Choice {choice.index}: {len(token_ids)} response tokens but "
                f"{len(logprobs)} logprobs; refusing to record a misaligned experience."
            )
        exps.append(
            Experience(
                tokens=torch.tensor(list(prompt_ids) + list(token_ids), dtype=torch.int32),
                prompt_length=len(prompt_ids),
                logprobs=torch.tensor(logprobs, dtype=torch.float32),
                response_text=choice.message.content or "",
                truncate_status="response_truncated" if choice.finish_reason == "length" else None,
                model_version=model_version,
            )
        )
    return exps


# --------------------------------------------------------------------------- the contract
_OPERATIONS = {
    "chat": ("_chat", "chat_async", "chat"),
    "generate": ("_generate", "generate_async", "generate"),
    "logprobs": ("_logprobs", "logprobs_async", "logprobs"),
}


def _overrides(cls: type, name: str) -> bool:
    return getattr(cls, name, None) is not getattr(ModelWrapper, name, None)


class ModelWrapper:
    """The rollout model as workflows see it.

    Public API (every call has an ``*_async`` twin; the sync one works with or without a
    running event loop):

    * :meth:`chat` / :meth:`generate` — sample ``n`` responses; each is an
      :class:`Experience` with ``tokens`` (prompt + response ids), ``prompt_length``,
      ``logprobs`` over the response tokens and ``response_text``.
    * :meth:`logprobs` — score a token sequence (``[len(tokens) - 1]`` logprobs).
    * :meth:`convert_messages_to_experience` — a finished multi-turn conversation as one
      Experience whose ``action_mask`` is 1 exactly on assistant tokens.
    * :meth:`get_openai_client` / :meth:`get_openai_async_client` — real ``openai`` clients;
      with ``enable_history`` their chat completions are recorded as Experiences.
    * :attr:`model_version`, :attr:`model_path`, :attr:`model_name`, history helpers.

    Engines implement the three async hooks below; a simple subclass (a test double written
    from the guide) may instead override just the public ``chat`` / ``chat_async`` (and
    likewise ``generate``, ``logprobs``): every level falls back to the others. A subclass that
    implements none of them cannot be instantiated. The hooks:

    * ``async _chat(messages, **kwargs) -> Sequence[Experience]`` — ``n`` samples for one
      conversation (apply the chat template with a generation prompt, then sample);
    * ``async _generate(prompt: str, **kwargs) -> Sequence[Experience]`` — ``n`` samples
      for one raw text prompt;
    * ``async _logprobs(tokens: list[int], temperature: float) -> Tensor`` — shape
      ``[len(tokens) - 1]``, the logprob of ``tokens[i + 1]`` given ``tokens[: i + 1]``;
    * optionally ``_apply_chat_template(messages, add_generation_prompt, tools=None) ->
      list[int]``, which enables the default :meth:`convert_messages_to_experience_async`;
    * optionally ``_create_openai_client(async_client: bool)`` when the engine has no
      ``api_address`` (the default builds ``openai.OpenAI(base_url=api_address + "/v1")``).

    The hooks receive already validated keyword arguments merged over the wrapper's
    defaults (``None`` values mean "use the default" and are dropped before merging).
    """

    # Class-level defaults, so a small subclass that skips ``super().__init__()`` (a test double
    # written from the guide, implementing only ``chat``) still has a working wrapper.
    _model_path: str = "unknown-model"
    _model_name: str = "unknown-model"
    enable_history: bool = False
    api_address: Optional[str] = None
    _api_key: str = "EMPTY"
    max_prompt_tokens: Optional[int] = None
    max_model_len: Optional[int] = None
    _model_version: int = 0
    _openai_client: Optional[openai.OpenAI] = None
    _openai_async_client: Optional[openai.AsyncOpenAI] = None
    default_generation_kwargs: Dict[str, Any] = {"n": 1}
    logger: logging.Logger = logger

    def __new__(cls, *args: Any, **kwargs: Any) -> ModelWrapper:
        # Refuse a wrapper that can do nothing, like an ABC would, but accept an implementation
        # at any level (engine hook, async or sync public method) of any operation.
        if not any(_overrides(cls, name) for names in _OPERATIONS.values() for name in names):
            raise TypeError(
                f"Can't instantiate {cls.__name__}: implement at least one of "
                + ", ".join(n for names in _OPERATIONS.values() for n in names)
            )
        return super().__new__(cls)

    def __init__(
        self,
        *,
        model_path: str,
        model_name: Optional[str] = None,
        enable_history: bool = False,
        api_address: Optional[str] = None,
        api_key: str = "EMPTY",
        temperature: Optional[float] = 1.0,
        top_p: Optional[float] = 1.0,
        top_k: Optional[int] = None,
        max_tokens: Optional[int] = None,
        max_prompt_tokens: Optional[int] = None,
        max_model_len: Optional[int] = None,
        model_version: int = 0,
    ) -> None:
        """
        Args:
            model_path: Path or hub id of the served model; also the ``model`` name used on
                the OpenAI API (``client.models.list().data[0].id``).
            model_name: Display name; defaults to ``model_path``.
            enable_history: Record every Experience produced by chat/generate and the
                OpenAI clients, for :meth:`extract_experience_from_history`.
            api_address: ``http://host:port`` of the engine's OpenAI-compatible server.
            api_key: Key sent by the OpenAI clients.
            temperature / top_p / top_k / max_tokens: Default sampling parameters, used
                when a call does not pass them (``max_tokens`` = max response tokens).
            max_prompt_tokens: Prompts longer than this become ``"prompt_truncated"``
                experiences instead of being sent to the engine.
            max_model_len: Total length limit used by :meth:`convert_messages_to_experience`.
            model_version: Version of the weights currently served (bumped on weight sync).
        """
        if not model_path:
            raise ValueError("model_path must be provided")
        self._model_path = str(model_path)
        self._model_name = model_name or self._model_path
        self.enable_history = bool(enable_history)
        self.history: List[Experience] = []
        self._history_lock = threading.Lock()
        self.api_address = api_address
        self._api_key = api_key
        self.max_prompt_tokens = max_prompt_tokens
        self.max_model_len = max_model_len
        self._model_version = int(model_version)
        self.default_generation_kwargs: Dict[str, Any] = {
            k: v
            for k, v in {
                "n": 1,
                "temperature": temperature,
                "top_p": top_p,
                "top_k": top_k,
                "max_tokens": max_tokens,
            }.items()
            if v is not None
        }
        _validate_generation_kwargs(self.default_generation_kwargs)
        self.workflow_state: Dict[str, Any] = {}
        self._openai_client: Optional[openai.OpenAI] = None
        self._openai_async_client: Optional[openai.AsyncOpenAI] = None
        self.logger: logging.Logger = get_logger(__name__)

    # ------------------------------------------------------------------ engine hooks
    async def _chat(self, messages: List[Dict[str, Any]], **kwargs: Any) -> Sequence[Experience]:
        """Sample ``kwargs['n']`` responses to ``messages`` (engine hook)."""
        return await self._fallback_to_sync("chat", messages, **kwargs)

    async def _generate(self, prompt: str, **kwargs: Any) -> Sequence[Experience]:
        """Sample ``kwargs['n']`` responses to one raw text ``prompt`` (engine hook)."""
        return await self._fallback_to_sync("generate", [prompt], **kwargs)

    async def _logprobs(self, tokens: List[int], temperature: float) -> Tensor:
        """Return float32 logprobs of ``tokens[1:]``, shape ``[len(tokens) - 1]`` (engine hook)."""
        return await self._fallback_to_sync("logprobs", tokens, temperature=temperature)

    async def _fallback_to_sync(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        """Serve a hook from a sync public method that a simple subclass overrode instead."""
        if _overrides(type(self), operation):
            return await asyncio.to_thread(getattr(self, operation), *args, **kwargs)
        raise NotImplementedError(
            f"{type(self).__name__} does not implement {operation}: override the engine hook "
            f"_{operation} (or {operation}_async / {operation})"
        )

    def _apply_chat_template(
        self,
        messages: List[Dict[str, Any]],
        add_generation_prompt: bool,
        tools: Optional[List[Dict[str, Any]]] = None,
    ) -> List[int]:
        """Render messages to token ids with the model's chat template (optional hook)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement _apply_chat_template; "
            "convert_messages_to_experience needs it (or override "
            "convert_messages_to_experience_async)."
        )

    def _create_openai_client(self, async_client: bool) -> Union[openai.OpenAI, openai.AsyncOpenAI]:
        """Build the raw OpenAI client for this engine (optional hook)."""
        import openai

        if not self.api_address:
            raise ValueError(
                f"{type(self).__name__} has no api_address: the OpenAI API is not enabled "
                "for this model (set enable_openai_api in the rollout model config)."
            )
        cls = openai.AsyncOpenAI if async_client else openai.OpenAI
        return cls(base_url=f"{self.api_address.rstrip('/')}/v1", api_key=self._api_key)

    def _record_call(self, kind: str, payload: Any, kwargs: Dict[str, Any]) -> None:
        """Observe a public call with the caller's own kwargs (no-op; the test double logs)."""
        return None

    # ------------------------------------------------------------------ kwargs
    def _prepare_generation_kwargs(self, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Drop ``None`` values, warn once about unknown keys, merge over the defaults."""
        given = {k: v for k, v in kwargs.items() if v is not None}
        for key in given:
            if key not in GENERATION_KWARGS and key not in _warned_unknown_kwargs:
                _warned_unknown_kwargs.add(key)
                self.logger.warning(
                    "Generation keyword %r is not a known sampling parameter; it is passed "
                    "to the engine, which may ignore it.",
                    key,
                )
        merged = {**self.default_generation_kwargs, **given}
        _validate_generation_kwargs(merged)
        return merged

    # ------------------------------------------------------------------ chat / generate
    async def chat_async(self, messages: List[Dict[str, Any]], **kwargs: Any) -> List[Experience]:
        """Sample responses to a conversation.

        Args:
            messages: OpenAI-style chat messages.
            **kwargs: Sampling parameters (``n``, ``temperature``, ``top_p``, ``top_k``,
                ``max_tokens``, ``logprobs``, ``seed``, ``stop`` ...).

        Returns:
            ``n`` Experiences; ``tokens`` ``[prompt_len + resp_len]``, ``logprobs``
            ``[resp_len]``, ``prompt_length``, ``response_text``.
        """
        messages = _check_messages(messages)
        self._record_call("chat", messages, dict(kwargs))
        exps = list(await self._chat(messages, **self._prepare_generation_kwargs(kwargs)))
        self._record_history(exps)
        return exps

    def chat(self, messages: List[Dict[str, Any]], **kwargs: Any) -> List[Experience]:
        """Sync twin of :meth:`chat_async`."""
        return run_sync(self.chat_async(messages, **kwargs))

    async def generate_async(self, prompts: List[str], **kwargs: Any) -> List[Experience]:
        """Sample ``n`` responses for each raw text prompt.

        Returns:
            ``len(prompts) * n`` Experiences, prompt-major: all samples of ``prompts[0]``,
            then all samples of ``prompts[1]``, ...
        """
        if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)):
            raise TypeError("prompts must be a list of strings; wrap a single prompt as [prompt]")
        if not all(isinstance(p, str) for p in prompts):
            raise TypeError("every prompt must be a str")
        self._record_call("generate", list(prompts), dict(kwargs))
        merged = self._prepare_generation_kwargs(kwargs)
        results = await asyncio.gather(*(self._generate(p, **merged) for p in prompts))
        exps = [exp for group in results for exp in group]
        self._record_history(exps)
        return exps

    def generate(self, prompts: List[str], **kwargs: Any) -> List[Experience]:
        """Sync twin of :meth:`generate_async`."""
        return run_sync(self.generate_async(prompts, **kwargs))

    # ------------------------------------------------------------------ logprobs
    async def logprobs_async(
        self, tokens: Union[Sequence[int], Tensor], temperature: Optional[float] = None
    ) -> Tensor:
        """Logprob of every token given its prefix.

        Args:
            tokens: ``[seq_len]`` token ids (list or 1-D tensor).
            temperature: Logit temperature; ``None`` uses the wrapper default.

        Returns:
            float32 tensor of shape ``[seq_len - 1]``; entry ``i`` scores ``tokens[i + 1]``.
            For an Experience ``e``, ``result[e.prompt_length - 1:]`` aligns with
            ``e.logprobs``.
        """
        ids = _as_token_list(tokens)
        self._record_call("logprobs", ids, {"temperature": temperature})
        if temperature is None:
            temperature = self.default_generation_kwargs.get("temperature", 1.0)
        return await self._logprobs(ids, float(temperature))

    def logprobs(
        self, tokens: Union[Sequence[int], Tensor], temperature: Optional[float] = None
    ) -> Tensor:
        """Sync twin of :meth:`logprobs_async`."""
        return run_sync(self.logprobs_async(tokens, temperature=temperature))

    # ------------------------------------------------------------------ conversations
    async def convert_messages_to_experience_async(
        self,
        messages: List[Dict[str, Any]],
        tools: Optional[List[Dict[str, Any]]] = None,
        temperature: Optional[float] = None,
    ) -> Experience:
        """A whole (multi-turn) conversation as one trainable Experience.

        The prompt is everything before the first assistant token. ``action_mask`` (over the
        response part, ``[seq_len - prompt_length]``) is 1 on assistant tokens and 0 on
        user/tool/system/template tokens, so only what the model produced is trained on.
        ``logprobs`` (``[seq_len - prompt_length]``) are recomputed by the engine.
        """
        messages = _check_messages(messages)
        self._record_call("convert_messages_to_experience", messages, {"tools": tools})
        token_ids, mask, prompt_length = tokenize_and_mask_messages(
            self._apply_chat_template, messages, tools=tools
        )
        if self.max_prompt_tokens is not None and prompt_length > self.max_prompt_tokens:
            self.logger.warning(
                "Conversation prompt has %d tokens > max_prompt_tokens=%d; the experience is "
                "marked prompt_truncated and excluded from the loss.",
                prompt_length,
                self.max_prompt_tokens,
            )
            return Experience(
                tokens=token_ids[: self.max_prompt_tokens + 1],
                prompt_length=self.max_prompt_tokens,
                logprobs=torch.zeros(1, dtype=torch.float32),
                action_mask=torch.zeros(1, dtype=torch.bool),
                messages=messages,
                tools=tools,
                truncate_status="prompt_truncated",
                model_version=self.model_version,
            )
        truncate_status = None
        if self.max_model_len is not None and len(token_ids) > self.max_model_len - 1:
            truncate_status = "response_truncated"
            token_ids = token_ids[: self.max_model_len - 1]
            mask = mask[: self.max_model_len - 1]
        if temperature is None:
            temperature = self.default_generation_kwargs.get("temperature", 1.0)
        logprobs = await self._logprobs(token_ids.tolist(), float(temperature))
        return Experience(
            tokens=token_ids,
            prompt_length=prompt_length,
            logprobs=logprobs[prompt_length - 1 :],
            action_mask=mask[prompt_length:],
            messages=messages,
            tools=tools,
            truncate_status=truncate_status,
            model_version=self.model_version,
        )

    def convert_messages_to_experience(
        self,
        messages: List[Dict[str, Any]],
        tools: Optional[List[Dict[str, Any]]] = None,
        temperature: Optional[float] = None,
    ) -> Experience:
        """Sync twin of :meth:`convert_messages_to_experience_async`."""
        return run_sync(
            self.convert_messages_to_experience_async(
                messages, tools=tools, temperature=temperature
            )
        )

    async def get_message_token_len(self, messages: List[Dict[str, Any]]) -> int:
        """Number of prompt tokens ``messages`` take with the generation prompt appended."""
        return len(self._apply_chat_template(_check_messages(messages), True))

    # ------------------------------------------------------------------ OpenAI clients
    def get_openai_client(self) -> openai.OpenAI:
        """A real ``openai.OpenAI`` client for this model.

        ``client.model_path`` is set to the model name to pass as ``model=``. With
        :attr:`enable_history`, ``client.chat.completions.create`` also asks the engine for
        token ids and logprobs and records one Experience per choice.
        """
        if self._openai_client is None:
            client = self._create_openai_client(async_client=False)
            self._install_history_hook(client, is_async=False)
            self._openai_client = client  # type: ignore[assignment]
        self._openai_client.model_path = self.model_path  # type: ignore[union-attr]
        return self._openai_client  # type: ignore[return-value]

    def get_openai_async_client(self) -> openai.AsyncOpenAI:
        """Async twin of :meth:`get_openai_client` (an ``openai.AsyncOpenAI``)."""
        if self._openai_async_client is None:
            client = self._create_openai_client(async_client=True)
            self._install_history_hook(client, is_async=True)
            self._openai_async_client = client  # type: ignore[assignment]
        self._openai_async_client.model_path = self.model_path  # type: ignore[union-attr]
        return self._openai_async_client  # type: ignore[return-value]

    def _history_request_kwargs(self, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        kwargs = dict(kwargs)
        kwargs["logprobs"] = True  # recorded experiences need per-token logprobs
        extra_body = dict(kwargs.get("extra_body") or {})
        extra_body["return_token_ids"] = True
        kwargs["extra_body"] = extra_body
        return kwargs

    def _install_history_hook(self, client: Any, is_async: bool) -> None:
        completions = client.chat.completions
        original = completions.create
        wrapper = self

        def _after(response: Any, kwargs: Dict[str, Any]) -> Any:
            if kwargs.get("stream"):
                wrapper.logger.warning(
                    "Streaming chat completions are not recorded into the model history."
                )
                return response
            wrapper._record_history(
                experiences_from_chat_completion(response, model_version=wrapper.model_version)
            )
            return response

        if is_async:

            async def create(*args: Any, **kwargs: Any) -> Any:
                if not wrapper.enable_history:
                    return await original(*args, **kwargs)
                kwargs = wrapper._history_request_kwargs(kwargs)
                return _after(await original(*args, **kwargs), kwargs)

        else:

            def create(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
                if not wrapper.enable_history:
                    return original(*args, **kwargs)
                kwargs = wrapper._history_request_kwargs(kwargs)
                return _after(original(*args, **kwargs), kwargs)

        completions.create = create

    # ------------------------------------------------------------------ history
    def _record_history(self, exps: Union[Experience, Sequence[Experience]]) -> None:
        if not self.enable_history:
            return
        items = [exps] if isinstance(exps, Experience) else list(exps)
        with self._history_lock:
            self.history.extend(items)

    def extract_experience_from_history(self, clear_history: bool = True) -> List[Experience]:
        """Experiences recorded since the last extraction (requires ``enable_history``)."""
        if not self.enable_history:
            raise ValueError("History recording is not enabled (set enable_history=True).")
        with self._history_lock:
            exps = list(self.history)
            if clear_history:
                self.history.clear()
        return exps

    def clone_with_isolated_history(self) -> ModelWrapper:
        """A shallow copy sharing the engine but with its own history and OpenAI clients."""
        clone = copy.copy(self)
        clone.history = []
        clone._history_lock = threading.Lock()
        clone.workflow_state = {}
        clone._openai_client = None
        clone._openai_async_client = None
        return clone

    # ------------------------------------------------------------------ workflow state
    async def set_workflow_state(self, state: Dict[str, Any]) -> None:
        """Merge ``state`` into the per-workflow scratch state kept with the model."""
        self.workflow_state.update(state)

    async def get_workflow_state(self) -> Dict[str, Any]:
        """A copy of the workflow state."""
        return dict(self.workflow_state)

    async def clean_workflow_state(self) -> None:
        """Reset the workflow state and the history (between tasks)."""
        self.workflow_state = {}
        with self._history_lock:
            self.history.clear()

    # ------------------------------------------------------------------ properties
    @property
    def model_version(self) -> int:
        """Version of the weights currently served; experiences are stamped with it."""
        return self._model_version

    @model_version.setter
    def model_version(self, value: int) -> None:
        self._model_version = int(value)

    @property
    def model_version_async(self) -> Awaitable[int]:
        """Awaitable :attr:`model_version` (``await model.model_version_async``)."""

        async def _get() -> int:
            return self.model_version

        return _get()

    @property
    def model_path(self) -> str:
        """Model path / served model name (the ``model=`` of OpenAI requests)."""
        return self._model_path

    @property
    def model_name(self) -> str:
        """Display name of the model (defaults to :attr:`model_path`)."""
        return self._model_name

    @property
    def api_key(self) -> str:
        """API key used by the OpenAI clients."""
        return self._api_key

    @property
    def generate_kwargs(self) -> Dict[str, Any]:
        """Default sampling kwargs suitable for ``client.chat.completions.create``."""
        return {
            k: v
            for k, v in self.default_generation_kwargs.items()
            if k in ("temperature", "top_p", "max_tokens")
        }
