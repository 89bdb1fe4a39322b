"""FakeModelWrapper's scripted replies: one script for the model and its clones.

Concurrent runs of a task (``explorer.concurrent_mode``) each get
``clone_with_isolated_history()``; a scripted list answers the n-th call with the n-th reply
whichever clone makes it, so single-call runs get the same replies concurrently as
sequentially, and the contract kit's ``concurrent-parity`` rule holds for a list script.
"""

from __future__ import annotations

import asyncio

import pytest

from trinity.common.experience import Experience
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import Task, Workflow, run_task
from trinity.testing import RuleBroken, WorkflowContract

Q = [{"role": "user", "content": "1+1="}]


def _texts(exps: list[Experience]) -> list[str]:
    return [e.response_text for e in exps]


def test_clones_answer_from_the_model_script():
    model = FakeModelWrapper(["a", "b", "c"])
    clone = model.clone_with_isolated_history()
    assert _texts(model.chat(Q)) == ["a"]
    assert _texts(clone.chat(Q)) == ["b"]  # not "a": the clone shares the script's cursor
    assert _texts(model.clone_with_isolated_history().chat(Q)) == ["c"]
    assert _texts(clone.chat(Q)) == ["a"]  # cycled, across the model and its clones
    assert clone.responses is model.responses


def test_the_samples_of_one_call_are_consecutive_replies():
    model = FakeModelWrapper(["a", "b", "c", "d"])
    clone = model.clone_with_isolated_history()

    async def both():
        return await asyncio.gather(model.chat_async(Q, n=2), clone.chat_async(Q, n=2))

    first, second = asyncio.run(both())
    assert _texts(first) == ["a", "b"] and _texts(second) == ["c", "d"]


def test_set_responses_restarts_the_script_for_the_clones_too():
    model = FakeModelWrapper(["a", "b"])
    clone = model.clone_with_isolated_history()
    assert _texts(clone.chat(Q)) == ["a"]
    model.set_responses(["x", "y"])
    assert _texts(clone.chat(Q)) == ["x"] and _texts(model.chat(Q)) == ["y"]
    model.responses = "z"  # the attribute is the shared script's too
    assert _texts(clone.chat(Q)) == ["z"]


def test_callables_and_strings_are_unchanged():
    model = FakeModelWrapper(lambda messages, i: f"{messages[-1]['content']}#{i}")
    assert _texts(model.chat(Q, n=2)) == ["1+1=#0", "1+1=#1"]
    assert _texts(FakeModelWrapper("same").chat(Q, n=2)) == ["same", "same"]
    assert _texts(FakeModelWrapper().chat(Q))[0].startswith("Fake reply #0 to: 1+1=")


class SyncOneCall(Workflow):
    """The guide's shape: a synchronous run() with one chat call."""

    def run(self):
        out = self.model.chat([{"role": "user", "content": self.task.raw_task["q"]}])
        for exp in out:
            exp.reward = float(exp.response_text == self.task.raw_task["a"])
        return out


class AsyncOneCall(Workflow):
    async def run_async(self):
        out = await self.model.chat_async([{"role": "user", "content": self.task.raw_task["q"]}])
        for exp in out:
            exp.reward = float(exp.response_text == self.task.raw_task["a"])
        return out


class AsyncTwoCalls(Workflow):
    """Two calls per run: concurrent runs interleave them."""

    async def run_async(self):
        first = await self.model.chat_async([{"role": "user", "content": "turn 1"}])
        await asyncio.sleep(0)
        second = await self.model.chat_async([{"role": "user", "content": "turn 2"}])
        out = first + second
        for exp in out:
            exp.reward = 0.0
        return out


def _task(cls, repeat_times=3):
    return Task(workflow=cls, raw_task={"q": "1+1=", "a": "2"}, repeat_times=repeat_times)


@pytest.mark.parametrize("cls", [SyncOneCall, AsyncOneCall])
def test_concurrent_runs_get_the_replies_sequential_runs_get(cls):
    replies = ["2", "3", "4"]
    sequential = run_task(_task(cls), FakeModelWrapper(replies), concurrent_mode="sequential")
    concurrent = run_task(_task(cls), FakeModelWrapper(replies), concurrent_mode="asynchronous")
    assert sorted(_texts(sequential)) == sorted(_texts(concurrent)) == replies


def test_async_concurrent_runs_start_in_run_order():
    """Run r's first (here only) call is the r-th call: the replies follow the run ids."""
    for _ in range(5):
        exps = run_task(
            _task(AsyncOneCall, 4),
            FakeModelWrapper(["a", "b", "c", "d"]),
            concurrent_mode="asynchronous",
        )
        assert {e.eid.run: e.response_text for e in exps} == {0: "a", 1: "b", 2: "c", 3: "d"}


def test_the_guide_shaped_workflow_passes_concurrent_parity_with_a_list():
    class TestSync(WorkflowContract):
        component = SyncOneCall
        task_args = {"raw_task": {"q": "1+1=", "a": "2"}}
        responses = ["2", "3"]

    TestSync().test_concurrent_mode()


def test_a_list_script_for_multi_call_runs_is_refused_with_the_reason():
    class TestTwoCalls(WorkflowContract):
        component = AsyncTwoCalls
        task_args = {"raw_task": {}}
        responses = ["a", "b"]

    with pytest.raises(RuleBroken) as caught:
        TestTwoCalls().test_concurrent_mode()
    message = str(caught.value)
    assert "cannot check with this script" in message
    assert "called the model 4 times" in message and "fn(messages, sample_index)" in message

    class TestTwoCallsByMessage(TestTwoCalls):
        responses = lambda messages, i: messages[-1]["content"].upper()  # noqa: E731

    TestTwoCallsByMessage().test_concurrent_mode()  # a function of the messages: order-free

    class TestTwoCallsOneReply(TestTwoCalls):
        responses = ["same"]

    TestTwoCallsOneReply().test_concurrent_mode()  # one reply: order-free too
