"""Tool-calling workflows, driven through the model's real OpenAI client against FakeModelWrapper.

The fake serves an OpenAI-compatible API in-process: a scripted reply containing
``<tool_call>{...}</tool_call>`` comes back as OpenAI ``tool_calls``, and every completion is
recorded with its exact token ids and logprobs, so these tests check the real agent protocol
(tool messages with ids, what the model reads back) and the exact trained tokens.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading

import pytest
import torch

from trinity.common.experience import Experience
from trinity.common.models.testing import FakeModelWrapper, format_tool_call
from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.common.workflows import WORKFLOWS, Task, run_task
from trinity.workflows.agent import (
    AgentWorkflow,
    ToolCallRewardFn,
    ToolCallWorkflow,
    openai_request_kwargs,
    parse_reference_calls,
    score_tool_calls,
)
from trinity.workflows.common import MissingTaskFieldError
from trinity.workflows.tools import (
    TOOLS,
    Tool,
    ToolError,
    ToolSet,
    default_tool_names,
    evaluate_arithmetic,
    register_tool,
)

END = "<|end|>"


class ContainsTruth(RewardFn):
    """1 when the reference answer appears in the final answer."""

    def __call__(self, response: str, truth: str, **kwargs) -> dict:
        return {"accuracy": 1.0 if truth and str(truth) in (response or "") else 0.0}


def calculator_policy(expression: str = "12*7+5"):
    """First reply: a calculator call. Then: the answer read from the last tool message."""

    def policy(messages, sample_index):
        tool_messages = [m for m in messages if m["role"] == "tool"]
        if not tool_messages:
            return format_tool_call("calculator", {"expression": expression})
        return f"The answer is {tool_messages[-1]['content']}."

    return policy


def agent_task(**kwargs) -> Task:
    settings = {
        "workflow": "agent_workflow",
        "raw_task": {"prompt": "What is 12*7+5?", "response": "89"},
        "reward_fn": ContainsTruth,
        "workflow_args": {"tools": ["calculator"]},
    }
    settings.update(kwargs)
    return Task(**settings)


def response_text(model: FakeModelWrapper, exp) -> str:
    return model.tokenizer.decode(exp.tokens[exp.prompt_length :])


@pytest.fixture
def scratch_tools():
    """Register test tools under unique names and remove them afterwards."""
    names: list[str] = []

    def register(name: str, **kwargs):
        names.append(name)
        return register_tool(name, **kwargs)

    yield register
    for name in names:
        TOOLS.unregister(name)


# ---------------------------------------------------------------------- the agent loop
def test_agent_solves_arithmetic_with_calculator_exact_tokens_per_turn():
    model = FakeModelWrapper(responses=calculator_policy())
    exps = run_task(agent_task(), model)

    assert len(exps) == 2
    first, second = exps
    assert [e.eid.step for e in exps] == [0, 1]
    assert [e.eid.run for e in exps] == [0, 0]
    assert [e.reward for e in exps] == [1.0, 1.0]
    # exactly the sampled tokens, no re-tokenization
    assert (
        response_text(model, first)
        == format_tool_call("calculator", {"expression": "12*7+5"}) + END
    )
    assert response_text(model, second) == "The answer is 89." + END
    for exp in exps:
        assert exp.action_mask.dtype == torch.bool and bool(exp.action_mask.all())
        assert exp.action_mask.shape[0] == exp.tokens.shape[0] - exp.prompt_length
        expected = model.token_logprobs(exp.tokens.tolist(), 1.0)[exp.prompt_length - 1 :]
        assert torch.allclose(exp.logprobs, expected)
    # the model read the tool's result, under the schema it was offered
    prompt_1 = model.tokenizer.decode(second.tokens[: second.prompt_length])
    assert "<|tool|>89" + END in prompt_1
    assert prompt_1.startswith("<|tools|>") and '"calculator"' in prompt_1
    # second prompt extends the first turn exactly
    assert second.tokens[: first.tokens.shape[0]].tolist() == first.tokens.tolist()
    request = model.calls_of("openai.chat.completions")[1]
    assistant, tool = request.messages[-2], request.messages[-1]
    assert assistant["tool_calls"][0]["function"]["name"] == "calculator"
    assert tool == {
        "role": "tool",
        "tool_call_id": assistant["tool_calls"][0]["id"],
        "content": "89",
    }
    assert request.kwargs["tools"][0]["function"]["name"] == "calculator"
    # episode info and metrics
    assert first.info["stop_reason"] == second.info["stop_reason"] == "final_answer"
    assert first.info["num_tool_calls"] == 1 and first.info["num_tool_errors"] == 0
    assert first.info["tool_calls"] == [
        {"name": "calculator", "arguments": json.dumps({"expression": "12*7+5"})}
    ]
    assert second.info["tool_calls"] == [] and second.info["agent_turn"] == 1
    assert first.metrics["accuracy"] == 1.0 and first.metrics["reward_error"] == 0.0
    assert first.metrics["num_turns"] == 2.0
    assert model.history == []  # the episode used its own clone's history
    # what the buffer stores round-trips (info is JSON, tensors safetensors)
    restored = Experience.deserialize_many(Experience.serialize_many(exps))
    assert restored[0].info == first.info and restored[1].tokens.tolist() == second.tokens.tolist()


def test_conversation_too_long_for_the_model_ends_the_episode():
    probe = FakeModelWrapper(responses=calculator_policy())
    first_prompt = run_task(agent_task(), probe)[0].prompt_length
    model = FakeModelWrapper(responses=calculator_policy(), max_prompt_tokens=first_prompt + 10)
    exps = run_task(agent_task(), model)
    assert len(exps) == 1  # the second call was refused by the server (HTTP 400)
    assert exps[0].info["stop_reason"] == "context_exceeded"
    assert "maximum prompt length" in exps[0].info["episode_error"]
    assert exps[0].reward == 0.0  # no final answer


def test_tool_errors_reach_the_model_and_do_not_crash():
    script = [
        '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>',
        '<tool_call>{"name": "calculator", "arguments": "not json"}</tool_call>',
        format_tool_call("calculator", {"expr": "1+1"}),
        format_tool_call("calculator", {}),
        format_tool_call("calculator", {"expression": "1/0"}),
        format_tool_call("calculator", {"expression": "__import__('os').system('x')"}),
        "I give up: 89",
    ]

    def policy(messages, sample_index):
        return script[sum(m["role"] == "assistant" for m in messages)]

    model = FakeModelWrapper(responses=policy)
    exps = run_task(agent_task(workflow_args={"tools": ["calculator"], "max_turns": 10}), model)

    assert len(exps) == 7
    final_request = model.calls_of("openai.chat.completions")[-1]
    tool_messages = [m["content"] for m in final_request.messages if m["role"] == "tool"]
    assert len(tool_messages) == 6 and all(t.startswith("Error: ") for t in tool_messages)
    assert "unknown tool 'search'" in tool_messages[0] and "calculator" in tool_messages[0]
    assert "not valid JSON" in tool_messages[1] and "expression" in tool_messages[1]
    assert "unexpected argument(s) 'expr'" in tool_messages[2] or "missing" in tool_messages[2]
    assert "missing required argument(s) 'expression'" in tool_messages[3]
    assert "division by zero" in tool_messages[4]
    assert "unsupported syntax" in tool_messages[5] or "unknown" in tool_messages[5]
    assert exps[0].info["num_tool_errors"] == 6
    assert [len(e.info["tool_errors"]) for e in exps] == [1, 1, 1, 1, 1, 1, 0]
    assert exps[-1].info["stop_reason"] == "final_answer"
    assert all(e.reward == 1.0 for e in exps)  # the final answer still contains 89


def test_max_turns_stops_the_episode():
    model = FakeModelWrapper(responses=format_tool_call("calculator", {"expression": "1+1"}))
    task = agent_task(workflow_args={"tools": ["calculator"], "max_turns": 3})
    exps = run_task(task, model)
    assert len(exps) == 3 and len(model.calls_of("openai.chat.completions")) == 3
    assert [e.eid.step for e in exps] == [0, 1, 2]
    assert {e.info["stop_reason"] for e in exps} == {"max_turns"}
    assert exps[0].info["num_tool_calls"] == 3  # the last turn's calls ran too
    assert all(e.reward == 0.0 for e in exps)  # no final answer: the reward sees ""


def test_truncated_reply_ends_the_episode_without_credit():
    model = FakeModelWrapper(responses="The answer is 89, because ...")
    task = agent_task(rollout_args={"max_tokens": 5})
    exps = run_task(task, model)
    assert len(exps) == 1
    assert exps[0].truncate_status == "response_truncated"
    assert exps[0].info["stop_reason"] == "truncated" and exps[0].reward == 0.0
    assert model.calls_of("openai.chat.completions")[0].kwargs["max_tokens"] == 5


def test_repeat_times_runs_isolated_concurrent_episodes(scratch_tools):
    @scratch_tools("slow_square")
    async def slow_square(x: int) -> str:
        """Square a number, slowly.

        Args:
            x: the number.
        """
        await asyncio.sleep(0.02 * (3 - x % 3))  # finish in another order than started
        return str(x * x)

    counter = itertools.count(1)
    lock = threading.Lock()

    def policy(messages, sample_index):
        tools = [m for m in messages if m["role"] == "tool"]
        if not tools:
            with lock:
                x = next(counter)
            return format_tool_call("slow_square", {"x": x})
        return f"Result: {tools[-1]['content']}"

    model = FakeModelWrapper(responses=policy)
    task = agent_task(
        repeat_times=3,
        workflow_args={"tools": ["slow_square"]},
        raw_task={"prompt": "Square something.", "response": "unused"},
    )
    exps = run_task(task, model)

    assert len(exps) == 6
    assert sorted(e.eid.run for e in exps) == [0, 0, 1, 1, 2, 2]
    squares = set()
    for run in range(3):
        turns = sorted((e for e in exps if e.eid.run == run), key=lambda e: e.eid.step)
        assert [e.eid.step for e in turns] == [0, 1]
        x = json.loads(
            re.search(r"<tool_call>(.*)</tool_call>", response_text(model, turns[0])).group(1)
        )["arguments"]["x"]
        # the second turn continues this episode's own first turn and reads its own result
        assert turns[1].tokens[: turns[0].tokens.shape[0]].tolist() == turns[0].tokens.tolist()
        assert response_text(model, turns[1]) == f"Result: {x * x}" + END
        squares.add(x * x)
    assert squares == {1, 4, 9}


def test_whole_trajectory_mode_masks_exactly_the_assistant_turns():
    model = FakeModelWrapper(responses=calculator_policy())
    task = agent_task(
        repeat_times=2,
        workflow_args={"tools": ["calculator"], "trajectory_mode": "whole"},
    )
    exps = run_task(task, model)

    assert len(exps) == 2 and sorted(e.eid.run for e in exps) == [0, 1]
    for exp in exps:
        assert exp.reward == 1.0 and exp.info["stop_reason"] == "final_answer"
        response = exp.tokens[exp.prompt_length :]
        assert exp.action_mask.shape == response.shape
        masked_in = response[exp.action_mask].tolist()
        expected = format_tool_call("calculator", {"expression": "12*7+5"}) + END
        expected += "The answer is 89." + END
        assert model.tokenizer.decode(masked_in) == expected
        assert "<|tool|>89" + END in model.tokenizer.decode(response[~exp.action_mask].tolist())
        assert [m["role"] for m in exp.messages] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        assert exp.tools[0]["function"]["name"] == "calculator"
        assert exp.metrics["accuracy"] == 1.0 and exp.metrics["reward_error"] == 0.0


def test_agent_with_row_tool_schemas_and_bad_settings():
    schema = {
        "name": "calculator",
        "description": "A pocket calculator.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    }
    model = FakeModelWrapper(responses=calculator_policy())
    exps = run_task(
        agent_task(raw_task={"prompt": "12*7+5?", "response": "89", "tools": [schema]}), model
    )
    assert exps[-1].reward == 1.0
    sent = model.calls_of("openai.chat.completions")[0].kwargs["tools"]
    assert sent[0]["function"]["description"] == "A pocket calculator."

    with pytest.raises(ValueError, match=r"not registered: web_search.*calculator"):
        agent_task(
            raw_task={"prompt": "q", "response": "a", "tools": [{"name": "web_search"}]}
        ).to_workflow(model)
    with pytest.raises(ValueError, match="trajectory_mode='steps'.*per_turn, whole"):
        agent_task(workflow_args={"trajectory_mode": "steps"}).to_workflow(model)
    with pytest.raises(ValueError, match="max_turns must be an int >= 1, got 0"):
        agent_task(workflow_args={"max_turns": 0}).to_workflow(model)
    with pytest.raises(ValueError, match="Unknown tools name 'calculater'.*calculator"):
        agent_task(workflow_args={"tools": ["calculater"]}).to_workflow(model)
    with pytest.raises(MissingTaskFieldError, match="'prompt'.*'message'"):
        agent_task(raw_task={"question": "q", "response": "a"}).to_workflow(model)


def test_agent_default_reward_and_tools():
    pytest.importorskip("trinity.workflows.rewards.math", reason="accuracy_reward not written yet")
    model = FakeModelWrapper(responses=["89"])
    task = Task(workflow="agent_workflow", raw_task={"prompt": "What is 12*7+5?", "response": "89"})
    workflow = task.to_workflow(model)
    assert type(workflow.reward_fn) is REWARD_FUNCTIONS.get("accuracy_reward")
    assert [t.name for t in workflow.tools] == default_tool_names()
    exps = run_task(task, model)
    assert exps[0].reward == 1.0


def test_agent_workflow_scored_by_llm_judge_with_auxiliary_model():
    judge = FakeModelWrapper(responses="Correct.\nScore: 10", model_path="fake/judge")
    model = FakeModelWrapper(responses=calculator_policy())
    task = agent_task(reward_fn="llm_judge_reward", reward_fn_args={"max_score": 10})
    exps = run_task(task, model, auxiliary_models=[judge])
    assert [e.reward for e in exps] == [1.0, 1.0]
    graded = judge.calls_of("openai.chat.completions")[0].messages[-1]["content"]
    assert "The answer is 89." in graded and "12*7+5" in graded


# ---------------------------------------------------------------------- tools
@pytest.mark.parametrize(
    ("expression", "expected"),
    [("2+3*4", 14), ("2^10", 1024), ("7/2", 3.5), ("-(3 - 5) ** 2", -4), ("sqrt(16) + pi*0", 4.0)],
)
def test_calculator_evaluates(expression, expected):
    assert evaluate_arithmetic(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "empty"),
        ("1/0", "division by zero"),
        ("9**9**9", "too large"),
        ("__import__('os')", "unknown function '__import__'"),
        ("x + 1", "unknown name 'x'"),
        ("'a' * 3", "only numbers"),
        ("[1, 2]", "unsupported syntax List"),
        ("2 +", "cannot parse"),
    ],
)
def test_calculator_refuses_with_clear_errors(expression, message):
    with pytest.raises(ToolError, match=re.escape(message)):
        evaluate_arithmetic(expression)


def test_register_tool_infers_schema_and_toolset_reports_failures(scratch_tools):
    from typing import Literal, Optional

    @scratch_tools("convert_units")
    def convert_units(value: float, unit: Literal["km", "mi"], digits: Optional[int] = 2) -> dict:
        """Convert a distance.

        Args:
            value: the distance.
            unit: the unit to convert to.
            digits: rounding.
        """
        factor = 1.609 if unit == "km" else 1 / 1.609
        return {"value": round(value * factor, digits)}

    @scratch_tools("broken")
    def broken() -> str:
        """Always fails."""
        raise RuntimeError("disk on fire")

    @scratch_tools("sleepy")
    async def sleepy() -> str:
        """Takes too long."""
        await asyncio.sleep(5)
        return "late"

    assert TOOLS.get("convert_units") is convert_units and isinstance(convert_units, Tool)
    params = convert_units.schema["function"]["parameters"]
    assert convert_units.schema["function"]["description"] == "Convert a distance."
    assert params["required"] == ["value", "unit"]
    assert params["properties"]["value"] == {"type": "number", "description": "the distance."}
    assert params["properties"]["unit"]["enum"] == ["km", "mi"]
    assert params["properties"]["digits"]["type"] == "integer"
    assert params["additionalProperties"] is False

    toolset = ToolSet.from_names(["convert_units", "broken", "sleepy"], timeout=0.1)

    async def go():
        return await asyncio.gather(
            toolset.execute("convert_units", '{"value": 10, "unit": "km"}'),
            toolset.execute("convert_units", "[1, 2]"),
            toolset.execute("broken", None),
            toolset.execute("sleepy", ""),
        )

    ok, not_object, raised, slow = asyncio.run(go())
    assert ok.ok and json.loads(ok.content) == {"value": 16.09}
    assert (
        not_object.error == "Error: the arguments of convert_units must be a JSON object, got list."
    )
    assert raised.content == "Error: broken failed: RuntimeError: disk on fire"
    assert slow.content == "Error: sleepy timed out after 0.1s."

    # a user's tool may take a built-in tool's name (user code over built-ins) ...
    builtin = TOOLS.get("calculator")

    def echo(expression: str) -> str:
        return expression

    def twice(expression: str) -> str:
        return expression * 2

    mine = register_tool("calculator")(echo)
    try:
        assert TOOLS.get("calculator") is mine and TOOLS.overridden["calculator"] is builtin
        # ... but two user tools cannot share one
        with pytest.raises(ValueError, match="already taken"):
            register_tool("calculator")(twice)
    finally:
        TOOLS.unregister("calculator")
    assert TOOLS.get("calculator") is builtin


def test_toolset_truncates_long_output(scratch_tools):
    @scratch_tools("chatty", run_in_thread=False)
    def chatty() -> str:
        """Talks a lot."""
        return "x" * 100

    result = asyncio.run(ToolSet([chatty], max_output_chars=10).execute("chatty", "{}"))
    assert result.content == "x" * 10 + "\n... [output truncated: 90 more characters]"


def test_python_tool_runs_in_the_configured_sandbox():
    pytest.importorskip("trinity.workflows.sandbox", reason="the code sandbox is not written yet")

    def policy(messages, sample_index):
        tools = [m for m in messages if m["role"] == "tool"]
        if not tools:
            return format_tool_call("python", {"code": "import sys\nprint(6 * 7)\nsys.exit(3)"})
        return f"Output was: {tools[-1]['content']}"

    model = FakeModelWrapper(responses=policy)
    sandbox = {"backend": "process", "wall_time_s": 10}
    task = agent_task(
        raw_task={"prompt": "Compute 6*7 in Python.", "response": "42"},
        workflow_args={"tools": ["python"], "sandbox": sandbox},
    )
    exps = run_task(task, model)
    assert exps[-1].reward == 1.0
    output = response_text(model, exps[-1])
    assert output.startswith("Output was: 42\n[error: ") and "exit" in output

    with pytest.raises(RuntimeError, match="python tool cannot run here.*workflow_args.sandbox"):
        agent_task(workflow_args={"tools": ["python"], "sandbox": {"backend": "vm"}}).to_workflow(
            model
        )


def test_openai_request_kwargs_map_rollout_args():
    assert openai_request_kwargs({"temperature": 0.5, "top_k": 20, "max_tokens": 64, "n": 4}) == {
        "temperature": 0.5,
        "max_tokens": 64,
        "extra_body": {"top_k": 20},
    }
    assert openai_request_kwargs(None) == {}


# ---------------------------------------------------------------------- ToolCallWorkflow
WEATHER_SCHEMA = {
    "name": "get_weather",
    "description": "Current weather of a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
        "required": ["city"],
    },
}


def test_tool_call_workflow_rewards_exact_partial_and_wrong_calls():
    replies = [
        format_tool_call("get_weather", {"city": "Paris", "unit": "C"}),
        format_tool_call("get_weather", {"unit": "F", "city": "Paris"}),
        format_tool_call("get_time", {"city": "Paris"}),
        "It is sunny in Paris.",
    ]
    model = FakeModelWrapper(responses=lambda messages, i: replies[i])
    task = Task(
        workflow="tool_call_workflow",
        repeat_times=4,
        raw_task={
            "prompt": "What's the weather in Paris, in Celsius?",
            "tools": json.dumps([WEATHER_SCHEMA]),
            "response": json.dumps(
                [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}]
            ),
        },
    )
    exps = run_task(task, model)

    assert [e.reward for e in exps] == [1.0, 0.75, 0.0, 0.0]
    assert [e.eid.run for e in exps] == [0, 1, 2, 3]
    for exp, reply in zip(exps, replies, strict=True):
        assert response_text(model, exp) == reply + END
        assert bool(exp.action_mask.all())
    assert exps[0].info["tool_calls"] == [
        {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}
    ]
    assert exps[0].info["finish_reason"] == "tool_calls" and exps[3].info["finish_reason"] == "stop"
    assert exps[1].metrics["tool_call"] == 0.75
    request = model.calls_of("openai.chat.completions")
    assert len(request) == 1 and request[0].kwargs["n"] == 4
    assert request[0].kwargs["tools"] == [{"type": "function", "function": WEATHER_SCHEMA}]


def test_tool_call_workflow_refuses_bad_rows():
    model = FakeModelWrapper()
    with pytest.raises(MissingTaskFieldError, match="'tools' \\(set by format.tools_key\\)"):
        Task(workflow="tool_call_workflow", raw_task={"prompt": "q", "response": "[]"}).to_workflow(
            model
        )
    with pytest.raises(ValueError, match=r"row\['response'\].*not valid JSON"):
        Task(
            workflow="tool_call_workflow",
            raw_task={"prompt": "q", "tools": [WEATHER_SCHEMA], "response": "get_weather(Paris)"},
        ).to_workflow(model)


def test_score_tool_calls_table():
    paris = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}
    rome = {"name": "get_weather", "arguments": {"city": "Rome", "unit": "C"}}
    assert score_tool_calls([rome, paris], [paris, rome]) == 1.0  # order does not matter
    assert score_tool_calls([paris, paris], [paris]) == 0.5  # an extra call costs
    assert score_tool_calls([paris], [paris, rome]) == 0.5  # a missing call costs
    assert score_tool_calls([], []) == 1.0 and score_tool_calls([paris], []) == 0.0
    assert (
        score_tool_calls(
            [{"name": "f", "arguments": {"n": "3"}}], [{"name": "f", "arguments": {"n": 3.0}}]
        )
        == 1.0
    )
    assert (
        score_tool_calls([{"name": "f", "arguments": "oops"}], [{"name": "f", "arguments": {}}])
        == 0.5
    )
    assert score_tool_calls([{"name": "f", "arguments": {"a": 1}}], [paris], name_weight=0.2) == 0.0
    assert parse_reference_calls('{"function": {"name": "f", "arguments": "{\\"a\\": 1}"}}') == [
        {"name": "f", "arguments": {"a": 1}}
    ]
    with pytest.raises(ValueError, match="name_weight must be in"):
        ToolCallRewardFn(name_weight=2)


# ---------------------------------------------------------------------- resolution
def test_workflows_and_rewards_resolve_by_name_and_guide_path():
    from trinity.common.rewards import LLMJudgeRewardFn
    from trinity.common.workflows import AgentWorkflow as GuideAgent
    from trinity.common.workflows import TextGameWorkflow
    from trinity.common.workflows import ToolCallWorkflow as GuideToolCall
    from trinity.workflows.envs.text_game import TextGameWorkflow as Game
    from trinity.workflows.rewards.judge import LLMJudgeRewardFn as Judge

    assert GuideAgent is AgentWorkflow is WORKFLOWS.get("agent_workflow")
    assert GuideToolCall is ToolCallWorkflow is WORKFLOWS.get("tool_call_workflow")
    assert TextGameWorkflow is Game is WORKFLOWS.get("text_game_workflow")
    assert LLMJudgeRewardFn is Judge is REWARD_FUNCTIONS.get("llm_judge_reward")
    assert REWARD_FUNCTIONS.get("tool_call_reward") is ToolCallRewardFn
    assert Task(workflow="agent_workflow").workflow_cls is AgentWorkflow
