"""What every rollout engine shares: tokenization, prompt limits and Experience assembly.

An engine owns one inference backend (vLLM's ``AsyncLLM``, a ``transformers`` model) and runs
either in-process or as a Ray actor (:func:`trinity.launcher.engines.create_engine_actor`). Its
public coroutines are the engine side of core's :class:`~trinity.common.models.ModelWrapper`
hooks; :class:`~trinity.launcher.engines.wrapper.EngineModelWrapper` forwards a workflow's
calls to them. Subclasses implement two token-level primitives, so prompt truncation, chat
templates, ``n`` samples and the shape of the returned Experiences are written once:

* ``_sample(prompt_ids, params) -> list[Sample]`` -- ``params["n"]`` continuations;
* ``_score(token_ids, temperature) -> Tensor`` -- logprob of every token given its prefix.

An engine that reads images (``supports_images``) takes ``multi_modal_inputs`` (the image
processor's ``pixel_values`` and ``image_grid_thw``, see
:mod:`trinity.launcher.engines.mm_inputs`) as a keyword of ``_sample``; a chat whose messages
hold image parts is rendered with the model's image processor and its Experiences carry those
inputs for the trainer.

Logprob convention (all engines, and the trainer): the logprob of a token is taken from
``log_softmax(logits / temperature)``, the distribution it was sampled from before top-k/top-p
truncation. ``temperature == 0`` (greedy) scores with temperature 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from trinity.common.experience import Experience
from trinity.common.models.mm_utils import has_multi_modal_content
from trinity.common.models.utils import prompt_truncated_experiences
from trinity.launcher.engines.batched_draws import DrawRegistry, draw_together
from trinity.utils.log import get_logger

__all__ = [
    "CALL_LOG_SIZE",
    "BaseRolloutEngine",
    "Draws",
    "EngineAsleepError",
    "EngineSettings",
    "Sample",
    "assemble_experiences",
    "load_tokenizer",
    "render_chat",
]

logger = get_logger(__name__)

#: entries an engine keeps of its lifecycle calls (generate / sleep / update_weights / wake_up)
CALL_LOG_SIZE = 10_000


class EngineAsleepError(RuntimeError):
    """A generation or scoring call reached an engine that is asleep (mode colocate): it
    would run on released memory or on weights about to be replaced, so it is refused."""


@dataclass
class Sample:
    """One sampled continuation: ``token_ids`` ``[resp_len]``, ``logprobs`` ``[resp_len]``."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: Optional[str]  # "stop" | "length" | None
    #: the response text when it is not simply the decoded tokens (a stop string is cut from
    #: the text but its tokens stay, as vLLM does, so the trained tokens are what was sampled)
    text: Optional[str] = None


@dataclass
class Draws:
    """What an engine drew for one prompt (:meth:`BaseRolloutEngine.draw`): everything its
    Experiences hold, as plain values (cheap for Ray to pickle), every sample with its text."""

    prompt_ids: list[int]
    #: the prompt decoded (cut to ``truncated_at`` tokens where it was cut)
    prompt_text: str
    samples: list[Sample]
    #: the weights that drew the last tokens
    model_version: int
    #: ``n`` asked for (the size of a prompt-truncated answer)
    n: int = 1
    #: the prompt was longer than this many tokens, so nothing was sampled (and
    #: ``enable_prompt_truncation`` allowed that answer)
    truncated_at: Optional[int] = None
    #: the weights served when the request started (``None``: ``model_version``); differs
    #: from ``model_version`` when new weights arrived while it ran (in-flight update)
    first_model_version: Optional[int] = None
    #: seconds the request spent frozen while new weights were loaded under it
    paused_s: float = 0.0
    #: an image prompt's ``pixel_values`` and ``image_grid_thw`` (None for text)
    multi_modal_inputs: Optional[dict[str, Tensor]] = None


def assemble_experiences(draws: Draws) -> list[Experience]:
    """The Experiences of ``draws`` (what :meth:`BaseRolloutEngine.chat` returns)."""
    prompt_ids = draws.prompt_ids
    if draws.truncated_at is not None:
        return prompt_truncated_experiences(
            prompt_ids, draws.truncated_at, draws.n, draws.prompt_text, draws.model_version
        )
    first = draws.model_version if draws.first_model_version is None else draws.first_model_version
    # a request that spanned a weight update: its oldest tokens' version is the experience's
    # (what staleness counts), the newest one is kept beside it
    info: dict[str, Any] = (
        {"model_version_last": draws.model_version} if first != draws.model_version else {}
    )
    if draws.paused_s > 0:
        info["paused_s"] = draws.paused_s
    return [
        Experience(
            tokens=prompt_ids + list(s.token_ids),
            prompt_length=len(prompt_ids),
            logprobs=torch.tensor(s.logprobs, dtype=torch.float32),
            prompt_text=draws.prompt_text,
            response_text=s.text,
            truncate_status="response_truncated" if s.finish_reason == "length" else None,
            model_version=first,
            info=dict(info),
            multi_modal_inputs=draws.multi_modal_inputs,
        )
        for s in draws.samples
    ]


@dataclass
class EngineSettings:
    """The resolved settings of one engine (built from ``explorer.rollout_model`` / an
    ``auxiliary_models`` entry by :func:`trinity.launcher.engines.engine_settings`)."""

    model_path: str
    engine_type: str = "vllm"
    name: Optional[str] = None
    engine_id: int = 0
    trust_remote_code: bool = False
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    enforce_eager: bool = False
    dtype: str = "bfloat16"
    seed: int = 42
    max_model_len: Optional[int] = None
    max_prompt_tokens: Optional[int] = None
    max_response_tokens: Optional[int] = None
    min_response_tokens: int = 0
    enable_prompt_truncation: bool = True
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    ignore_eos: bool = False
    chat_template: Optional[str] = None
    enable_thinking: Optional[bool] = None
    enable_openai_api: bool = False
    enable_history: bool = False
    api_key: str = "EMPTY"
    base_port: Optional[int] = None
    enable_auto_tool_choice: bool = False
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    enable_log_requests: bool = False
    extra_engine_args: Optional[dict[str, Any]] = None
    #: external engines: the server URL (``.../v1`` accepted) and the served model name
    base_url: Optional[str] = None
    served_model_name: Optional[str] = None
    #: mode colocate: start vLLM with its sleep mode (CUDA only), so :meth:`sleep` frees memory
    enable_sleep_mode: bool = False
    #: fraction of each of its GPUs the engine's Ray actor reserves (mode colocate: the
    #: trainer takes the rest, so one GPU holds both; see ``trinity.launcher.colocate``)
    gpu_share: float = 1.0
    #: LoRA (``model.lora_configs`` with ``rollout_model.enable_lora``): the run's adapter
    #: settings (:func:`trinity.launcher.lora_adapter.lora_settings` plus ``model_path`` and
    #: ``trust_remote_code``); the engine serves base + adapter and takes adapter-only weight
    #: updates. ``None``: full weights only
    lora: Optional[dict[str, Any]] = None

    @property
    def display_name(self) -> str:
        return self.name or self.served_model_name or self.model_path


def load_tokenizer(settings: EngineSettings) -> Any:
    """The model's tokenizer, with ``settings.chat_template`` (a template string or a path to a
    ``.jinja`` file) replacing the model's own when given."""
    if settings.engine_type == "fake":  # the test double's byte-level tokenizer
        from trinity.common.models.testing import FakeTokenizer

        return FakeTokenizer()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        settings.model_path, trust_remote_code=settings.trust_remote_code
    )
    template = settings.chat_template
    if template:
        if os.path.isfile(template):
            with open(template, encoding="utf-8") as f:
                template = f.read()
        tokenizer.chat_template = template
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def render_chat(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool = True,
    tools: Optional[list[dict[str, Any]]] = None,
    enable_thinking: Optional[bool] = None,
) -> list[int]:
    """Token ids of ``messages`` rendered with ``tokenizer``'s chat template (``tools`` listed
    where the template supports them)."""
    kwargs: dict[str, Any] = {}
    if enable_thinking is not None:
        kwargs["enable_thinking"] = enable_thinking
    ids = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True, **kwargs
    )
    if hasattr(ids, "keys") and "input_ids" in ids:  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(t) for t in ids]


class BaseRolloutEngine:
    """Shared engine logic; see the module docstring for the contract of subclasses."""

    #: seconds running requests have spent frozen under weight loads (in-flight updates)
    #: since the engine started; a request's share is how much it grew while the request ran
    paused_s: float = 0.0
    #: whether ``_sample`` takes ``multi_modal_inputs`` (image prompts)
    supports_images: bool = False

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.tokenizer = self._load_tokenizer(settings)
        self.model_version = 0
        self.api_address: Optional[str] = None
        #: the sleep level while asleep (mode colocate), else ``None``
        self.asleep: Optional[int] = None
        #: ``(call, model version)`` of each generate / score / sleep / update_weights /
        #: wake_up, in order: what mode colocate checks and reports (:meth:`take_call_log`)
        self.call_log: deque[tuple[str, int]] = deque(maxlen=CALL_LOG_SIZE)
        self._image_processor: Any = None
        #: the :meth:`draw_chat_many` calls still running (:meth:`cancel_draws` finds them)
        self._draws_in_flight = DrawRegistry()

    def _load_tokenizer(self, settings: EngineSettings) -> Any:
        """The tokenizer of the weights this engine serves (an engine without local weights
        returns ``None``)."""
        return load_tokenizer(settings)

    # ------------------------------------------------------------------ primitives
    async def _sample(self, prompt_ids: list[int], params: dict[str, Any]) -> list[Sample]:
        raise NotImplementedError

    async def _score(self, token_ids: list[int], temperature: float) -> Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Load the model (separate from ``__init__`` so a Ray actor starts fast)."""

    async def ready(self) -> bool:
        return True

    async def shutdown(self) -> None:
        """Release the backend (processes, memory, the API server)."""

    async def get_model_version(self) -> int:
        return self.model_version

    async def check_health(self) -> None:
        """Raise when the backend is dead (vLLM's ``EngineDeadError`` once its engine core
        process is gone); the explorer's supervisor then replaces this engine."""
        llm = getattr(self, "llm", None)
        check = getattr(llm, "check_health", None)
        if callable(check):
            await check()

    async def pids(self) -> dict[str, Any]:
        """``{"pid": this process, "children": [pids of its child processes]}`` (vLLM's
        engine core is a child): for logs and for fault tests that kill them; in a Ray actor
        also ``node_id`` and ``placement_group_id`` (hex, ``None`` outside a group): where
        it was placed."""
        import psutil

        me = psutil.Process()
        out: dict[str, Any] = {
            "pid": me.pid,
            "children": [p.pid for p in me.children(recursive=True)],
        }
        try:
            import ray

            if ray.is_initialized():
                context = ray.get_runtime_context()
                out["node_id"] = context.get_node_id()
                group = context.get_placement_group_id()
                out["placement_group_id"] = group or None
        except Exception:  # not in Ray: nothing more to say
            pass
        return out

    async def get_api_address(self) -> Optional[str]:
        return self.api_address

    async def get_settings(self) -> EngineSettings:
        return self.settings

    # ------------------------------------------------------------------ sleep (colocate)
    async def sleep(self, level: int = 1) -> None:
        """Release the device memory this engine holds until :meth:`wake_up` (mode colocate:
        the trainer trains on the same device meanwhile). Level 1 keeps the weights in host
        memory, level 2 drops them (new weights must be loaded before waking). Generation and
        scoring are refused while asleep (:class:`EngineAsleepError`); :meth:`update_weights`
        is allowed. What is freed depends on the backend (:meth:`_sleep`); the call is always
        recorded in :attr:`call_log`. Sleeping again is a no-op."""
        if level not in (1, 2):
            raise ValueError(f"sleep level {level!r} is invalid; allowed: 1 or 2")
        if self.asleep is None:
            await self._sleep(level)
            self.asleep = level
        self.call_log.append(("sleep", self.model_version))

    async def wake_up(self) -> None:
        """Take the memory back and serve again (no-op when awake; always recorded)."""
        if self.asleep is not None:
            await self._wake_up()
            self.asleep = None
        self.call_log.append(("wake_up", self.model_version))

    async def is_sleeping(self) -> bool:
        return self.asleep is not None

    async def take_call_log(self) -> list[tuple[str, int]]:
        """The calls recorded since the last call, oldest first (and forget them)."""
        out = list(self.call_log)
        self.call_log.clear()
        return out

    async def _sleep(self, level: int) -> None:
        """Backend part of :meth:`sleep`; the base frees nothing (engines without a device)."""

    async def _wake_up(self) -> None:
        """Backend part of :meth:`wake_up`."""

    def _check_awake(self, call: str) -> None:
        if self.asleep is not None:
            raise EngineAsleepError(
                f"{self.settings.display_name}: {call} while the engine is asleep (sleep level "
                f"{self.asleep}); mode colocate wakes it after the weight update"
            )
        self.call_log.append((call, self.model_version))

    # ------------------------------------------------------------------ templates
    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: Optional[list[dict[str, Any]]] = None,
    ) -> list[int]:
        """Token ids of ``messages`` rendered with the model's chat template."""
        return render_chat(
            self.tokenizer, messages, add_generation_prompt, tools, self.settings.enable_thinking
        )

    async def apply_chat_template_async(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: Optional[list[dict[str, Any]]] = None,
    ) -> list[int]:
        return self.apply_chat_template(messages, add_generation_prompt, tools)

    # ------------------------------------------------------------------ public API
    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> list[Experience]:
        """``kwargs['n']`` responses to a conversation (``tools`` go to the chat template)."""
        return assemble_experiences(await self.draw_chat(messages, **kwargs))

    async def generate(self, prompt: str, **kwargs: Any) -> list[Experience]:
        """``kwargs['n']`` responses to one raw text prompt (no chat template)."""
        return assemble_experiences(await self.draw_generate(prompt, **kwargs))

    async def draw_chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> Draws:
        """:meth:`chat`'s samples, not yet Experiences (see :meth:`draw`)."""
        tools = kwargs.pop("tools", None)
        if has_multi_modal_content(messages):
            prompt = self._render_images(messages, tools)
            return await self.draw(prompt.prompt_ids, kwargs, prompt.multi_modal_inputs or None)
        return await self.draw(self.apply_chat_template(messages, True, tools), kwargs)

    def _render_images(self, messages: list[dict[str, Any]], tools: Optional[list[Any]]) -> Any:
        """``messages`` with image parts as a :class:`~trinity.launcher.engines.mm_inputs.
        VLPrompt` (ids plus the image processor's outputs)."""
        from trinity.launcher.engines.mm_inputs import load_image_processor, render_vl_prompt

        name = self.settings.display_name
        if not self.supports_images:
            raise ValueError(
                f"{name}: the messages hold images and engine_type "
                f"{self.settings.engine_type!r} does not read images yet; use engine_type "
                "'transformers' (docs/vlm.md)"
            )
        if self._image_processor is None:
            self._image_processor = load_image_processor(self.settings.model_path)
        if self._image_processor is None:
            raise ValueError(
                f"{name}: the messages hold images and the model reads text only (its "
                "directory has no preprocessor_config.json); use a vision-language model"
            )
        return render_vl_prompt(self.tokenizer, self._image_processor, messages, True, tools)

    async def draw_chat_many(
        self, calls: Sequence[tuple[str, Any, dict[str, Any]]]
    ) -> AsyncIterator[list[tuple[int, Any]]]:
        """:meth:`draw_chat` of several conversations, their requests submitted together (a
        runner's concurrent tasks: :mod:`~trinity.launcher.engines.batched_draws`).

        ``calls``: ``(key, messages, kwargs)``; yields ``[(index, Draws or the exception it
        raised), ...]`` as calls finish (over an actor: a Ray generator, each answer sent when
        it is ready). :meth:`cancel_draws` cancels calls by key."""
        async for finished in draw_together(
            self._draws_in_flight, calls, self.draw_chat, self._submitting_together
        ):
            yield finished

    async def cancel_draws(self, keys: Sequence[str]) -> None:
        """Cancel the :meth:`draw_chat_many` calls of ``keys`` (their tasks were cancelled)."""
        self._draws_in_flight.cancel(keys)

    def _submitting_together(self) -> Any:
        """A context while which the requests submitted reach the engine together; an engine
        that can take them in one step says so (vLLM)."""
        return contextlib.nullcontext()

    async def draw_generate(self, prompt: str, **kwargs: Any) -> Draws:
        """:meth:`generate`'s samples, not yet Experiences (see :meth:`draw`)."""
        prompt_ids = [int(t) for t in self.tokenizer.encode(prompt, add_special_tokens=False)]
        return await self.draw(prompt_ids, kwargs)

    async def chat_serialized(self, messages: list[dict[str, Any]], **kwargs: Any) -> bytes:
        """:meth:`chat`'s experiences as :meth:`Experience.serialize_many` bytes.

        What a caller in another process asks for (:class:`~trinity.launcher.engines.
        EngineModelWrapper` over an actor): Ray would pickle the experiences tensor by tensor,
        ~6x the cost of this encoding for a quickstart call of 8 samples, on the engine's
        event loop that every runner waits on.
        """
        return Experience.serialize_many(await self.chat(messages, **kwargs))

    async def generate_serialized(self, prompt: str, **kwargs: Any) -> bytes:
        """:meth:`generate`'s experiences as bytes (see :meth:`chat_serialized`)."""
        return Experience.serialize_many(await self.generate(prompt, **kwargs))

    async def generate_batch(self, prompts: Sequence[str], **kwargs: Any) -> list[Experience]:
        """Prompt-major samples of several raw prompts, submitted concurrently."""
        groups = await asyncio.gather(*(self.generate(p, **dict(kwargs)) for p in prompts))
        return [e for g in groups for e in g]

    async def logprobs(self, tokens: Sequence[int], temperature: float = 1.0) -> Tensor:
        """float32 ``[len(tokens) - 1]``: entry ``i`` is the logprob of ``tokens[i + 1]``."""
        ids = [int(t) for t in tokens]
        if len(ids) < 2:
            raise ValueError(f"logprobs needs at least 2 tokens, got {len(ids)}")
        self._check_awake("score")
        out = await self._score(ids, float(temperature) if temperature else 1.0)
        return out.to(torch.float32)

    # ------------------------------------------------------------------ assembly
    def sampling_params(self, kwargs: dict[str, Any], prompt_len: int) -> dict[str, Any]:
        """Merge a call's sampling kwargs over the engine defaults; bound ``max_tokens`` by
        ``max_model_len``."""
        s = self.settings
        params: dict[str, Any] = {
            "n": 1,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k,
            "repetition_penalty": s.repetition_penalty,
            "min_tokens": s.min_response_tokens,
            "ignore_eos": s.ignore_eos,
        }
        if s.max_response_tokens is not None:
            params["max_tokens"] = s.max_response_tokens
        params.update({k: v for k, v in kwargs.items() if v is not None})
        params.pop("logprobs", None)  # every sample carries its tokens' logprobs anyway
        if params.get("top_k") in (None, 0):
            params["top_k"] = -1
        room = (s.max_model_len - prompt_len) if s.max_model_len else None
        if room is not None:
            params["max_tokens"] = max(1, min(params.get("max_tokens") or room, room))
        elif params.get("max_tokens") is None:
            params["max_tokens"] = 1024
        return params

    async def draw(
        self,
        prompt_ids: list[int],
        kwargs: dict[str, Any],
        multi_modal_inputs: Optional[dict[str, Tensor]] = None,
    ) -> Draws:
        """``kwargs['n']`` samples of a tokenized prompt, not yet Experiences
        (``multi_modal_inputs``: an image prompt's, see :meth:`draw_chat`).

        :func:`assemble_experiences` turns them into what :meth:`chat` / :meth:`generate`
        return. A wrapper over this engine's actor asks for :meth:`draw_chat` /
        :meth:`draw_generate` and assembles the Experiences itself (``serves_draws``): the
        engine's event loop, which every sample waits on, builds no Experience objects.
        """
        if not prompt_ids:
            raise ValueError("the prompt must contain at least one token")
        self._check_awake("generate")
        n = int(kwargs.get("n") or 1)
        limit = self.settings.max_prompt_tokens
        if limit is None and self.settings.max_model_len:
            limit = self.settings.max_model_len - 1
        if limit is not None and len(prompt_ids) > limit:
            if multi_modal_inputs:
                raise ValueError(
                    f"an image prompt of {len(prompt_ids)} tokens is longer than "
                    f"max_prompt_tokens={limit}, and cutting it would cut its images"
                )
            if not self.settings.enable_prompt_truncation:
                raise ValueError(
                    f"prompt has {len(prompt_ids)} tokens > max_prompt_tokens={limit} and "
                    "enable_prompt_truncation is false"
                )
            text = self.tokenizer.decode(prompt_ids[:limit])
            return Draws(prompt_ids, text, [], self.model_version, n=n, truncated_at=limit)
        params = self.sampling_params(kwargs, len(prompt_ids))
        first_version, paused_before = self.model_version, self.paused_s
        if multi_modal_inputs:
            samples = await self._sample(prompt_ids, params, multi_modal_inputs=multi_modal_inputs)
        else:
            samples = await self._sample(prompt_ids, params)
        skip = bool(params.get("skip_special_tokens", True))
        for s in samples:
            if s.text is None:
                s.text = self.tokenizer.decode(s.token_ids, skip_special_tokens=skip)
        return Draws(
            prompt_ids,
            self.tokenizer.decode(prompt_ids),
            samples,
            self.model_version,
            n=n,
            first_model_version=first_version,
            paused_s=self.paused_s - paused_before,
            multi_modal_inputs=multi_modal_inputs,
        )

    async def serves_draws(self) -> bool:
        """Whether :meth:`chat` and :meth:`generate` are :meth:`draw_chat` /
        :meth:`draw_generate` plus :func:`assemble_experiences` (an engine that replaces them
        keeps its own)."""
        cls = type(self)  # in an actor Ray wraps each method (functools.wraps): unwrap them
        return all(
            inspect.unwrap(getattr(cls, name)) is getattr(BaseRolloutEngine, name)
            for name in ("chat", "generate")
        )

    # ------------------------------------------------------------------ weights
    async def update_weights(
        self,
        state_dict: Optional[dict[str, Tensor]] = None,
        *,
        path: Optional[str] = None,
        version: Optional[int] = None,
    ) -> int:
        """Load new weights (a state dict, or a safetensors file / HF directory at ``path``) and
        set the served model version (default: previous + 1). Returns the new version."""
        if (state_dict is None) == (path is None):
            raise ValueError("update_weights needs exactly one of state_dict= or path=")
        weights = state_dict if state_dict is not None else load_weights_file(path)  # type: ignore[arg-type]
        await self._load_weights(weights)
        self.model_version = int(version) if version is not None else self.model_version + 1
        self.call_log.append(("update_weights", self.model_version))
        logger.info(
            "%s: weights updated to version %d", self.settings.display_name, self.model_version
        )
        return self.model_version

    async def gpu_placement(self) -> tuple[str, list[str]]:
        """``(node id, GPU ids)`` of this engine's process (see ``weight_sync.local_gpus``)."""
        from trinity.launcher.weight_sync import local_gpus

        return local_gpus()

    async def receive_weights(self, spec: Any, rank: int, version: Optional[int] = None) -> int:
        """Take part in a weight broadcast as rank ``rank`` of the group ``spec`` (a
        :class:`~trinity.launcher.weight_sync.WeightGroupSpec`: ``sync_method: nccl``), then
        load the weights as :meth:`update_weights` does. Joins the group on the first call."""
        from trinity.launcher.weight_sync import WeightReceiver

        receiver = getattr(self, "_weight_receiver", None)
        if receiver is None:
            receiver = self._weight_receiver = WeightReceiver()
        weights = await asyncio.to_thread(receiver.receive, spec, rank)
        return await self.update_weights(weights, version=version)

    async def _load_weights(self, weights: dict[str, Tensor]) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot load new weights")


def load_weights_file(path: str) -> dict[str, Tensor]:
    """Tensors of a ``.safetensors`` file or of every ``*.safetensors`` in an HF directory."""
    from pathlib import Path

    from safetensors.torch import load_file

    p = Path(path)
    files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"no safetensors weights at {path}")
    weights: dict[str, Tensor] = {}
    for f in files:
        weights.update(load_file(str(f)))
    return weights
