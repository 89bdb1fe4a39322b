"""Tool-calling workflows: a ReAct-style agent loop and single-turn tool-call training.

Both talk to the rollout model through its OpenAI-compatible client with ``tools=[...]``, the way
an agent framework would, and train on what the model actually sampled: every chat completion
goes through a clone of the model with its own recorded history
(:meth:`~trinity.common.models.model.ModelWrapper.clone_with_isolated_history`), so each turn's
Experience holds the exact prompt and response token ids and the sampling logprobs, with no
re-tokenization, and concurrent episodes never mix their histories.

The agent loop protocol (:func:`run_agent_loop`), one *turn* per model call:

1. call ``client.chat.completions.create(model=..., messages=..., tools=schemas, n=1)``;
2. append the assistant message (``content`` and, if any, ``tool_calls`` with their ids);
3. a reply cut by the length limit ends the episode (``stop_reason="truncated"``); a reply
   without tool calls is the final answer (``"final_answer"``);
4. otherwise run every tool call in order and append one ``{"role": "tool", "tool_call_id": ...,
   "content": ...}`` message per call; a failing call (unknown tool, arguments that are not JSON,
   missing/unexpected arguments, the tool raising or timing out) becomes an ``Error: ...`` tool
   message for the model to read, never an exception;
5. stop when the environment reports it is finished (``"env_done"``, e.g. a game won), when
   ``max_turns`` model calls were made (``"max_turns"``: no final answer, the reward function
   sees an empty response), or when the server refuses a grown conversation as too long
   (``"context_exceeded"``, after at least one turn); else go to 1.

Workflows:

* :class:`AgentWorkflow` (``agent_workflow``): answer the task's question with registered tools
  (``workflow_args.tools``, default the built-ins of :mod:`trinity.workflows.tools`); the final
  answer is scored by the task's reward function. Subclasses (e.g.
  :class:`~trinity.workflows.envs.text_game.TextGameWorkflow`) swap the tools, the prompt and
  the scoring through small hooks and reuse the loop.
* :class:`ToolCallWorkflow` (``tool_call_workflow``): ToolACE-style training of the tool-call
  format: one call, the produced calls compared with reference calls (:class:`ToolCallRewardFn`).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from trinity.common.config import GenerationConfig
from trinity.common.experience import Experience
from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.common.workflows import WORKFLOWS, MultiTurnWorkflow, Task, Workflow
from trinity.workflows.common import (
    MissingTaskFieldError,
    ResettableWorkflowMixin,
    generation_kwargs,
    require_keys,
)
from trinity.workflows.rewards.base import (
    DEFAULT_REWARD_TIMEOUT,
    RewardResult,
    RewardSpec,
    apply_reward,
    build_reward_fn,
    compute_reward_async,
)
from trinity.workflows.tools import (
    BUILTIN_TOOLS,
    DEFAULT_MAX_TOOL_OUTPUT_CHARS,
    DEFAULT_TOOL_TIMEOUT,
    TOOLS,
    Tool,
    ToolResult,
    ToolSet,
    default_tool_names,
    get_tools,
    make_python_tool,
    parse_tool_schemas,
)
from trinity.workflows.tools import python as builtin_python_tool

__all__ = [
    "AGENT_SYSTEM_PROMPT",
    "STOP_REASONS",
    "TRAJECTORY_MODES",
    "AgentTurn",
    "AgentEpisode",
    "AgentWorkflow",
    "ToolCallWorkflow",
    "ToolCallRewardFn",
    "openai_request_kwargs",
    "opening_messages",
    "parse_reference_calls",
    "run_agent_loop",
    "score_tool_calls",
]

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


# ---------------------------------------------------------------------- AgentWorkflow
@WORKFLOWS.register_module("agent_workflow")
class AgentWorkflow(ResettableWorkflowMixin, MultiTurnWorkflow):
    """Answer a task's question with tools, ReAct-style; reward the final answer.

    Task row: the question (``format.prompt_key``, or a message list under
    ``format.messages_key``), the reference answer (``format.response_key``) and optionally the
    tool schemas to advertise (``format.tools_key``; every schema must name a registered tool —
    the row can describe it in its own words, the registered code runs it).

    ``workflow_args``:

    * ``tools``: registered tool names (default: the built-ins available here, see
      :func:`~trinity.workflows.tools.default_tool_names`); a row's ``tools_key`` wins;
    * ``max_turns`` (8): most model calls per episode;
    * ``trajectory_mode``: ``"per_turn"`` (default) gives one Experience per model call, exactly
      as sampled, all carrying the episode's reward (``eid.run`` = episode, ``eid.step`` = turn);
      ``"whole"`` gives one Experience per episode built from the conversation with the chat
      template, ``action_mask`` 1 on assistant tokens only (logprobs recomputed by the engine);
    * ``sandbox``: :class:`~trinity.workflows.sandbox.SandboxConfig` settings of the ``python``
      tool (e.g. ``{backend: process}`` where bubblewrap cannot run); checked at construction;
    * ``system_prompt``, ``tool_timeout`` (30 s), ``max_tool_output_chars`` (4000),
      ``reward_timeout`` (30 s).

    Reward: ``task.reward_fn`` (default ``accuracy_reward``) called with ``response`` = the final
    answer (``""`` when the episode ended without one), ``truth``, ``prompt``, ``raw_task`` and
    ``messages``. Info on every Experience: ``stop_reason``, ``num_turns``, ``num_tool_calls``,
    ``num_tool_errors`` (also metrics) and, per turn, ``agent_turn``, ``tool_calls``,
    ``tool_errors``.
    """

    can_reset = True
    can_repeat = True
    is_async = True

    #: reward function when the task names none
    default_reward_fn: RewardSpec = "accuracy_reward"
    default_system_prompt: Optional[str] = AGENT_SYSTEM_PROMPT
    default_max_turns: int = 8

    # ------------------------------------------------------------------ setup
    def reset(self, task: Task) -> None:
        """Re-target at ``task``: read the shared loop settings, then :meth:`prepare`."""
        who = self.workflow_name
        self.task = task
        self.format_args = task.format_args
        self.raw_task: dict = dict(task.raw_task or {})
        self.workflow_args: dict = dict(task.workflow_args or {})
        self.reward_fn_args: dict = dict(task.reward_fn_args or {})
        self.rollout_args = task.rollout_args
        self.is_eval = task.is_eval
        self.repeat_times = task.repeat_times or task.rollout_args.n or 1
        args = self.workflow_args
        self.max_turns = _int_arg(args, "max_turns", self.default_max_turns, who)
        self.trajectory_mode = args.get("trajectory_mode", "per_turn")
        if self.trajectory_mode not in TRAJECTORY_MODES:
            raise ValueError(
                f"{who}: workflow_args.trajectory_mode={self.trajectory_mode!r}; allowed: "
                f"{', '.join(TRAJECTORY_MODES)}"
            )
        self.tool_timeout = _float_arg(args, "tool_timeout", DEFAULT_TOOL_TIMEOUT, who)
        self.max_tool_output_chars = _int_arg(
            args, "max_tool_output_chars", DEFAULT_MAX_TOOL_OUTPUT_CHARS, who
        )
        self.reward_timeout = _float_arg(args, "reward_timeout", DEFAULT_REWARD_TIMEOUT, who)
        self.system_prompt = _system_prompt(task, args, self.default_system_prompt)
        self.prepare(task)

    def prepare(self, task: Task) -> None:
        """Task-specific setup (subclasses override): prompt, tools, reward function."""
        who = self.workflow_name
        self.initial_messages = opening_messages(task, self.system_prompt, who)
        self.task_desc = next(
            (str(m.get("content")) for m in reversed(self.initial_messages) if m["role"] == "user"),
            None,
        )
        self.truth = task.truth
        self.tools, self.tool_schemas = self.resolve_tools(task)
        spec = task.reward_fn if task.reward_fn is not None else self.default_reward_fn
        if task.reward_fn is None and self.truth is None:
            require_keys(self.raw_task, {task.format_args.response_key: "format.response_key"}, who)
        self.reward_fn = build_reward_fn(
            spec, self.reward_fn_args, self.auxiliary_model_wrappers or self.auxiliary_models
        )

    def resolve_tools(self, task: Task) -> tuple[list, list[dict[str, Any]]]:
        """The registered tools of this task and the schemas advertised for them."""
        who = self.workflow_name
        row_tools = self.raw_task.get(task.format_args.tools_key)
        if row_tools:
            where = f"{who}: row[{task.format_args.tools_key!r}] (format.tools_key)"
            schemas = parse_tool_schemas(row_tools, where)
            names = [s["function"]["name"] for s in schemas]
            unknown = [n for n in names if n not in TOOLS]
            if unknown:
                raise ValueError(
                    f"{where} names tools that are not registered: {', '.join(unknown)}; "
                    f"registered tools: {', '.join(TOOLS.list())}. Register them with "
                    "@trinity.workflows.tools.register_tool."
                )
            return self._configure_tools(get_tools(names)), schemas
        names = self.workflow_args.get("tools")
        if names is None:
            # a configured sandbox means "I set up python": offer it even if the default can't run
            names = BUILTIN_TOOLS if "sandbox" in self.workflow_args else default_tool_names()
        if isinstance(names, str) or not isinstance(names, (list, tuple)) or not names:
            raise ValueError(
                f"{who}: workflow_args.tools must be a non-empty list of tool names, got "
                f"{names!r}; registered tools: {', '.join(TOOLS.list())}"
            )
        tools = self._configure_tools(get_tools(names))
        return tools, [t.schema for t in tools]

    def _configure_tools(self, tools: list[Tool]) -> list[Tool]:
        """Built-ins with settings: ``python`` runs in ``workflow_args.sandbox``, checked now."""
        configured = []
        for tool in tools:
            if tool is builtin_python_tool:
                try:
                    tool = make_python_tool(self.workflow_args.get("sandbox"))
                except Exception as exc:  # noqa: BLE001 - re-raised with the setting to change
                    raise RuntimeError(
                        f"{self.workflow_name}: the python tool cannot run here: "
                        f"{type(exc).__name__}: {exc}. Configure its sandbox with "
                        "workflow_args.sandbox (a SandboxConfig mapping, e.g. {backend: process})"
                    ) from exc
            configured.append(tool)
        return configured

    # ------------------------------------------------------------------ episode hooks
    def new_episode(self, index: int) -> AgentEpisode:
        """Fresh state for episode ``index``: the opening messages and the tools."""
        toolset = ToolSet(
            self.tools,
            schemas=self.tool_schemas,
            timeout=self.tool_timeout,
            max_output_chars=self.max_tool_output_chars,
        )
        return AgentEpisode(
            index=index, messages=[dict(m) for m in self.initial_messages], toolset=toolset
        )

    def episode_done(self, episode: AgentEpisode) -> bool:
        """Whether the environment ended the episode (the plain agent has no such end)."""
        return False

    async def score_episode(self, episode: AgentEpisode) -> RewardResult:
        """The episode's reward: the task's reward function on the final answer."""
        if episode.stop_reason == "truncated":
            # cut off by the length limit: the answer is incomplete, no credit (as multi-turn)
            return RewardResult(0.0)
        return await compute_reward_async(
            self.reward_fn,
            self.reward_timeout,
            response=episode.final_text,
            truth=self.truth,
            prompt=self.task_desc,
            raw_task=self.raw_task,
            messages=episode.messages,
        )

    def episode_info(self, episode: AgentEpisode) -> dict[str, Any]:
        """Episode-level info shared by all its Experiences (numbers also become metrics)."""
        info: dict[str, Any] = {
            "stop_reason": episode.stop_reason,
            "num_turns": len(episode.turns),
            "num_tool_calls": episode.num_tool_calls,
            "num_tool_errors": episode.num_tool_errors,
        }
        if episode.error:
            info["episode_error"] = episode.error
        return info

    # ------------------------------------------------------------------ running
    async def run_async(self) -> list[Experience]:
        episodes = await asyncio.gather(*(self.run_episode(i) for i in range(self.repeat_times)))
        return [exp for exps in episodes for exp in exps]

    async def run_episode(self, index: int) -> list[Experience]:
        """Play episode ``index`` with its own model clone; its Experiences, rewarded."""
        model = _isolated_model(self.model, self.workflow_name)
        episode = self.new_episode(index)
        await run_agent_loop(
            model,
            episode,
            self.max_turns,
            request_kwargs=openai_request_kwargs(self.rollout_args),
            is_done=self.episode_done,
        )
        result = await self.score_episode(episode)
        run_id = self.run_id_base + index
        info = self.episode_info(episode)
        if self.trajectory_mode == "whole":
            return [await self._whole_experience(episode, result, info, run_id)]
        return [
            self._turn_experience(episode, turn, result, info, run_id) for turn in episode.turns
        ]

    def _turn_experience(
        self,
        episode: AgentEpisode,
        turn: AgentTurn,
        result: RewardResult,
        info: dict[str, Any],
        run_id: int,
    ) -> Experience:
        exp = turn.experience
        exp.eid.run = run_id
        exp.eid.step = turn.index
        apply_reward(exp, result)
        exp.info = {
            **(exp.info or {}),
            **info,
            "agent_turn": turn.index,
            "tool_calls": [
                {"name": c["name"], "arguments": c["arguments"]} for c in turn.tool_calls
            ],
            "tool_errors": turn.tool_errors,
        }
        exp.metrics = {**exp.metrics, **_numeric(info)}
        return exp

    async def _whole_experience(
        self, episode: AgentEpisode, result: RewardResult, info: dict[str, Any], run_id: int
    ) -> Experience:
        messages = list(episode.messages)
        while messages and messages[-1].get("role") != "assistant":
            messages.pop()  # trailing tool output was never read by the model: not trained on
        truncated = any(t.experience.truncate_status == "response_truncated" for t in episode.turns)
        exp = await self.process_messages_to_experience_async(
            messages,
            result.reward,
            info=info,
            truncate_status="response_truncated" if truncated else None,
            tools=episode.toolset.schemas or None,
        )
        exp.eid.run = run_id
        exp.metrics = {
            **exp.metrics,
            **result.components,
            "reward_error": 0.0 if result.error is None else 1.0,
        }
        if result.error is not None:
            exp.info["reward_error"] = result.error
        return exp


def _numeric(info: Mapping[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in info.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


# ---------------------------------------------------------------------- tool-call scoring
def _parse_arguments(arguments: Any) -> Any:
    """Arguments as a dict; JSON text is parsed; unparseable text is returned unchanged."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments


def _as_call(item: Any, where: str) -> dict[str, Any]:
    if isinstance(item, Mapping) and isinstance(item.get("function"), Mapping):
        item = item["function"]
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
        raise ValueError(
            f"{where}: a tool call must be {{'name': ..., 'arguments': {{...}}}}, got {item!r}"
        )
    args = item.get("arguments", item.get("parameters"))
    return {"name": item["name"], "arguments": _parse_arguments(args)}


def parse_reference_calls(
    truth: Any, where: str = "the reference tool calls"
) -> list[dict[str, Any]]:
    """Reference calls as ``[{"name", "arguments": dict}]``.

    Accepts a list of calls or one call, as Python objects or JSON text; a call is
    ``{"name", "arguments"}`` (or ``"parameters"``), or the OpenAI ``{"function": {...}}`` form.
    An empty list means "no tool should be called".
    """
    if truth is None:
        raise ValueError(f"{where} are missing (None)")
    if isinstance(truth, str):
        try:
            truth = json.loads(truth)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} are not valid JSON ({exc}): {truth[:200]!r}") from exc
    if isinstance(truth, Mapping):
        truth = [truth]
    if not isinstance(truth, (list, tuple)):
        raise ValueError(f"{where} must be a list of calls, got {type(truth).__name__}")
    calls = [_as_call(item, where) for item in truth]
    for call in calls:
        if not isinstance(call["arguments"], Mapping):
            raise ValueError(f"{where}: the arguments of {call['name']!r} are not a JSON object")
    return calls


def _values_equal(a: Any, b: Any) -> bool:
    """Argument values equal up to formatting: 3 == 3.0 == "3", strings compared stripped."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(_values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_values_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, str) and isinstance(b, (int, float)):
        a, b = b, a
    if isinstance(a, (int, float)) and isinstance(b, str):
        try:
            return math.isclose(a, float(b.strip()), rel_tol=1e-9, abs_tol=1e-12)
        except ValueError:
            return False
    if isinstance(a, str) and isinstance(b, str):
        return a.strip() == b.strip()
    return a == b


def _pair_score(pred: Mapping[str, Any], ref: Mapping[str, Any], name_weight: float) -> float:
    if pred["name"] != ref["name"]:
        return 0.0
    p_args, r_args = pred["arguments"], ref["arguments"]
    if not isinstance(p_args, Mapping):
        arg_score = 0.0  # arguments that are not a JSON object
    else:
        keys = set(p_args) | set(r_args)
        matched = sum(
            1 for k in keys if k in p_args and k in r_args and _values_equal(p_args[k], r_args[k])
        )
        arg_score = matched / len(keys) if keys else 1.0
    return name_weight + (1.0 - name_weight) * arg_score


def score_tool_calls(
    predicted: Sequence[Mapping[str, Any]],
    reference: Sequence[Mapping[str, Any]],
    name_weight: float = 0.5,
) -> float:
    """Score produced tool calls against reference calls, in ``[0, 1]``.

    * A pair of calls with different names scores 0. With the same name it scores
      ``name_weight + (1 - name_weight) * a``, where ``a`` is the fraction of argument keys
      (union of both calls' keys) present in both with equal values (3 == 3.0 == "3"; strings
      compared after stripping); arguments that are not a JSON object give ``a = 0``.
    * Calls are paired greedily, best pairs first (order does not matter); the total is the
      sum of pair scores divided by ``max(len(predicted), len(reference))``, so missing and
      extra calls both cost.
    * No reference calls: 1 if nothing was called, else 0.

    E.g. reference ``get_weather(city="Paris", unit="C")``: the exact call scores 1, the right
    function with ``unit="F"`` 0.75, another function 0, no call 0.
    """
    if not reference:
        return 1.0 if not predicted else 0.0
    if not predicted:
        return 0.0
    pairs = sorted(
        (
            (_pair_score(p, r, name_weight), i, j)
            for i, p in enumerate(predicted)
            for j, r in enumerate(reference)
        ),
        key=lambda t: -t[0],
    )
    used_p: set[int] = set()
    used_r: set[int] = set()
    total = 0.0
    for score, i, j in pairs:
        if i in used_p or j in used_r:
            continue
        used_p.add(i)
        used_r.add(j)
        total += score
    return total / max(len(predicted), len(reference))


@REWARD_FUNCTIONS.register_module("tool_call_reward")
class ToolCallRewardFn(RewardFn):
    """Reward of :class:`ToolCallWorkflow`: produced vs reference calls (:func:`score_tool_calls`).

    Called with ``tool_calls`` (the produced ``[{"name", "arguments"}]``) and ``truth`` (the
    reference, see :func:`parse_reference_calls`). Returns ``{"tool_call": score}``.

    Args:
        name_weight: credit for calling the right function with wrong arguments (0.5).
    """

    def __init__(self, name_weight: float = 0.5) -> None:
        if (
            isinstance(name_weight, bool)
            or not isinstance(name_weight, (int, float))
            or not 0 <= name_weight <= 1
        ):
            raise ValueError(
                f"tool_call_reward: name_weight must be in [0, 1], got {name_weight!r}"
            )
        self.name_weight = float(name_weight)

    def __call__(  # type: ignore[override]
        self,
        tool_calls: Optional[Sequence[Mapping[str, Any]]] = None,
        truth: Any = None,
        **kwargs: Any,
    ) -> dict[str, float]:
        reference = parse_reference_calls(truth)
        predicted = [_as_call(c, "the produced tool calls") for c in (tool_calls or [])]
        return {"tool_call": score_tool_calls(predicted, reference, self.name_weight)}


# ---------------------------------------------------------------------- ToolCallWorkflow
@WORKFLOWS.register_module("tool_call_workflow")
class ToolCallWorkflow(ResettableWorkflowMixin, Workflow):
    """Single-turn tool-call training (ToolACE style): call the right function, right arguments.

    Task row: the user prompt (``format.prompt_key``: a string, or a list of messages; or a
    message list under ``format.messages_key``), the available tool schemas
    (``format.tools_key``: OpenAI ``{"type": "function", "function": {...}}`` entries or bare
    ``{"name", "description", "parameters"}``, as a list or JSON text; they need not be
    registered tools: nothing is executed) and the reference call(s) (``format.response_key``:
    JSON list of ``{"name", "arguments"}``; ``[]`` = answer without calling a tool).

    The model is called once with ``tools=`` and ``n=repeat_times``; each choice's produced
    calls are scored by ``task.reward_fn`` (default :class:`ToolCallRewardFn`; it receives
    ``tool_calls``, ``truth``, ``response`` = the text content, ``prompt``, ``raw_task``).
    Experiences come from the recorded history (exact tokens and logprobs); ``info`` holds the
    produced ``tool_calls`` and the ``finish_reason``. ``workflow_args``: ``system_prompt``,
    ``reward_timeout``.
    """

    can_reset = True
    can_repeat = True
    is_async = True

    default_reward_fn: RewardSpec = ToolCallRewardFn

    def reset(self, task: Task) -> None:
        who = self.workflow_name
        fmt = task.format_args
        self.task = task
        self.raw_task: dict = dict(task.raw_task or {})
        self.workflow_args: dict = dict(task.workflow_args or {})
        self.rollout_args = task.rollout_args
        self.repeat_times = task.repeat_times or task.rollout_args.n or 1
        self.reward_timeout = _float_arg(
            self.workflow_args, "reward_timeout", DEFAULT_REWARD_TIMEOUT, who
        )
        require_keys(self.raw_task, {fmt.tools_key: "format.tools_key"}, who)
        self.tool_schemas = parse_tool_schemas(
            self.raw_task[fmt.tools_key], f"{who}: row[{fmt.tools_key!r}] (format.tools_key)"
        )
        system_prompt = _system_prompt(task, self.workflow_args, None)
        self.messages = opening_messages(task, system_prompt, who)
        self.task_desc = next(
            (str(m.get("content")) for m in reversed(self.messages) if m["role"] == "user"), None
        )
        self.truth = task.truth
        if task.reward_fn is None:  # the default reward needs valid reference calls
            require_keys(self.raw_task, {fmt.response_key: "format.response_key"}, who)
            parse_reference_calls(
                self.truth, f"{who}: row[{fmt.response_key!r}] (format.response_key)"
            )
        spec = task.reward_fn if task.reward_fn is not None else self.default_reward_fn
        self.reward_fn = build_reward_fn(
            spec,
            task.reward_fn_args,
            self.auxiliary_model_wrappers or self.auxiliary_models,
        )

    async def run_async(self) -> list[Experience]:
        model = _isolated_model(self.model, self.workflow_name)
        client = model.get_openai_async_client()
        response = await client.chat.completions.create(
            model=getattr(client, "model_path", None) or model.model_path,
            messages=self.messages,
            tools=self.tool_schemas,
            n=self.repeat_times,
            **openai_request_kwargs(self.rollout_args),
        )
        recorded = model.extract_experience_from_history()
        if len(recorded) != len(response.choices):
            raise RuntimeError(
                f"{self.workflow_name}: {len(response.choices)} choices but {len(recorded)} "
                "recorded experiences"
            )
        experiences = []
        for i, (choice, exp) in enumerate(zip(response.choices, recorded, strict=True)):
            calls = [
                {"name": c["name"], "arguments": _parse_arguments(c["arguments"])}
                for c in _tool_call_dicts(choice.message, 0, 0)
            ]
            result = await compute_reward_async(
                self.reward_fn,
                self.reward_timeout,
                tool_calls=calls,
                response=choice.message.content or "",
                truth=self.truth,
                prompt=self.task_desc,
                raw_task=self.raw_task,
            )
            apply_reward(exp, result)
            exp.eid.run = self.run_id_base + i
            exp.info = {
                **(exp.info or {}),
                "tool_calls": [
                    {
                        "name": c["name"],
                        "arguments": c["arguments"]
                        if isinstance(c["arguments"], (dict, list, str))
                        else str(c["arguments"]),
                    }
                    for c in calls
                ],
                "finish_reason": choice.finish_reason,
            }
            exp.metrics = {**exp.metrics, "num_tool_calls": float(len(calls))}
            experiences.append(exp)
        return experiences
