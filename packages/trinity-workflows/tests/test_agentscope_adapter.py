"""AgentScope workflows (the ``[agentscope]`` extra) against FakeModelWrapper's OpenAI endpoint.

AgentScope's own chat model and ReAct agent run unchanged; the fake serves the OpenAI API
in-process (scripted replies, ``<tool_call>`` blocks returned as OpenAI ``tool_calls``) and
records every completion with its token ids, so the tests check what a run trains on: exactly
the completions the agent requested, each with the episode's reward. The real vLLM engine path
is in trinity-launcher's ``test_agentscope_real.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pytest

from trinity.common.models.testing import FakeModelWrapper, format_tool_call
from trinity.common.workflows import WORKFLOWS, Task, run_task
from trinity.common.workflows.step_wise_workflow import HistoryDisabledError
from trinity.workflows import _agentscope_mcp
from trinity.workflows.agentscope_adapter import (
    AgentScopeWorkflowAdapter,
    AgentScopeWorkflowAdapterV1,
)
from trinity.workflows.agentscope_react import (
    AgentScopeReactMathWorkflow,
    AgentScopeReActWorkflow,
    GSM8KRewardFn,
    gsm8k_answer,
)
from trinity.workflows.envs.base import EnvironmentNotInstalledError

#: the registry and the install hint are checked without agentscope too; the runs need it
needs_agentscope = pytest.mark.skipif(
    importlib.util.find_spec("agentscope") is None,
    reason="the [agentscope] extra is not installed",
)
SANDBOX = {"backend": "process", "wall_time_s": 20}
NAMES = {
    "agentscope_workflow_adapter": AgentScopeWorkflowAdapter,
    "agentscope_workflow_adapter_v1": AgentScopeWorkflowAdapterV1,
    "agentscope_react_workflow": AgentScopeReActWorkflow,
    "as_react_workflow": AgentScopeReActWorkflow,
    "agentscope_react_math_workflow": AgentScopeReactMathWorkflow,
}


def model(responses=None, **kwargs) -> FakeModelWrapper:
    return FakeModelWrapper(responses, enable_history=True, **kwargs)


def text_of(content) -> str:
    """A message's text: AgentScope's formatter sends content as a list of text blocks."""
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content or [])


def last_user_text(messages) -> str:
    return next(text_of(m["content"]) for m in reversed(messages) if m["role"] == "user")


# ---------------------------------------------------------------------- workflow functions
async def ask_once(task: dict, model: Any) -> Any:
    """An agent of one model call; the reply is judged by ``judge_contains``."""
    from agentscope.model import ChatModelBase
    from agentscope.tuner import WorkflowOutput

    assert isinstance(model, ChatModelBase)
    reply = await model([{"role": "user", "content": task["question"]}])
    text = "".join(block.get("text", "") for block in reply.content)
    return WorkflowOutput(response=text, metrics={"calls": 1.0})


async def judge_contains(task: dict, response: str, auxiliary_models, logger) -> Any:
    from agentscope.tuner import JudgeOutput

    assert logger is not None and set(auxiliary_models) == {"judge"}
    verdict = await auxiliary_models["judge"]([{"role": "user", "content": "Right?"}])
    ok = task["answer"] in response and verdict.content[0]["text"] == "yes"
    return JudgeOutput(reward=1.0 if ok else 0.0, metrics={"judged": 1.0})


async def two_calls_own_reward(task: dict, model: Any) -> Any:
    from agentscope.tuner import WorkflowOutput

    for _ in range(2):
        await model([{"role": "user", "content": task["question"]}])
    return WorkflowOutput(reward=0.5)


def v1_task(**workflow_args) -> Task:
    return Task(
        workflow="agentscope_workflow_adapter_v1",
        raw_task={"question": "What is 6 * 7?", "answer": "42"},
        workflow_args=workflow_args,
        rollout_args={"temperature": 0.7, "max_tokens": 64, "logprobs": 2},
    )


# ---------------------------------------------------------------------- registration
@pytest.mark.parametrize("name", sorted(NAMES))
def test_names_resolve_to_the_adapters(name):
    assert WORKFLOWS.get(name) is NAMES[name]


@pytest.mark.parametrize("name", sorted(NAMES))
def test_without_agentscope_building_fails_with_the_install_command(name, monkeypatch):
    loaded = [m for m in sys.modules if m.startswith("agentscope.")]
    for module in ["agentscope", *loaded]:
        monkeypatch.setitem(sys.modules, module, None)  # "import agentscope(.x)" now fails
    task = Task(
        workflow=name, raw_task={"question": "q"}, workflow_args={"workflow_func": ask_once}
    )
    with pytest.raises(EnvironmentNotInstalledError) as info:  # an ImportError
        task.to_workflow(model())
    message = str(info.value)
    assert f"{NAMES[name].__name__} needs the Python module 'agentscope" in message
    assert message.endswith("Install it with: pip install 'trinity-workflows[agentscope]'")


@needs_agentscope
def test_agentscope_imports_next_to_mcp_2_and_its_http_mcp_client_says_why_it_cannot():
    from mcp.client import streamable_http

    stand_in = streamable_http.streamablehttp_client
    if hasattr(streamable_http, "streamable_http_client"):  # MCP SDK 2.x: the bridge's stand-in
        assert stand_in is _agentscope_mcp._unavailable_streamablehttp_client
        with pytest.raises(RuntimeError, match=r"needs? an environment with mcp<2"):
            stand_in("http://127.0.0.1:1/mcp", headers={})
    assert _agentscope_mcp.bridge_mcp_for_agentscope() is False  # idempotent


# ---------------------------------------------------------------------- adapter v1
@needs_agentscope
def test_v1_trains_on_every_completion_the_agent_requested_with_the_judges_reward():
    policy = model("The answer is 42.", model_path="policy")
    judge = model("yes", model_path="judge-model", model_name="judge")
    task = v1_task(workflow_func=ask_once, judge_func=judge_contains)
    task.repeat_times = 2
    exps = run_task(task, policy, auxiliary_models=[judge], concurrent_mode="asynchronous")

    assert len(exps) == 2 and sorted(e.eid.run for e in exps) == [0, 1]
    requests = policy.calls_of("openai.chat.completions")
    assert len(requests) == 2
    for request in requests:
        # the task's rollout_args reach the engine; logprobs are requested for training
        assert request.kwargs["temperature"] == 0.7 and request.kwargs["max_tokens"] == 64
        assert request.kwargs["logprobs"] is True and request.kwargs["top_logprobs"] == 2
        assert request.messages == [{"role": "user", "content": "What is 6 * 7?"}]
    for exp in exps:
        assert exp.reward == 1.0
        assert exp.response_text == "The answer is 42."
        assert exp.logprobs.shape == (len(exp.tokens) - exp.prompt_length,)
        assert exp.metrics["calls"] == 1.0 and exp.metrics["judged"] == 1.0
    # the judge ran on the auxiliary model, which records nothing into the policy's runs
    assert len(judge.calls_of("openai.chat.completions")) == 2


@needs_agentscope
def test_v1_without_a_judge_takes_the_workflow_reward_and_puts_metrics_on_the_last_exp():
    async def with_metrics(task, model, logger):
        out = await two_calls_own_reward(task, model)
        out.metrics = {"turns": 2.0}
        return out

    exps = run_task(v1_task(workflow_func=with_metrics), model("ok"))
    assert [e.reward for e in exps] == [0.5, 0.5]
    assert "turns" not in exps[0].metrics and exps[1].metrics["turns"] == 2.0


@needs_agentscope
def test_v1_names_its_functions_by_module_path_in_yaml_configs():
    path = f"{__name__}:two_calls_own_reward"
    workflow = v1_task(workflow_func=path).to_workflow(model("ok"))
    assert workflow.workflow_func is two_calls_own_reward
    with pytest.raises(ValueError, match="is not 'module:function'"):
        v1_task(workflow_func="nodots").to_workflow(model("ok"))


@needs_agentscope
def test_v1_refuses_bad_setups_before_running_and_bad_outputs_after():
    with pytest.raises(ValueError, match="needs workflow_args.workflow_func"):
        v1_task().to_workflow(model())
    with pytest.raises(HistoryDisabledError, match="enable_history: true"):
        v1_task(workflow_func=ask_once).to_workflow(FakeModelWrapper("x"))

    async def returns_float(task, model):
        return 1.0

    async def no_reward(task, model):
        from agentscope.tuner import WorkflowOutput

        return WorkflowOutput(response="x")

    async def bad_judge(task, response):
        return 1.0

    with pytest.raises(ValueError, match="must return an agentscope.tuner.WorkflowOutput"):
        run_task(v1_task(workflow_func=returns_float), model())
    with pytest.raises(ValueError, match="WorkflowOutput.reward is None"):
        run_task(v1_task(workflow_func=no_reward), model())
    with pytest.raises(ValueError, match="must return an agentscope.tuner.JudgeOutput"):
        run_task(v1_task(workflow_func=no_reward, judge_func=bad_judge), model())


# ---------------------------------------------------------------------- adapter v0
@needs_agentscope
def test_v0_hands_a_trinity_chat_model_and_rewards_with_the_returned_number():
    seen = {}

    async def v0_func(task, chat_model) -> float:
        seen["model"] = chat_model
        await chat_model([{"role": "user", "content": task["question"]}])
        return 0.25

    task = v1_task(workflow_func=v0_func)
    task.workflow = "agentscope_workflow_adapter"
    exps = run_task(task, model("forty-two"))
    from agentscope.model import TrinityChatModel

    assert isinstance(seen["model"], TrinityChatModel)
    assert [e.reward for e in exps] == [0.25] and exps[0].response_text == "forty-two"


# ---------------------------------------------------------------------- ReAct workflows
def gsm8k_task(workflow: str, **workflow_args) -> Task:
    return Task(
        workflow=workflow,
        raw_task={"question": "Tom has 6 bags of 7 apples. How many?", "answer": "... #### 42"},
        format_args={"prompt_key": "question", "response_key": "answer"},
        workflow_args=workflow_args,
        rollout_args={"temperature": 1.0, "max_tokens": 128},
    )


def test_gsm8k_reward_reads_the_structured_result_and_the_marked_answer():
    assert gsm8k_answer("6 * 7 = 42\n#### 42") == "42" and gsm8k_answer(42) == "42"
    reward = GSM8KRewardFn()(response={"result": "so \\boxed{42}"}, truth="x #### 42")
    assert reward == {"accuracy": 1.0, "format_score": 0.0}
    assert GSM8KRewardFn()(response={}, truth="#### 42")["accuracy"] == 0.0


@needs_agentscope
@pytest.mark.parametrize("name", ["as_react_workflow", "agentscope_react_workflow"])
def test_react_workflow_answers_in_a_structured_reply_and_is_scored_on_it(name):
    reply = "Six bags of seven: 42. " + format_tool_call(
        "generate_response", {"result": "\\boxed{42}"}
    )
    policy = model(reply)
    exps = run_task(gsm8k_task(name), policy)

    (request,) = policy.calls_of("openai.chat.completions")
    tools = {t["function"]["name"] for t in request.kwargs["tools"]}
    assert "generate_response" in tools  # AgentScope's structured-output tool
    assert "reset_equipped_tools" in tools  # its meta tool, as in Trinity-RFT 0.6
    assert request.kwargs["tool_choice"] == "required"
    assert last_user_text(request.messages) == "Tom has 6 bags of 7 apples. How many?"
    (exp,) = exps
    assert exp.reward == 1.0
    assert exp.metrics["accuracy"] == 1.0 and exp.metrics["format_score"] == 0.0
    assert exp.metrics["react_memory_length"] >= 2


@needs_agentscope
def test_react_workflow_refuses_an_unknown_task_type():
    with pytest.raises(ValueError, match="no template for workflow_args.type='alfworld'"):
        gsm8k_task("as_react_workflow", type="alfworld").to_workflow(model())


def react_math_policy(messages, sample_index):
    """Run Python first, then answer with what it printed."""
    tool_results = [m for m in messages if m["role"] == "tool"]
    if not tool_results:
        return "Let me compute. " + format_tool_call("execute_python_code", {"code": "print(6*7)"})
    output = text_of(tool_results[-1]["content"])
    stdout = output.split("<stdout>")[1].split("</stdout>")[0].strip()
    return f"It printed {stdout}. " + format_tool_call(
        "generate_response", {"result": f"\\boxed{{{stdout}}}"}
    )


@needs_agentscope
def test_react_math_workflow_runs_python_in_the_sandbox_and_rewards_every_step():
    policy = model(react_math_policy)
    task = gsm8k_task("agentscope_react_math_workflow", sandbox=SANDBOX)
    task.repeat_times = 2
    exps = run_task(task, policy)

    assert len(exps) == 4  # two runs of two completions (the tool call, the answer)
    for run in (0, 1):
        steps = sorted((e for e in exps if e.eid.run == run), key=lambda e: e.eid.step)
        assert [e.eid.step for e in steps] == [0, 1]
        assert all(e.reward == 1.0 for e in steps)
        assert steps[0].response_text == "Let me compute."  # the tool call became tool_calls
    second = policy.calls_of("openai.chat.completions")[1]
    (tool_msg,) = [m for m in second.messages if m["role"] == "tool"]
    assert "<returncode>0</returncode><stdout>42\n</stdout>" in text_of(tool_msg["content"])


@needs_agentscope
def test_react_math_workflow_is_reused_for_the_next_task_with_a_fresh_agent():
    policy = model(react_math_policy)
    first = gsm8k_task("agentscope_react_math_workflow", sandbox=SANDBOX)
    workflow = first.to_workflow(policy)
    agent = workflow.agent
    second = gsm8k_task("agentscope_react_math_workflow", sandbox=SANDBOX)
    second.raw_task = {"question": "What is 40 + 2?", "answer": "42"}
    workflow.reset(second)
    assert workflow.agent is not agent and workflow.task_desc == "What is 40 + 2?"
    assert workflow.answer == "42"


@needs_agentscope
def test_react_math_workflow_names_workflow_args_sandbox_when_the_sandbox_cannot_run():
    from trinity.workflows.sandbox import SandboxUnavailableError

    bad = {"backend": "bwrap", "bwrap_path": "/nonexistent/bwrap"}
    with pytest.raises(SandboxUnavailableError, match="workflow_args.sandbox"):
        gsm8k_task("agentscope_react_math_workflow", sandbox=bad).to_workflow(model())
