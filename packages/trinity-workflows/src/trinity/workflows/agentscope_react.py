"""AgentScope ReAct agents solving math problems (Trinity-RFT 0.6's AgentScope examples).

* ``agentscope_react_workflow`` / ``as_react_workflow`` (:class:`AgentScopeReActWorkflow`): a
  ReAct agent with AgentScope's meta tool and no other tools answers ``task[prompt_key]`` in a
  structured reply; ``workflow_args.type`` picks the template (prompt, reply schema, reward),
  only ``gsm8k`` so far, whose reward function reads ``reward_fn_args``.
* ``agentscope_react_math_workflow`` (:class:`AgentScopeReactMathWorkflow`): a ReAct agent that
  may run Python (``execute_python_code``), scored by ``\\boxed{}`` accuracy against
  ``task[response_key]`` (GSM8K's ``#### answer`` understood).

Not here: ``agentscopev0_react_math_workflow`` (AgentScope's 0.x API, which agentscope 1.0
removed; the launcher refuses the name as not supported) and
``agentscope_v1_react_search_workflow`` (its search tools are MCP servers, and agentscope 1.0.x's
MCP clients do not work with the MCP SDK 2.x that vLLM requires, see ``_agentscope_mcp``).

The agent talks to the rollout model through its OpenAI client and every completion it requests
becomes an Experience (``explorer.rollout_model.enable_history`` and ``enable_openai_api`` on),
all rewarded with the episode's reward. Python runs in :class:`trinity.workflows.sandbox.CodeSandbox`
(``workflow_args.sandbox``, e.g. ``{backend: process}`` where bubblewrap cannot run), not in a
plain subprocess as in Trinity-RFT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from pydantic import BaseModel, Field

from trinity.common.experience import Experience
from trinity.common.rewards import RewardFn
from trinity.common.workflows import Task, Workflow
from trinity.workflows.agentscope_support import (
    import_agentscope,
    openai_chat_model,
    require_history,
    rollout_generate_kwargs,
)
from trinity.workflows.rewards.math import MathBoxedRewardFn

__all__ = [
    "AgentScopeReActWorkflow",
    "AgentScopeReactMathWorkflow",
    "GSM8KResponseStructure",
    "GSM8KRewardFn",
    "TEMPLATE_MAP",
    "Template",
    "gsm8k_answer",
]

MATH_SYSTEM_PROMPT = (
    "You solve math problems. You may write Python code and run it to calculate or to check "
    "your work. Give the final answer inside \\boxed{}."
)


class GSM8KResponseStructure(BaseModel):
    """The agent's structured reply to a GSM8K problem."""

    result: str = Field(
        description="The solution, with the final answer in boxed form, e.g. \\boxed{42}."
    )


def gsm8k_answer(truth: Any) -> str:
    """The reference answer: the text after GSM8K's ``####`` marker, else ``truth`` itself."""
    if isinstance(truth, str) and "####" in truth:
        return truth.split("####")[1].strip()
    return str(truth)


class GSM8KRewardFn(MathBoxedRewardFn):
    """``\\boxed{}`` accuracy of the structured reply's ``result`` (no ``<think>`` required)."""

    def __call__(  # type: ignore[override]
        self,
        response: dict,
        truth: Any,
        format_score_coef: float = 0.1,
        **kwargs: Any,
    ) -> dict[str, float]:
        return super().__call__(
            response=str((response or {}).get("result", "")),
            truth=gsm8k_answer(truth),
            with_think=False,
            format_score_coef=format_score_coef,
            **kwargs,
        )


@dataclass
class Template:
    """What a task type needs: the agent's prompt, its reply schema and the reward function."""

    system_prompt: str
    response_structure: type[BaseModel]
    reward_fn_cls: type[RewardFn]


TEMPLATE_MAP: dict[str, Optional[Template]] = {
    "gsm8k": Template(
        system_prompt=MATH_SYSTEM_PROMPT,
        response_structure=GSM8KResponseStructure,
        reward_fn_cls=GSM8KRewardFn,
    ),
}


def _react_agent(name: str, prompt: str, chat_model: Any, workflow: str, **options: Any) -> Any:
    """An AgentScope ``ReActAgent`` over ``chat_model``, quiet on the console (its messages
    would interleave across the concurrent runs of a runner)."""
    agent_mod = import_agentscope(workflow, "agentscope.agent")
    formatter_mod = import_agentscope(workflow, "agentscope.formatter")
    agent = agent_mod.ReActAgent(
        name=name,
        sys_prompt=prompt,
        model=chat_model,
        formatter=formatter_mod.OpenAIChatFormatter(),
        **options,
    )
    agent.set_console_output_enabled(False)
    return agent


def _reward_value(reward: Union[float, dict[str, float]]) -> float:
    return float(sum(reward.values())) if isinstance(reward, dict) else float(reward)


def _final_answer(reply: Any) -> str:
    """The agent's answer: the structured ``result`` when it produced one, else its text."""
    metadata = getattr(reply, "metadata", None)
    if isinstance(metadata, dict) and "result" in metadata:
        return str(metadata["result"])
    content = getattr(reply, "content", reply)
    if isinstance(content, dict) and "result" in content:
        return str(content["result"])
    get_text = getattr(reply, "get_text_content", None)
    text = get_text() if callable(get_text) else None
    return text if text is not None else str(content)


class AgentScopeReActWorkflow(Workflow):
    """One ReAct episode per run, with the template of ``workflow_args.type`` (``gsm8k``)."""

    is_async: bool = True

    def __init__(
        self,
        *,
        task: Task,
        model: Any,
        auxiliary_models: Optional[list[Any]] = None,
    ) -> None:
        name = type(self).__name__
        import_agentscope(name)
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        task_type = (task.workflow_args or {}).get("type", "gsm8k")
        template = TEMPLATE_MAP.get(task_type)
        if template is None:
            raise ValueError(
                f"{name}: no template for workflow_args.type={task_type!r} (known: "
                f"{', '.join(sorted(k for k, v in TEMPLATE_MAP.items() if v))}); add one to "
                "trinity.workflows.agentscope_react.TEMPLATE_MAP"
            )
        require_history(self)
        self.template = template
        raw = task.raw_task or {}
        self.query = raw.get(task.format_args.prompt_key)
        self.answer = raw.get(task.format_args.response_key)
        self.reward_fn = template.reward_fn_cls(**(task.reward_fn_args or {}))
        self.model_client = model.get_openai_async_client()
        chat_model = openai_chat_model(
            self.model_client,
            rollout_generate_kwargs(task, model, logprobs=False, top_p=False),
            name,
        )
        # AgentScope's meta tool lets the agent equip tool groups itself; none are preset
        self.agent = _react_agent(
            "react_agent", template.system_prompt, chat_model, name, enable_meta_tool=True
        )

    async def run_async(self) -> list[Experience]:
        """Ask the agent, score its structured reply, reward the recorded completions."""
        msg_mod = import_agentscope(type(self).__name__, "agentscope.message")
        await self.agent.memory.clear()  # a run is one episode, also on a reused instance
        reply = await self.agent.reply(
            msg_mod.Msg("user", self.query, role="user"),
            structured_model=self.template.response_structure,
        )
        reward = await self.calculate_reward(reply.metadata or {})
        return self.construct_experiences(reward)

    async def calculate_reward(self, response: dict) -> Union[float, dict[str, float]]:
        """The template's reward of the structured reply (a number or named components)."""
        return self.reward_fn(response=response, truth=self.answer)

    def construct_experiences(self, reward: Union[float, dict[str, float]]) -> list[Experience]:
        """Every recorded completion with the summed reward; the components go to metrics."""
        exps = self.model.extract_experience_from_history()
        memory_length = len(self.agent.memory.content)
        for exp in exps:
            exp.reward = _reward_value(reward)
            exp.metrics = {**(exp.metrics or {}), "react_memory_length": memory_length}
            if isinstance(reward, dict):
                exp.metrics.update(reward)
        return exps


class AgentScopeReactMathWorkflow(Workflow):
    """A ReAct agent with a Python tool solving ``task_desc``; reward = ``\\boxed{}`` accuracy.

    Resettable: the next task gets a new agent (empty memory) over the same chat model.
    """

    can_reset: bool = True
    is_async: bool = True

    def __init__(
        self,
        *,
        task: Task,
        model: Any,
        auxiliary_models: Optional[list[Any]] = None,
    ) -> None:
        name = type(self).__name__
        import_agentscope(name)
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        require_history(self)
        self.openai_async_client = model.get_openai_async_client()
        self.model_name = self.openai_async_client.model_path
        self.agent_model = openai_chat_model(
            self.openai_async_client,
            rollout_generate_kwargs(task, model, logprobs=False, top_p=False),
            name,
        )
        self.reward_fn = MathBoxedRewardFn()
        self.reset(task)

    def reset(self, task: Task) -> None:
        """Target ``task``: a fresh agent and toolkit (the sandbox is checked here)."""
        name = type(self).__name__
        tool_mod = import_agentscope(name, "agentscope.tool")
        memory_mod = import_agentscope(name, "agentscope.memory")
        self.task = task
        self.system_prompt = MATH_SYSTEM_PROMPT
        self.toolkit = tool_mod.Toolkit()
        self.toolkit.register_tool_function(
            sandboxed_python_tool((task.workflow_args or {}).get("sandbox"))
        )
        self.agent = _react_agent(
            "math_react_agent",
            self.system_prompt,
            self.agent_model,
            name,
            toolkit=self.toolkit,
            memory=memory_mod.InMemoryMemory(),
        )
        self.raw_task = task.raw_task
        self.task_desc = task.task_desc
        self.truth = task.truth
        self.answer = gsm8k_answer(self.truth)

    async def run_async(self) -> list[Experience]:
        """One episode; each recorded completion is one step (``eid.step``) with the reward."""
        msg_mod = import_agentscope(type(self).__name__, "agentscope.message")
        await self.agent.memory.clear()  # a run is one episode, also on a reused instance
        reply = await self.agent.reply(
            msg_mod.Msg("user", self.task_desc, role="user"),
            structured_model=GSM8KResponseStructure,
        )
        reward = _reward_value(self.reward_fn(_final_answer(reply), self.answer))
        exps = self.model.extract_experience_from_history(clear_history=True)
        memory_length = len(self.agent.memory.content)
        for step, exp in enumerate(exps):
            exp.eid.step = step
            exp.reward = reward
            exp.metrics = {**(exp.metrics or {}), "react_memory_length": memory_length}
        return exps


def sandboxed_python_tool(sandbox: Any = None) -> Any:
    """AgentScope's ``execute_python_code`` tool, run in Trinity's code sandbox.

    Same name, argument and reply layout (``<returncode>``, ``<stdout>``, ``<stderr>``) as
    AgentScope's own tool, which runs model-written code as a plain subprocess of the explorer;
    time and memory limits come from ``sandbox`` (a ``SandboxConfig`` mapping) instead of a
    ``timeout`` argument.
    """
    from trinity.workflows.sandbox import CodeSandbox, SandboxUnavailableError

    try:
        box = CodeSandbox(sandbox)  # checked now, at build time, not at every tool call
    except SandboxUnavailableError as exc:
        raise SandboxUnavailableError(
            f"execute_python_code cannot run here ({exc}). Configure its sandbox with "
            "workflow_args.sandbox (a SandboxConfig mapping, e.g. {backend: process})"
        ) from exc
    message_mod = import_agentscope("execute_python_code", "agentscope.message")
    tool_mod = import_agentscope("execute_python_code", "agentscope.tool")

    async def execute_python_code(code: str) -> Any:
        """Run a Python program and return its exit code, standard output and error.

        Print what you want to see: only the output is returned.

        Args:
            code (`str`): The complete Python program to run.
        """
        result = await box.run_async(code)
        returncode = result.exit_code if result.exit_code is not None else -1
        stderr = result.stderr if result.ok else f"{result.stderr}\n[{result.reason}]".lstrip()
        text = (
            f"<returncode>{returncode}</returncode>"
            f"<stdout>{result.stdout}</stdout><stderr>{stderr}</stderr>"
        )
        return tool_mod.ToolResponse(content=[message_mod.TextBlock(type="text", text=text)])

    return execute_python_code
