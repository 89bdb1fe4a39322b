"""Built-in workflows with every kind of model object a user hands them.

Code written for Trinity-RFT gives workflows models that offer only ``chat`` (its tests
configure ``MagicMock().chat.return_value``), only ``chat_async``, or both; the built-ins reach
the model through ``trinity.common.models.calls.call_model`` and must work with each.
"""

from __future__ import annotations

import asyncio
import threading
from unittest.mock import MagicMock

import pytest
import torch

from trinity.common.experience import Experience
from trinity.common.models.calls import call_model
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import Task, run_task
from trinity.utils.aio import run_sync
from trinity.workflows.single_turn import MathBoxedWorkflow, MathWorkflow

ANSWERS = ["<think>ok</think><answer>2</answer>", "<think>ok</think><answer>3</answer>"]


def _replies(texts: list[str]) -> list[Experience]:
    return [
        Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2, response_text=text)
        for text in texts
    ]


class SyncOnlyModel:
    """A user's model with only the synchronous API; records the thread it ran on."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.calls: list[dict] = []

    def chat(self, messages: list[dict], **kwargs) -> list[Experience]:
        self.threads.append(threading.get_ident())
        self.calls.append(kwargs)
        return _replies(ANSWERS[: kwargs.get("n", 1)])

    def generate(self, prompts: list[str], **kwargs) -> list[Experience]:
        return _replies(ANSWERS[: kwargs.get("n", 1)])


class AsyncOnlyModel:
    """A user's model with only the asynchronous API."""

    async def chat_async(self, messages: list[dict], **kwargs) -> list[Experience]:
        await asyncio.sleep(0)
        return _replies(ANSWERS[: kwargs.get("n", 1)])


class SyncReturningAwaitable:
    """``chat`` is a plain function that returns a coroutine (a decorated async method)."""

    def chat(self, messages: list[dict], **kwargs):
        async def reply() -> list[Experience]:
            return _replies(ANSWERS[: kwargs.get("n", 1)])

        return reply()


def _math_task(repeat_times: int = 2) -> Task:
    return Task(
        workflow=MathWorkflow,
        raw_task={"prompt": "1+1=", "response": "2"},
        repeat_times=repeat_times,
    )


def _rewards(exps: list[Experience]) -> list[float]:
    return [round(float(e.reward), 3) for e in exps]


@pytest.mark.parametrize(
    "model_factory",
    [SyncOnlyModel, AsyncOnlyModel, SyncReturningAwaitable],
    ids=lambda f: f.__name__,
)
def test_math_workflow_runs_with_any_kind_of_model(model_factory):
    reference = run_task(_math_task(), FakeModelWrapper(responses=ANSWERS))
    exps = run_task(_math_task(), model_factory())
    assert len(exps) == 2
    assert _rewards(exps) == _rewards(reference)
    assert exps[0].reward > exps[1].reward  # the right answer scores higher


def test_a_sync_only_model_runs_off_the_event_loop_thread():
    model = SyncOnlyModel()
    loop_threads: list[int] = []

    async def drive() -> list[Experience]:
        loop_threads.append(threading.get_ident())
        workflow = _math_task().to_workflow(model)
        workflow.set_repeat_times(2, 0)
        return await workflow.run_async()

    exps = run_sync(drive())
    assert len(exps) == 2 and model.calls[0]["n"] == 2
    assert model.threads[0] != loop_threads[0]  # a blocking chat never stalls the loop


def test_trinity_rft_style_magicmock_with_only_chat_configured():
    """As Trinity-RFT's workflow tests do: ``model.chat.return_value`` and ``workflow.run()``."""
    model = MagicMock()
    model.chat.return_value = _replies(ANSWERS)
    workflow = _math_task().to_workflow(model=model)
    exps = workflow.run()
    assert [e.response_text for e in exps] == ANSWERS
    model.chat.assert_called_once()


def test_a_spec_mock_with_both_twins_uses_the_one_matching_the_run():
    """A mock of the wrapper has an (unconfigured) ``chat_async`` as well: ``run()`` calls the
    synchronous twin, as Trinity-RFT's synchronous workflows do, ``run_async()`` the async one."""
    from trinity.common.models.model import ModelWrapper

    model = MagicMock(spec=ModelWrapper)
    model.chat.return_value = _replies(ANSWERS)
    assert [e.response_text for e in _math_task().to_workflow(model=model).run()] == ANSWERS

    model = MagicMock(spec=ModelWrapper)
    model.chat_async.return_value = _replies(ANSWERS[:1])
    workflow = _math_task(1).to_workflow(model=model)
    exps = run_sync(workflow.run_async())
    assert [e.response_text for e in exps] == ANSWERS[:1]
    model.chat.assert_not_called()


def test_math_boxed_base_mode_uses_generate_of_a_sync_only_model():
    task = Task(
        workflow=MathBoxedWorkflow,
        raw_task={"prompt": "1+1=", "response": "2"},
        workflow_args={"use_base": True},
        repeat_times=1,
    )
    assert len(run_task(task, SyncOnlyModel())) == 1


def test_a_model_wrapper_is_always_called_through_its_async_twin():
    model = FakeModelWrapper(responses="hi")
    model.chat = MagicMock(side_effect=AssertionError("the sync twin must not be used"))
    exps = run_sync(call_model(model, "chat", [{"role": "user", "content": "x"}]))
    assert exps[0].response_text == "hi"


def test_a_model_with_neither_method_is_named_in_the_error():
    with pytest.raises(TypeError, match=r"object\) has neither chat_async\(\) nor chat\(\)"):
        run_sync(call_model(object(), "chat", []))
