"""The agent loop: one episode of chat-completion turns with tool calls, and its records.

This module owns the protocol :func:`run_agent_loop` follows (call the model with ``tools=``,
run each tool call, append ``role: tool`` messages, stop on a final answer / ``max_turns`` /
truncation / ``env_done`` / a too-long context), the episode records :class:`AgentTurn` and
:class:`AgentEpisode`, and the helpers the agent workflows share to build the opening messages,
read ``workflow_args`` and isolate the model's history. The workflows that drive it are in
:mod:`trinity.workflows.agent`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from trinity.common.config import GenerationConfig
from trinity.common.experience import Experience
from trinity.common.workflows import Task
from trinity.workflows.common import (
    MissingTaskFieldError,
    generation_kwargs,
)
from trinity.workflows.tools import (
    ToolResult,
    ToolSet,
)

AGENT_SYSTEM_PROMPT = (
    "You are a helpful assistant that can call tools. Call a tool whenever it helps, read its "
    "result, and when you know the answer reply with it directly, without calling a tool."
)

#: Why an episode ended (``Experience.info["stop_reason"]``).
STOP_REASONS = ("final_answer", "max_turns", "truncated", "env_done", "context_exceeded")
#: ``workflow_args.trajectory_mode`` values: one Experience per model call, or one per episode.
TRAJECTORY_MODES = ("per_turn", "whole")

# OpenAI chat-completion parameters sent as such; other sampling parameters (top_k, min_p, ...)
# are vLLM extensions and go in ``extra_body`` (the openai client rejects unknown keywords).
_OPENAI_PARAMS = frozenset(
    {"temperature", "top_p", "max_tokens", "seed", "stop", "presence_penalty", "frequency_penalty"}
)


def openai_request_kwargs(
    rollout_args: Optional[GenerationConfig | Mapping[str, Any]],
) -> dict[str, Any]:
    """``chat.completions.create`` keyword arguments from a task's ``rollout_args`` (without n)."""
    args = generation_kwargs(rollout_args)
    args.pop("n", None)
    out: dict[str, Any] = {k: v for k, v in args.items() if k in _OPENAI_PARAMS}
    extra = {k: v for k, v in args.items() if k not in _OPENAI_PARAMS}
    if extra:
        out["extra_body"] = extra
    return out


# ---------------------------------------------------------------------- episode records
@dataclass
class AgentTurn:
    """One model call of an episode and the tool calls it made.

    Attributes:
        index: 0-based turn number (also ``Experience.eid.step`` in per-turn mode).
        experience: the recorded Experience of this call (exact tokens and logprobs).
        content: the assistant text (``None`` when the reply is only tool calls).
        tool_calls: ``[{"id", "name", "arguments"}]`` with ``arguments`` the raw JSON text.
        tool_results: one :class:`~trinity.workflows.tools.ToolResult` per executed call.
        finish_reason: the API's ``finish_reason`` (``"stop"``, ``"tool_calls"``, ``"length"``).
    """

    index: int
    experience: Experience
    content: Optional[str]
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)
    finish_reason: Optional[str] = None

    @property
    def tool_errors(self) -> list[str]:
        return [r.error for r in self.tool_results if r.error is not None]


@dataclass
class AgentEpisode:
    """The state of one episode: its conversation, tools, environment state and turns.

    ``state`` is free for subclasses (the text game keeps its game there).
    """

    index: int
    messages: list[dict[str, Any]]
    toolset: ToolSet
    state: Any = None
    turns: list[AgentTurn] = field(default_factory=list)
    final_text: str = ""
    stop_reason: Optional[str] = None
    error: Optional[str] = None

    @property
    def num_tool_calls(self) -> int:
        return sum(len(t.tool_calls) for t in self.turns)

    @property
    def num_tool_errors(self) -> int:
        return sum(len(t.tool_errors) for t in self.turns)


def _tool_call_dicts(message: Any, episode_index: int, turn_index: int) -> list[dict[str, Any]]:
    calls = []
    for j, call in enumerate(getattr(message, "tool_calls", None) or []):
        fn = getattr(call, "function", None)
        name = getattr(fn, "name", None) or ""
        arguments = getattr(fn, "arguments", None)
        if arguments is not None and not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        call_id = getattr(call, "id", None) or f"call_{episode_index}_{turn_index}_{j}"
        calls.append({"id": call_id, "name": name, "arguments": arguments or "{}"})
    return calls


async def run_agent_loop(
    model: Any,
    episode: AgentEpisode,
    max_turns: int,
    request_kwargs: Optional[Mapping[str, Any]] = None,
    is_done: Optional[Callable[[AgentEpisode], bool]] = None,
) -> AgentEpisode:
    """Play one episode (see the module docstring for the protocol); returns ``episode``.

    Args:
        model: a :class:`~trinity.common.models.model.ModelWrapper` with ``enable_history``,
            used by this episode only (a clone with isolated history), so the Experience
            recorded after each call is this turn's.
        episode: the initial messages and the tools; turns are appended to it.
        max_turns: the most model calls.
        request_kwargs: extra ``chat.completions.create`` arguments (sampling parameters).
        is_done: called after each turn's tool calls; True ends the episode (``"env_done"``).
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns!r}")
    if not getattr(model, "enable_history", False):
        raise ValueError("run_agent_loop needs a model with enable_history=True")
    import openai  # the OpenAI client is how the workflow talks to the model

    client = model.get_openai_async_client()
    model_name = getattr(client, "model_path", None) or model.model_path
    kwargs = dict(request_kwargs or {})
    if episode.toolset.schemas:
        kwargs["tools"] = episode.toolset.schemas
    for turn_index in range(max_turns):
        try:
            response = await client.chat.completions.create(
                model=model_name, messages=episode.messages, n=1, **kwargs
            )
        except openai.BadRequestError as exc:
            if not episode.turns:
                raise
            # the grown conversation no longer fits the model: end with what was played
            episode.stop_reason = "context_exceeded"
            episode.error = str(exc)
            break
        recorded = model.extract_experience_from_history()
        if len(recorded) != 1:
            raise RuntimeError(
                f"expected one recorded experience per model call, got {len(recorded)}; is the "
                "model (or its history) shared with another episode?"
            )
        choice = response.choices[0]
        message = choice.message
        calls = _tool_call_dicts(message, episode.index, turn_index)
        assistant: dict[str, Any] = {"role": "assistant", "content": message.content}
        if calls:
            assistant["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls
            ]
        episode.messages.append(assistant)
        turn = AgentTurn(
            index=turn_index,
            experience=recorded[0],
            content=message.content,
            tool_calls=calls,
            finish_reason=choice.finish_reason,
        )
        episode.turns.append(turn)
        if choice.finish_reason == "length":
            episode.stop_reason = "truncated"
            episode.final_text = message.content or ""
            break
        if not calls:
            episode.stop_reason = "final_answer"
            episode.final_text = message.content or ""
            break
        # Tool calls run in order: later calls may depend on earlier ones (move, then take).
        for call in calls:
            result = await episode.toolset.execute(call["name"], call["arguments"])
            turn.tool_results.append(result)
            episode.messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": result.content}
            )
        if is_done is not None and is_done(episode):
            episode.stop_reason = "env_done"
            episode.final_text = message.content or ""
            break
    else:
        episode.stop_reason = "max_turns"
    return episode


# ---------------------------------------------------------------------- argument helpers
def _int_arg(args: Mapping[str, Any], key: str, default: int, who: str, minimum: int = 1) -> int:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{who}: workflow_args.{key} must be an int >= {minimum}, got {value!r}")
    return value


def _float_arg(
    args: Mapping[str, Any], key: str, default: Optional[float], who: str
) -> Optional[float]:
    value = args.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{who}: workflow_args.{key} must be a number > 0, got {value!r}")
    return float(value)


def opening_messages(task: Task, system_prompt: Optional[str], who: str) -> list[dict[str, Any]]:
    """The opening messages of a task row, with the system prompt first.

    The row's ``format.prompt_key`` (a string becomes the user message; a list is taken as the
    messages) or else its ``format.messages_key`` list; a missing prompt names both keys.
    """
    fmt = task.format_args
    row = task.raw_task or {}
    prompt = row.get(fmt.prompt_key) if fmt.prompt_key else None
    if isinstance(prompt, str) and prompt:
        messages = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, list) and prompt:
        messages = [dict(m) for m in prompt]
    elif isinstance(row.get(fmt.messages_key), list) and row[fmt.messages_key]:
        messages = [dict(m) for m in row[fmt.messages_key]]
    else:
        raise MissingTaskFieldError(
            f"{who}: the task row has no prompt: neither {fmt.prompt_key!r} (format.prompt_key, "
            f"a string or a list of messages) nor {fmt.messages_key!r} (format.messages_key, a "
            f"list of messages) is set; the row has keys {sorted(row) or 'none'}"
        )
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise ValueError(
                f"{who}: message {i} of the task row is not a {{'role', 'content'}} dict: {m!r}"
            )
    if system_prompt and messages[0].get("role") != "system":
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def _system_prompt(
    task: Task, workflow_args: Mapping[str, Any], default: Optional[str]
) -> Optional[str]:
    fmt = task.format_args
    row = task.raw_task or {}
    if fmt.system_prompt_key and row.get(fmt.system_prompt_key):
        return str(row[fmt.system_prompt_key])
    return fmt.system_prompt or workflow_args.get("system_prompt") or default


def _isolated_model(model: Any, who: str) -> Any:
    """A clone of the model with its own, enabled history (one per episode / call)."""
    if not hasattr(model, "clone_with_isolated_history") or not hasattr(
        model, "get_openai_async_client"
    ):
        raise TypeError(
            f"{who} drives the model through its OpenAI API and needs a ModelWrapper "
            f"(clone_with_isolated_history, get_openai_async_client); got {type(model).__name__}"
        )
    clone = model.clone_with_isolated_history()
    clone.enable_history = True  # the clone copies the flag; recording is what we need here
    return clone
