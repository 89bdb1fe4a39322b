"""Formatters: rows of SFT / DPO data sets -> :class:`~trinity.common.experience.Experience`.

In ``train`` mode (and for auxiliary SFT buffers) the trainer reads ready-made data rather
than rollouts; a formatter tokenizes one row with the model's chat template so that it has
the same layout as an experience produced by the explorer:

* :class:`SFTFormatter` — ``messages`` rows (``format.messages_key``) or plaintext rows
  (``prompt_key`` / ``response_key`` with ``system_prompt`` / ``system_prompt_key``).
  By default only the last assistant message is trained on (single-turn experience:
  everything before it is prompt); with ``format.enable_concatenated_multi_turn`` every
  assistant message is (multi-turn experience whose ``action_mask`` is True exactly on
  assistant tokens, computed by core's ``tokenize_and_mask_messages``).
* :class:`DPOFormatter` — prompt plus ``chosen`` / ``rejected`` responses -> a ``"dpo"``
  experience laid out as core expects: ``tokens`` = the prompt (with the generation prompt),
  ``chosen`` / ``rejected`` = the response tokens that follow it.
* :class:`CPTFormatter` — continued pre-training (``cpt``): the raw text of
  ``row[prompt_key]`` tokenized as it is, *without* a chat template, every token after the
  first trained on (``prompt_length`` 1), as Trinity-RFT 0.6's ``cpt`` schema does.

Both take any tokenizer with Hugging Face's ``apply_chat_template`` (or a path to load one).
Assistant tokens are located by the incremental-prefix method; a chat template that rewrites
earlier turns raises ``ChatTemplateError`` instead of yielding a wrong mask.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Optional

import torch

from trinity.buffer.task_rows import row_to_task
from trinity.common.config import FormatConfig
from trinity.common.experience import Experience
from trinity.common.models.utils import ChatTemplateError, tokenize_and_mask_messages
from trinity.utils.registry import Registry

__all__ = [
    "FORMATTERS",
    "ExperienceFormatter",
    "SFTFormatter",
    "DPOFormatter",
    "CPTFormatter",
    "TaskFormatter",
    "FormatError",
    "get_formatter",
]

FORMATTERS: Registry[type[ExperienceFormatter]] = Registry("formatters")


class FormatError(ValueError):
    """A row cannot be turned into an experience (missing key, wrong type, no assistant)."""


Messages = list[dict[str, Any]]


def _load_tokenizer(tokenizer: Any) -> Any:
    if isinstance(tokenizer, str):
        import transformers

        return transformers.AutoTokenizer.from_pretrained(tokenizer)
    if not hasattr(tokenizer, "apply_chat_template"):
        raise TypeError(
            f"formatters need a tokenizer with apply_chat_template (or a path to one), got "
            f"{type(tokenizer).__name__}"
        )
    return tokenizer


def _as_ids(out: Any) -> list[int]:
    """Token ids from whatever ``apply_chat_template(tokenize=True)`` returns."""
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    if isinstance(out, torch.Tensor):
        out = out.tolist()
    if hasattr(out, "tolist"):
        out = out.tolist()
    out = list(out)
    if out and isinstance(out[0], (list, tuple)):  # a batch of one
        out = list(out[0])
    return [int(t) for t in out]


def _maybe_json(value: Any, what: str) -> Any:
    # HF datasets align nested schemas across rows (filling unknown fields with None); data
    # sets therefore often store messages / tools as JSON strings
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise FormatError(f"{what} is a string that is not valid JSON ({exc.msg})") from exc
    return value


def _looks_like_json(value: Any) -> bool:
    return isinstance(value, str) and value.lstrip()[:1] in ("[", "{")


def _clean_messages(messages: Any, what: str) -> Messages:
    messages = _maybe_json(messages, what)
    if isinstance(messages, dict):
        messages = [messages]
    if not isinstance(messages, (list, tuple)) or not messages:
        raise FormatError(f"{what} must be a non-empty list of messages, got {messages!r:.80}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise FormatError(f"{what}[{i}] must be a dict with a 'role', got {m!r:.80}")
        # drop keys HF datasets filled with None for schema alignment
        out.append({k: v for k, v in m.items() if v is not None or k == "content"})
    return out


def _get(sample: dict[str, Any], key: Optional[str], purpose: str) -> Any:
    if not key or key not in sample or sample[key] is None:
        raise FormatError(
            f"row has no value for {key!r} (format.{purpose}); keys present: {sorted(sample)}"
        )
    return sample[key]


def _response_messages(value: Any, what: str) -> Messages:
    """``chosen`` / ``rejected`` as assistant messages (a string, a message, or a list)."""
    value = _maybe_json(value, what) if _looks_like_json(value) else value
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    return _clean_messages(value, what)


class ExperienceFormatter(ABC):
    """Turns one raw row into an :class:`Experience` using the model's chat template."""

    def __init__(
        self,
        tokenizer: Any = None,
        format_config: Optional[FormatConfig] = None,
        *,
        tokenizer_path: Optional[str] = None,
    ) -> None:
        # ``tokenizer_path=`` is Trinity-RFT 0.6's keyword (it passes a path, never a tokenizer)
        if (tokenizer is None) == (tokenizer_path is None):
            raise TypeError(
                f"{type(self).__name__} takes a tokenizer (or a path to one), or tokenizer_path="
            )
        self.tokenizer = _load_tokenizer(tokenizer if tokenizer is not None else tokenizer_path)
        self.config = format_config or FormatConfig()
        self.chat_template = self.config.chat_template

    def render(
        self,
        messages: Messages,
        add_generation_prompt: bool,
        tools: Optional[list[dict[str, Any]]] = None,
    ) -> list[int]:
        """Token ids of ``messages`` under the configured chat template."""
        kwargs: dict[str, Any] = {
            "add_generation_prompt": add_generation_prompt,
            "tokenize": True,
        }
        if tools is not None:
            kwargs["tools"] = tools
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        if self.config.enable_thinking is not None:
            kwargs["enable_thinking"] = self.config.enable_thinking
        return _as_ids(self.tokenizer.apply_chat_template(messages, **kwargs))

    def _system(self, sample: dict[str, Any]) -> Messages:
        cfg = self.config
        if cfg.system_prompt_key and sample.get(cfg.system_prompt_key) is not None:
            return [{"role": "system", "content": sample[cfg.system_prompt_key]}]
        if cfg.system_prompt is not None:
            return [{"role": "system", "content": cfg.system_prompt}]
        return []

    def _tools(self, sample: dict[str, Any]) -> Optional[list[dict[str, Any]]]:
        key = self.config.tools_key
        tools = sample.get(key) if key else None
        if tools is None:
            return None
        tools = _maybe_json(tools, f"row[{key!r}]")
        if not isinstance(tools, list):
            raise FormatError(f"row[{key!r}] (format.tools_key) must be a list of tool schemas")
        return tools or None

    @abstractmethod
    def format(self, sample: dict[str, Any]) -> Experience:
        """One row -> one experience; raises :class:`FormatError` for a bad row."""

    def format_batch(self, samples: Sequence[dict[str, Any]]) -> list[Experience]:
        return [self.format(s) for s in samples]

    def __call__(self, sample: dict[str, Any]) -> Experience:
        return self.format(sample)


@FORMATTERS.register_module("sft")
class SFTFormatter(ExperienceFormatter):
    """SFT rows -> single-turn (last assistant message) or multi-turn experiences.

    ``prompt_type: messages`` reads ``row[messages_key]`` (a list of messages or its JSON);
    ``prompt_type: plaintext`` builds ``[system?, user: row[prompt_key], assistant:
    row[response_key]]``. Tools come from ``row[tools_key]`` when present.
    """

    def messages_of(self, sample: dict[str, Any]) -> Messages:
        cfg = self.config
        if cfg.prompt_type == "messages":
            key = cfg.messages_key
            if key not in sample and "messages" in sample and key == "message":
                key = "messages"  # the default key is Trinity-RFT's "message"; data says "messages"
            messages = _clean_messages(_get(sample, key, "messages_key"), f"row[{key!r}]")
            if self._system(sample) and messages[0]["role"] != "system":
                messages = self._system(sample) + messages
            return messages
        prompt = _get(sample, cfg.prompt_key, "prompt_key")
        response = _get(sample, cfg.response_key, "response_key")
        if not isinstance(prompt, str) or not isinstance(response, str):
            raise FormatError(
                f"plaintext SFT rows need string {cfg.prompt_key!r} and {cfg.response_key!r}, "
                f"got {type(prompt).__name__} and {type(response).__name__}"
            )
        if cfg.reply_prefix:
            response = cfg.reply_prefix + response
        return [
            *self._system(sample),
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": response},
        ]

    def format(self, sample: dict[str, Any]) -> Experience:
        messages = self.messages_of(sample)
        tools = self._tools(sample)
        if self.config.enable_concatenated_multi_turn:
            tokens, mask, prompt_length = tokenize_and_mask_messages(self.render, messages, tools)
            return Experience(
                tokens=tokens,
                prompt_length=prompt_length,
                action_mask=mask[prompt_length:],
                messages=messages,
                tools=tools,
                experience_type="multi_turn",
            )
        if messages[-1]["role"] != "assistant":
            raise FormatError(
                f"the last message of an SFT sample must be the assistant's, got "
                f"{messages[-1]['role']!r}"
            )
        prompt = self.render(messages[:-1], add_generation_prompt=True, tools=tools)
        full = self.render(messages, add_generation_prompt=False, tools=tools)
        if full[: len(prompt)] != prompt or len(full) <= len(prompt):
            raise ChatTemplateError(
                "Chat template is not prefix-stable: the prompt rendered with the generation "
                "prompt is not a prefix of the full conversation, so the response tokens "
                "cannot be located."
            )
        return Experience(
            tokens=full,
            prompt_length=len(prompt),
            messages=messages,
            tools=tools,
            experience_type="single_turn",
        )


@FORMATTERS.register_module("dpo")
class DPOFormatter(ExperienceFormatter):
    """Preference rows -> ``"dpo"`` experiences.

    ``prompt_type: plaintext``: ``row[prompt_key]`` (a string) and ``row[chosen_key]`` /
    ``row[rejected_key]`` (strings). ``prompt_type: messages``: the prompt is
    ``row[messages_key]`` (or ``row[prompt_key]`` when that holds messages), and chosen /
    rejected are strings, one assistant message, or lists of messages.
    """

    def _prompt_messages(self, sample: dict[str, Any]) -> Messages:
        cfg = self.config
        if cfg.prompt_type == "messages":
            key = cfg.messages_key
            if key not in sample:
                if "messages" in sample and key == "message":
                    key = "messages"
                elif cfg.prompt_key in sample:
                    key = cfg.prompt_key
            value = _get(sample, key, "messages_key")
            if isinstance(value, str) and not _looks_like_json(value):
                messages = [{"role": "user", "content": value}]
            else:
                messages = _clean_messages(value, f"row[{key!r}]")
            if self._system(sample) and messages[0]["role"] != "system":
                messages = self._system(sample) + messages
            return messages
        prompt = _get(sample, cfg.prompt_key, "prompt_key")
        if not isinstance(prompt, str):
            raise FormatError(f"plaintext DPO rows need a string {cfg.prompt_key!r}")
        return [*self._system(sample), {"role": "user", "content": prompt}]

    def _response_tokens(
        self, prompt: list[int], messages: Messages, tools: Optional[list[dict[str, Any]]]
    ) -> list[int]:
        full = self.render(messages, add_generation_prompt=False, tools=tools)
        if full[: len(prompt)] != prompt:
            raise ChatTemplateError(
                "Chat template is not prefix-stable: the prompt rendered with the generation "
                "prompt is not a prefix of prompt + response."
            )
        response = full[len(prompt) :]
        if not response:
            raise FormatError("a DPO response rendered as zero tokens")
        return response

    def format(self, sample: dict[str, Any]) -> Experience:
        cfg = self.config
        prompt_messages = self._prompt_messages(sample)
        chosen = _response_messages(_get(sample, cfg.chosen_key, "chosen_key"), "chosen")
        rejected = _response_messages(_get(sample, cfg.rejected_key, "rejected_key"), "rejected")
        tools = self._tools(sample)
        prompt = self.render(prompt_messages, add_generation_prompt=True, tools=tools)
        chosen_messages = prompt_messages + chosen
        rejected_messages = prompt_messages + rejected
        return Experience(
            tokens=prompt,
            prompt_length=len(prompt),
            chosen=self._response_tokens(prompt, chosen_messages, tools),
            rejected=self._response_tokens(prompt, rejected_messages, tools),
            chosen_messages=chosen_messages,
            rejected_messages=rejected_messages,
            messages=prompt_messages,
            experience_type="dpo",
        )


@FORMATTERS.register_module("cpt")
class CPTFormatter(ExperienceFormatter):
    """Raw text rows -> experiences for continued pre-training (Trinity-RFT 0.6's ``cpt``).

    ``prompt_type: plaintext`` only: ``row[prompt_key]`` (a string) is tokenized by the
    tokenizer itself (its special tokens, e.g. a BOS, as it adds them; no chat template, no
    end-of-turn), and the language-model loss covers every token after the first: the
    experience's ``prompt_length`` is 1, as in 0.6. A text of fewer than two tokens has
    nothing to train on and is refused.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """As :class:`ExperienceFormatter`; a ``prompt_type`` other than ``plaintext`` is a
        :class:`FormatError` (Trinity-RFT 0.6's formatter refuses it when built too)."""
        super().__init__(*args, **kwargs)
        if self.config.prompt_type != "plaintext":
            raise FormatError(
                f"the cpt formatter reads raw text: format.prompt_type must be 'plaintext', "
                f"got {self.config.prompt_type!r}"
            )

    def format(self, sample: dict[str, Any]) -> Experience:
        key = self.config.prompt_key
        text = _get(sample, key, "prompt_key")
        if not isinstance(text, str):
            raise FormatError(
                f"cpt rows need a string {key!r} (format.prompt_key), got {type(text).__name__}"
            )
        tokens = _as_ids(self.tokenizer(text)["input_ids"])
        if len(tokens) < 2:
            raise FormatError(
                f"row[{key!r}] tokenizes to {len(tokens)} token(s); continued pre-training "
                "trains on every token after the first, so a text needs at least 2"
            )
        return Experience(tokens=tokens, prompt_length=1)


@FORMATTERS.register_module("task")
class TaskFormatter:
    """Task set rows -> :class:`~trinity.common.workflows.Task` (Trinity-RFT's ``"task"``
    formatter, ``FORMATTER.get("task")(config)``).

    The row's workflow / reward function (columns ``format.workflow_key`` /
    ``format.reward_fn_key``) win over the storage's defaults, as in a task set reader; unlike
    the reader's tasks (which keep names until run), the formatter's carry the classes, as
    Trinity-RFT's do. The explorer's task sets use the reader; this is for code that formats
    rows itself.
    """

    def __init__(self, config: Any) -> None:
        self.config = config

    def format(self, sample: dict[str, Any]) -> Any:
        task = row_to_task(dict(sample), 0, self.config)
        task.workflow = task.workflow_cls
        task.reward_fn = task.reward_fn_cls
        task.raw_task = sample
        task.task_id, task.index = "", {}
        return task

    def __call__(self, sample: dict[str, Any]) -> Any:
        return self.format(sample)


def get_formatter(
    schema_type: str, tokenizer: Any, format_config: Optional[FormatConfig] = None
) -> ExperienceFormatter:
    """The formatter registered as ``schema_type`` (``"sft"`` / ``"dpo"`` / ``"cpt"``)."""
    return FORMATTERS[schema_type](tokenizer, format_config)
