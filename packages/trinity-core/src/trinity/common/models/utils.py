"""Tokenizer-agnostic helpers shared by every inference engine.

The central helper, :func:`tokenize_and_mask_messages`, turns a whole chat
conversation into ``(token_ids, action_mask, prompt_length)``. It never looks at
a tokenizer: it only needs a callable that renders a list of messages into token
ids, so the HF-tokenizer engines, the external OpenAI engine and the in-process
test double all compute the action mask the same way.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

import torch

__all__ = [
    "PROMPT_TRUNCATED_TEXT",
    "ApplyChatTemplate",
    "ChatTemplateError",
    "prompt_truncated_experiences",
    "tokenize_and_mask_messages",
    "tokenize_and_mask_messages_default",
    "tokenize_and_mask_messages_hf",
]

#: ``response_text`` of the placeholder experiences of an over-long prompt (Trinity-RFT's text)
PROMPT_TRUNCATED_TEXT = "[This experience is masked out due to overlong prompt]"


def prompt_truncated_experiences(
    prompt_ids: Sequence[int], limit: int, n: int, prompt_text: str, model_version: int
) -> List[Any]:
    """``n`` placeholder Experiences for a prompt longer than ``limit`` tokens.

    The prompt is not sent to the engine. Each placeholder keeps the first ``limit`` prompt
    tokens plus one token as a stand-in response (an Experience needs one), reward 0 and
    ``truncate_status="prompt_truncated"``, so the batch keeps its shape and the trainer
    masks it out. ``prompt_text`` is the decoded kept prompt.
    """
    from trinity.common.experience import Experience

    kept = list(prompt_ids[: limit + 1])
    return [
        Experience(
            tokens=kept,
            prompt_length=limit,
            logprobs=torch.zeros(1, dtype=torch.float32),
            prompt_text=prompt_text,
            response_text=PROMPT_TRUNCATED_TEXT,
            truncate_status="prompt_truncated",
            reward=0.0,
            model_version=model_version,
        )
        for _ in range(n)
    ]


class ApplyChatTemplate(Protocol):
    """Render ``messages`` with the model's chat template and return token ids.

    ``add_generation_prompt=True`` appends the tokens that open an assistant turn
    (what the model sees right before it starts generating).
    """

    def __call__(
        self,
        messages: List[Dict[str, Any]],
        add_generation_prompt: bool,
        tools: Optional[List[Dict[str, Any]]] = None,
    ) -> Sequence[int]: ...


class ChatTemplateError(ValueError):
    """The chat template is not prefix-stable, so assistant tokens cannot be located.

    Raised instead of silently producing a wrong action mask: training on a
    mis-aligned mask would push gradients into user/tool tokens.
    """


def _first_mismatch(a: Sequence[int], b: Sequence[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _check_prefix(prefix: Sequence[int], full: Sequence[int], what: str, turn_index: int) -> None:
    if len(prefix) <= len(full) and list(full[: len(prefix)]) == list(prefix):
        return
    pos = _first_mismatch(prefix, full)
    raise ChatTemplateError(
        f"Chat template is not prefix-stable at assistant message #{turn_index}: {what} "
        f"(prefix has {len(prefix)} tokens, longer rendering has {len(full)}, first difference "
        f"at token {pos}). The template re-tokenizes earlier turns (e.g. it strips <think> "
        "blocks or rewrites history), so the incremental-prefix method cannot tell which "
        "tokens the assistant produced. Use a template that renders history unchanged, or "
        "one with {% generation %} markers and the tokenizer's assistant mask."
    )


def tokenize_and_mask_messages(
    apply_chat_template: ApplyChatTemplate | Callable[..., Sequence[int]],
    messages: List[Dict[str, Any]],
    tools: Optional[List[Dict[str, Any]]] = None,
) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """Tokenize a conversation and mark the tokens produced by the assistant.

    Uses the incremental-prefix method: for every assistant message ``i`` the
    conversation is rendered up to ``i`` *with* the generation prompt and then up
    to and including ``i`` *without* it; the tokens in between are the assistant
    turn (content plus its end-of-turn tokens, i.e. exactly what the model would
    have generated). Every partial rendering must be a prefix of the next one and
    of the full rendering, otherwise :class:`ChatTemplateError` is raised.

    Args:
        apply_chat_template: ``(messages, add_generation_prompt, tools=None) -> ids``.
            ``tools`` is only passed when not ``None`` so simple callables work.
        messages: OpenAI-style messages (``role`` in system/user/assistant/tool).
        tools: Optional tool (function) schemas forwarded to the template.

    Returns:
        ``token_ids``: ``torch.long`` tensor of shape ``[seq_len]``, the whole conversation.
        ``action_mask``: ``torch.bool`` tensor of shape ``[seq_len]``; ``True`` exactly on
        assistant tokens, ``False`` on system/user/tool/template tokens.
        ``prompt_length``: index of the first assistant token (everything before it is
        the prompt).

    Raises:
        ValueError: ``messages`` contains no assistant message, or the first assistant
            token would be at position 0 (no logprob can be computed for it).
        ChatTemplateError: the template is not prefix-stable.
    """

    def render(msgs: List[Dict[str, Any]], add_generation_prompt: bool) -> List[int]:
        if tools is None:
            ids = apply_chat_template(msgs, add_generation_prompt=add_generation_prompt)
        else:
            ids = apply_chat_template(
                msgs, add_generation_prompt=add_generation_prompt, tools=tools
            )
        return [int(t) for t in ids]

    assistant_indices = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if not assistant_indices:
        raise ValueError(
            "Cannot build an experience from messages without any assistant message: "
            "there would be no tokens to train on."
        )
    full = render(messages, add_generation_prompt=False)
    mask = torch.zeros(len(full), dtype=torch.bool)
    for idx in assistant_indices:
        before = render(messages[:idx], add_generation_prompt=True)
        upto = render(messages[: idx + 1], add_generation_prompt=False)
        _check_prefix(
            before,
            upto,
            "rendering with the generation prompt is not a prefix of the rendering that "
            "includes the assistant message",
            idx,
        )
        _check_prefix(
            upto,
            full,
            "rendering up to this assistant message is not a prefix of the whole conversation",
            idx,
        )
        mask[len(before) : len(upto)] = True
    if not bool(mask.any()):
        raise ValueError("The chat template rendered every assistant message as zero tokens.")
    prompt_length = int(torch.argmax(mask.to(torch.int8)).item())
    if prompt_length == 0:
        raise ValueError(
            "The first assistant token is the first token of the sequence; a prompt of at "
            "least one token is needed to score it."
        )
    return torch.tensor(full, dtype=torch.long), mask, prompt_length


def _template_kwargs(
    tools: Optional[List[Dict[str, Any]]],
    chat_template: Optional[str],
    enable_thinking: Optional[bool],
) -> Dict[str, Any]:
    """``apply_chat_template`` keyword arguments: tokenized, with the optional ones given."""
    kwargs: Dict[str, Any] = {"tokenize": True}
    if tools is not None:
        kwargs["tools"] = tools
    if chat_template is not None:
        kwargs["chat_template"] = chat_template
    if enable_thinking is not None:
        kwargs["enable_thinking"] = enable_thinking
    return kwargs


def tokenize_and_mask_messages_hf(
    tokenizer: Any,
    messages: List[Dict[str, Any]],
    tools: Optional[List[Dict[str, Any]]] = None,
    chat_template: Optional[str] = None,
    enable_thinking: Optional[bool] = None,
) -> Dict[str, torch.Tensor]:
    """Trinity-RFT 0.6's helper of that name: ``{"input_ids": [1, L], "assistant_masks":
    [1, L]}`` as Hugging Face computes them, from the ``{% generation %}`` ...
    ``{% endgeneration %}`` markers of the chat template (``return_assistant_tokens_mask``).

    Why both helpers: a template with those markers says exactly which tokens the assistant
    wrote, with no re-rendering; :func:`tokenize_and_mask_messages_default` works with any
    template. A template without the markers gives an all-zero mask (Hugging Face warns).
    """
    out = tokenizer.apply_chat_template(
        messages,
        add_generation_prompt=False,
        return_assistant_tokens_mask=True,
        return_dict=True,
        return_tensors="pt",
        **_template_kwargs(tools, chat_template, enable_thinking),
    )
    out = dict(out)
    out.pop("attention_mask", None)
    return out


def tokenize_and_mask_messages_default(
    tokenizer: Any,
    messages: List[Dict[str, Any]],
    tools: Optional[List[Dict[str, Any]]] = None,
    chat_template: Optional[str] = None,
    enable_thinking: Optional[bool] = None,
) -> Dict[str, torch.Tensor]:
    """Trinity-RFT 0.6's helper of that name: ``{"input_ids": [1, L], "assistant_masks":
    [1, L]}`` for a conversation rendered by a Hugging Face tokenizer (or processor).

    Assistant tokens are found as in :func:`tokenize_and_mask_messages` (render up to each
    assistant message with, then without, the generation prompt), with Trinity-RFT's rules:
    an empty conversation is a ``ValueError``, one without an assistant message gets an
    all-zero mask, and under a thinking template (one containing ``<think>``) only the
    assistant messages after the last user message are masked (earlier turns lose their
    reasoning when re-rendered).
    """
    if not messages:
        raise ValueError("Messages should not be empty")
    kwargs = _template_kwargs(tools, chat_template, enable_thinking)

    def render(msgs: List[Dict[str, Any]], add_generation_prompt: bool) -> List[int]:
        if not msgs:
            return []
        out = tokenizer.apply_chat_template(
            msgs, add_generation_prompt=add_generation_prompt, **kwargs
        )
        if hasattr(out, "keys"):
            out = out["input_ids"]
        if hasattr(out, "tolist"):
            out = out.tolist()
        if out and isinstance(out[0], (list, tuple)):  # a batch of one
            out = out[0]
        return [int(t) for t in out]

    full = render(messages, add_generation_prompt=False)
    mask = torch.zeros(len(full), dtype=torch.long)
    start = 0
    template = chat_template or getattr(tokenizer, "chat_template", None) or ""
    if "<think>" in template:
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        start = users[-1] if users else 0
    for idx in range(start, len(messages)):
        if messages[idx].get("role") != "assistant":
            continue
        before = render(messages[:idx], add_generation_prompt=True) if idx else []
        upto = render(messages[: idx + 1], add_generation_prompt=False)
        mask[len(before) : len(upto)] = 1
    return {
        "input_ids": torch.tensor([full], dtype=torch.long),
        "assistant_masks": mask.unsqueeze(0),
    }
