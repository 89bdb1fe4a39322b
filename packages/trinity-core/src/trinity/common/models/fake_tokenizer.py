"""The fake model's tokenizer and tool-call text (:mod:`trinity.common.models.testing`).

:class:`FakeTokenizer` is a tiny byte-level tokenizer with a chat template, so a test can
compute the exact tokens it expects; :func:`format_tool_call` / :func:`parse_tool_calls` are
the one text form of a tool call the fake model emits and its OpenAI endpoint parses, so a
re-rendered assistant message gives the same tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Dict, List, Optional, Tuple, Union

from torch import Tensor

__all__ = ["FakeTokenizer", "format_tool_call", "parse_tool_calls"]

_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


# --------------------------------------------------------------------------- tokenizer
class FakeTokenizer:
    """Byte-level tokenizer: ids 0-255 are UTF-8 bytes, 256+ are special tokens.

    Special tokens are written ``<|name|>`` in text and are parsed by :meth:`encode`
    (as HF tokenizers do). The chat template renders each message as
    ``<|role|>`` + content + ``<|end|>``; the generation prompt is ``<|assistant|>``.
    Tool schemas, when given, come first as ``<|tools|>`` + JSON + ``<|end|>``. So a
    sampled reply is ``encode(text) + [eos_token_id]``, exactly the tokens the template
    produces for that assistant message later (the template is prefix-stable).
    """

    SPECIAL_TOKENS: Dict[str, int] = {
        "<|pad|>": 256,
        "<|system|>": 257,
        "<|user|>": 258,
        "<|assistant|>": 259,
        "<|tool|>": 260,
        "<|end|>": 261,
        "<|tools|>": 262,
    }
    ROLE_TOKENS: Dict[str, str] = {
        "system": "<|system|>",
        "developer": "<|system|>",
        "user": "<|user|>",
        "assistant": "<|assistant|>",
        "tool": "<|tool|>",
        "function": "<|tool|>",
    }

    def __init__(self) -> None:
        self.id_to_special = {v: k for k, v in self.SPECIAL_TOKENS.items()}
        self._special_re = re.compile(
            "(" + "|".join(re.escape(s) for s in self.SPECIAL_TOKENS) + ")"
        )

    pad_token_id = 256
    eos_token_id = 261
    vocab_size = 263

    def token_id(self, token: str) -> int:
        """Id of a special token such as ``"<|user|>"``."""
        return self.SPECIAL_TOKENS[token]

    def encode(self, text: str, parse_special: bool = True) -> List[int]:
        """UTF-8 bytes of ``text``; ``<|...|>`` special tokens become single ids."""
        if not parse_special:
            return list(text.encode("utf-8"))
        ids: List[int] = []
        for part in self._special_re.split(text):
            if part in self.SPECIAL_TOKENS:
                ids.append(self.SPECIAL_TOKENS[part])
            elif part:
                ids.extend(part.encode("utf-8"))
        return ids

    def decode(self, ids: Union[Sequence[int], Tensor], skip_special_tokens: bool = False) -> str:
        """Inverse of :meth:`encode` (invalid UTF-8, e.g. from truncation, is replaced)."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        out: List[str] = []
        buf = bytearray()
        for t in ids:
            t = int(t)
            if t < 256:
                buf.append(t)
                continue
            if buf:
                out.append(buf.decode("utf-8", errors="replace"))
                buf = bytearray()
            if t not in self.id_to_special:
                raise ValueError(f"token id {t} is outside the fake vocabulary")
            if not skip_special_tokens:
                out.append(self.id_to_special[t])
        if buf:
            out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def token_text(self, token_id: int) -> str:
        """Printable form of one token (for OpenAI ``logprobs.content[i].token``)."""
        if token_id >= 256:
            return self.id_to_special[token_id]
        return bytes([token_id]).decode("utf-8", errors="backslashreplace")

    @staticmethod
    def content_text(content: Any) -> str:
        """Text of an OpenAI message ``content`` (str, None, or a list of parts)."""
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
        return str(content)

    def render_message(self, message: Dict[str, Any]) -> str:
        """One message as template text (role token + content + ``<|end|>``)."""
        role = message.get("role")
        if role not in self.ROLE_TOKENS:
            raise ValueError(f"FakeTokenizer chat template does not know role {role!r}")
        body = self.content_text(message.get("content"))
        for call in message.get("tool_calls") or []:
            fn = call.get("function", call)
            body += format_tool_call(fn["name"], fn.get("arguments", {}))
        return self.ROLE_TOKENS[role] + body + "<|end|>"

    def render_chat(
        self,
        messages: List[Dict[str, Any]],
        add_generation_prompt: bool = False,
        tools: Optional[List[Dict[str, Any]]] = None,
    ) -> str:
        """The chat template as text."""
        text = ""
        if tools:
            text += "<|tools|>" + json.dumps(tools, ensure_ascii=False, sort_keys=True) + "<|end|>"
        text += "".join(self.render_message(m) for m in messages)
        if add_generation_prompt:
            text += "<|assistant|>"
        return text

    def apply_chat_template(
        self,
        messages: List[Dict[str, Any]],
        add_generation_prompt: bool = False,
        tools: Optional[List[Dict[str, Any]]] = None,
        tokenize: bool = True,
    ) -> Union[List[int], str]:
        """HF-style: token ids by default, template text with ``tokenize=False``."""
        text = self.render_chat(messages, add_generation_prompt=add_generation_prompt, tools=tools)
        return self.encode(text) if tokenize else text


# --------------------------------------------------------------------------- tool calls
def format_tool_call(name: str, arguments: Union[Dict[str, Any], str, None] = None) -> str:
    """Canonical text of a tool call in the fake model's output.

    Script a tool-calling reply with this so that the OpenAI endpoint returns a
    ``tool_calls`` entry *and* re-rendering the assistant message gives the same tokens.
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass
    payload = {"name": name, "arguments": {} if arguments is None else arguments}
    return "<tool_call>" + json.dumps(payload, ensure_ascii=False) + "</tool_call>"


def _as_call(obj: Any) -> Optional[Dict[str, Any]]:
    if isinstance(obj, dict) and isinstance(obj.get("name"), str):
        args = obj.get("arguments", obj.get("parameters", {}))
        return {"name": obj["name"], "arguments": args}
    return None


def parse_tool_calls(text: str) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """Split a reply into ``(content or None, [{"name", "arguments"}, ...])``.

    Recognises ``<tool_call>{json}</tool_call>`` blocks (see :func:`format_tool_call`) and
    a reply that is exactly one JSON object with a ``name`` key.
    """
    calls: List[Dict[str, Any]] = []
    for block in _TOOL_CALL_RE.findall(text):
        try:
            call = _as_call(json.loads(block))
        except json.JSONDecodeError:
            call = None
        if call is None:
            return text, []  # malformed: treat everything as plain content
        calls.append(call)
    if calls:
        rest = _TOOL_CALL_RE.sub("", text).strip()
        return (rest or None), calls
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            call = _as_call(json.loads(stripped))
        except json.JSONDecodeError:
            call = None
        if call is not None:
            return None, [call]
    return text, []
