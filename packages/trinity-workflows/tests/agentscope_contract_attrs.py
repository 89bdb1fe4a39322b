"""Contract-kit settings of the AgentScope workflows, for test_contract_kit.py's WORKFLOW_ATTRS.

Kept apart (not a test module) so the agent functions the adapters run are importable by module
path, as a YAML config names them: ``agentscope_contract_attrs:answer``. Every entry needs the
``[agentscope]`` extra (its rules skip without it) and a model that records its history.
"""

from __future__ import annotations

from typing import Any

from trinity.common.models.testing import format_tool_call

QUESTION = {"question": "What is 2+2?", "answer": "#### 4"}
OTHER = {"question": "What is 3+3?", "answer": "#### 6"}
KEYS = {"prompt_key": "question", "response_key": "answer"}
SANDBOX = {"backend": "process", "wall_time_s": 20}  # no tool is called; built all the same


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content or [])


def _question(messages: list) -> str:
    return next(_text(m["content"]) for m in messages if m["role"] == "user")


def solver(messages: list, sample_index: int) -> str:
    """Answers from the question (so concurrent runs get what sequential ones get), in the
    structured reply the ReAct agents ask for; a plain model call gets the same text."""
    answer = "4" if "2+2" in _question(messages) else "5"
    return f"It is {answer}. " + format_tool_call(
        "generate_response", {"result": f"\\boxed{{{answer}}}"}
    )


async def answer(task: dict, model: Any) -> Any:
    """An AgentScope tuner workflow function: one model call, scored by ``judge``."""
    from agentscope.tuner import WorkflowOutput

    reply = await model([{"role": "user", "content": task["question"]}])
    return WorkflowOutput(response=_text(reply.content), metrics={"calls": 1.0})


async def judge(task: dict, response: str) -> Any:
    from agentscope.tuner import JudgeOutput

    return JudgeOutput(reward=1.0 if task["answer"].split()[-1] in response else 0.0)


async def answer_v0(task: dict, model: Any) -> float:
    """The deprecated adapter's function: the reward is its return value."""
    reply = await model([{"role": "user", "content": task["question"]}])
    return 1.0 if task["answer"].split()[-1] in _text(reply.content) else 0.0


def _attrs(workflow_args: dict) -> dict:
    return {
        "task_args": {"raw_task": QUESTION, "format_args": KEYS, "workflow_args": workflow_args},
        "other_task_args": {
            "raw_task": OTHER,
            "format_args": KEYS,
            "workflow_args": workflow_args,
        },
        "responses": solver,
        "model_args": {"enable_history": True},
        "requires": ("agentscope",),
    }


AGENTSCOPE_WORKFLOW_ATTRS: dict[str, dict] = {
    "agentscope_workflow_adapter_v1": _attrs(
        {"workflow_func": f"{__name__}:answer", "judge_func": f"{__name__}:judge"}
    ),
    "agentscope_workflow_adapter": _attrs({"workflow_func": f"{__name__}:answer_v0"}),
    "agentscope_react_workflow": _attrs({"type": "gsm8k"}),
    "as_react_workflow": _attrs({"type": "gsm8k"}),
    "agentscope_react_math_workflow": _attrs({"sandbox": SANDBOX}),
}
