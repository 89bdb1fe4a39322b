"""Subclasses of the built-in workflows written the way Trinity-RFT 0.6 code writes them.

Trinity-RFT's ``SimpleWorkflow`` is synchronous (``run``) and its ``rollout_args`` is a dict;
here the built-ins are async and ``rollout_args`` is a ``GenerationConfig``. Code such as
Trinity-RFT's BOTS and learn-to-ask examples overrides ``run`` on a built-in, samples with
``self.model.chat(messages, **self.rollout_args)``, reads ``resettable`` as a property and
imports the classes from Trinity-RFT's module paths: all of it must work unchanged.
"""

from __future__ import annotations

import pytest

from trinity.common.config import FormatConfig, GenerationConfig
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, run_task, run_task_async
from trinity.testing import WorkflowContract
from trinity.utils.aio import run_sync
from trinity.workflows.single_turn import MathBoxedWorkflow, MathWorkflow, SimpleWorkflow

QA = FormatConfig(prompt_key="question", response_key="answer")
ROW = {"question": "2+2=", "answer": "4"}


def _task(workflow, repeat_times=2, **kwargs):
    return Task(
        workflow=workflow,
        raw_task=dict(ROW),
        format_args=QA,
        repeat_times=repeat_times,
        rollout_args=GenerationConfig(temperature=0.5, max_tokens=16),
        **kwargs,
    )


class RunOverride(SimpleWorkflow):
    """Trinity-RFT style: a synchronous ``run`` sampling with ``**self.rollout_args``."""

    calls = 0

    def run(self):
        type(self).calls += 1
        responses = self.model.chat(self.format_messages(), **self.rollout_args)
        for i, response in enumerate(responses):
            response.reward = 42.0
            response.eid.run = self.run_id_base + i
        return responses


def test_a_run_override_on_a_builtin_is_what_runs():
    RunOverride.calls = 0
    model = FakeModelWrapper(["4"])
    exps = run_task(_task(RunOverride, repeat_times=3), model)
    assert RunOverride.calls == 1  # repeatable: one call samples every run
    assert [e.reward for e in exps] == [42.0, 42.0, 42.0]
    assert [e.eid.run for e in exps] == [0, 1, 2]
    (call,) = model.calls_of("chat")
    # **self.rollout_args gave the task's sampling arguments, n = repeat_times
    assert call.kwargs["n"] == 3
    assert call.kwargs["temperature"] == 0.5 and call.kwargs["max_tokens"] == 16


def test_a_run_override_may_call_the_builtin_through_super():
    class Boxed(MathBoxedWorkflow):
        def run(self):
            exps = super().run()
            for exp in exps:
                exp.reward = exp.reward + 10.0
            return exps

    exps = run_task(_task(Boxed, reward_fn="math_boxed_reward"), FakeModelWrapper(["\\boxed{4}"]))
    plain = run_task(
        _task(MathBoxedWorkflow, reward_fn="math_boxed_reward"), FakeModelWrapper(["\\boxed{4}"])
    )
    assert [e.reward for e in exps] == [p.reward + 10.0 for p in plain]


def test_a_class_defining_run_async_below_a_run_override_runs_async():
    class SyncFirst(SimpleWorkflow):
        def run(self):
            raise AssertionError("run_async is the more derived entry point")

    class AsyncAgain(SyncFirst):
        async def run_async(self):
            exps = await self.model.chat_async(self.format_messages(), n=self.repeat_times)
            for exp in exps:
                exp.reward = 7.0
            return exps

    exps = run_task(_task(AsyncAgain), FakeModelWrapper(["4"]))
    assert [e.reward for e in exps] == [7.0, 7.0]


def test_rollout_args_read_like_trinity_rft_dict_and_like_the_guides_attributes():
    workflow = _task(SimpleWorkflow).to_workflow(FakeModelWrapper(["4"]))
    args = workflow.rollout_args
    assert args.temperature == 0.5  # the guides: attribute access
    assert args["temperature"] == 0.5 and args.get("top_p") == 1.0  # Trinity-RFT: a dict
    assert args.get("nope", "x") == "x" and "max_tokens" in args and "nope" not in args
    assert dict(**args) == args.model_dump()
    assert {**args, "n": 5}["n"] == 5


def test_a_subclass_whose_reset_skips_super_still_has_rollout_args_and_is_reused():
    """learn-to-ask style: ``resettable`` a property, ``reset`` sets only what it reads."""

    class Learn2Ask(RunOverride):
        resets = 0

        @property
        def resettable(self):
            return True

        def reset(self, task):
            type(self).resets += 1
            self.task_desc = task.task_desc
            self.system_prompt = None
            self.reply_prefix = None

    model = FakeModelWrapper(["ok"])
    exps, workflow = run_sync(run_task_async(_task(Learn2Ask, repeat_times=1), model))
    exps2, again = run_sync(
        run_task_async(_task(Learn2Ask, repeat_times=1), model, workflow=workflow)
    )
    assert again is workflow  # the property override was read as a flag
    assert Learn2Ask.resets == 2  # construction, then the second task, went through reset
    assert len(exps) == len(exps2) == 1


def test_the_base_resettable_reads_as_a_flag_and_as_a_call():
    simple = _task(SimpleWorkflow).to_workflow(FakeModelWrapper(["4"]))
    assert simple.resettable() is True and bool(simple.resettable) and simple.resettable == True  # noqa: E712
    assert simple.asynchronous is True  # Trinity-RFT's deprecated name of is_async


def test_trinity_rft_module_paths_resolve_to_the_builtins():
    from trinity.common.rewards.math_reward import MathBoxedRewardFn, MathRewardFn
    from trinity.common.workflows.customized_math_workflows import (
        MathBoxedWorkflow as UpstreamBoxed,
    )
    from trinity.common.workflows.workflow import (
        AsyncMathWorkflow,
        AsyncSimpleWorkflow,
        BaseSimpleWorkflow,
    )
    from trinity.common.workflows.workflow import MathWorkflow as UpstreamMath
    from trinity.common.workflows.workflow import SimpleWorkflow as UpstreamSimple
    from trinity.workflows.rewards import math as rewards_math

    assert UpstreamSimple is SimpleWorkflow and UpstreamMath is MathWorkflow
    assert UpstreamBoxed is MathBoxedWorkflow
    assert BaseSimpleWorkflow is SimpleWorkflow
    assert issubclass(AsyncSimpleWorkflow, SimpleWorkflow) and AsyncSimpleWorkflow.is_async
    assert issubclass(AsyncMathWorkflow, MathWorkflow)
    # Trinity-RFT's registry names of the two
    assert WORKFLOWS.get("async_simple_workflow") is AsyncSimpleWorkflow
    assert WORKFLOWS.get("async_math_workflow") is AsyncMathWorkflow
    assert MathRewardFn is rewards_math.MathRewardFn
    assert MathBoxedRewardFn is rewards_math.MathBoxedRewardFn
    with pytest.raises(ImportError, match="NoSuchWorkflow"):
        from trinity.common.workflows.workflow import NoSuchWorkflow  # noqa: F401


class _ScoredOverride(SimpleWorkflow):
    """A Trinity-RFT style plugin: ``run`` overridden, scoring with the task's reward fn."""

    def run(self):
        responses = self.model.chat(self.format_messages(), **self.rollout_args)
        for i, response in enumerate(responses):
            response.reward = float(response.response_text == self.truth)
            response.eid.run = self.run_id_base + i
        return responses


@pytest.fixture(scope="module", autouse=True)
def _registered_plugin():
    """Registered as a plugin registers it, for this module's tests only (other modules list
    the registry's names)."""
    WORKFLOWS.register_module("trinity_rft_style_override")(_ScoredOverride)
    yield
    WORKFLOWS.unregister("trinity_rft_style_override")


class TestTrinityRftStylePluginPassesTheKit(WorkflowContract):
    """The contract kit checks what the runner runs: the ``run`` override."""

    component = _ScoredOverride
    task_args = {"raw_task": {"prompt": "What is 2+2?", "response": "4"}}
    other_task_args = {"raw_task": {"prompt": "What is 3+3?", "response": "6"}}
    responses = ["4", "5"]
