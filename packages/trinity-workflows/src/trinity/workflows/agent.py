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
from collections.abc import Mapping
from typing import Any, Optional

from trinity.common.experience import Experience
from trinity.common.workflows import WORKFLOWS, MultiTurnWorkflow, Task, Workflow

# The loop, its records and helpers (agent_loop) and the tool-call scoring (agent_scoring) live
# beside this module; re-exported here so that old import paths keep working.
from trinity.workflows.agent_loop import (  # noqa: F401
    _OPENAI_PARAMS,
    AGENT_SYSTEM_PROMPT,
    STOP_REASONS,
    TRAJECTORY_MODES,
    AgentEpisode,
    AgentTurn,
    _float_arg,
    _int_arg,
    _isolated_model,
    _system_prompt,
    _tool_call_dicts,
    openai_request_kwargs,
    opening_messages,
    run_agent_loop,
)
from trinity.workflows.agent_scoring import (  # noqa: F401
    ToolCallRewardFn,
    _as_call,
    _pair_score,
    _parse_arguments,
    _values_equal,
    parse_reference_calls,
    score_tool_calls,
)
from trinity.workflows.common import (
    ResettableWorkflowMixin,
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


# ---------------------------------------------------------------------- ToolCallWorkflow
@WORKFLOWS.register_module("toolcall_workflow")  # Trinity-RFT's name before 0.6 (toolace.yaml)
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
