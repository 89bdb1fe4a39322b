"""Step-wise agent workflows (Trinity-RFT's ``step_wise_workflow``), run as the runner runs them."""

from __future__ import annotations

import pytest

from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import Task, run_task
from trinity.common.workflows.step_wise_workflow import (
    AsyncRewardPropagationWorkflow,
    AsyncStepWiseRewardWorkflow,
    RewardPropagationWorkflow,
    StepWiseRewardWorkflow,
)

Q = [{"role": "user", "content": "go"}]


def _model(**kwargs):
    return FakeModelWrapper(
        responses=lambda msgs, i: f"a{len(msgs)}", enable_history=True, **kwargs
    )


class Stepper(StepWiseRewardWorkflow):
    """Two model calls per step through the OpenAI client; stops after ``stop_after`` steps."""

    stop_after = 3

    @property
    def max_step_num(self):
        return 5

    def step(self, step_num):
        for _ in range(2):
            self.client.chat.completions.create(model=self.client.model_path, messages=Q)
        return step_num + 1 < self.stop_after

    def reward(self, exps, step_num):
        assert len(exps) == 2  # only this step's calls
        return 0.5 * step_num


def test_each_step_gets_its_own_reward_and_step_number():
    exps = run_task(Task(workflow=Stepper, raw_task={}, repeat_times=2), _model())
    assert len(exps) == 2 * 3 * 2  # runs x steps x calls
    by_run = {}
    for exp in exps:
        by_run.setdefault(exp.eid.run, []).append((exp.eid.step, exp.reward))
    assert by_run == {
        r: [(0, 0.0), (0, 0.0), (1, 0.5), (1, 0.5), (2, 1.0), (2, 1.0)] for r in (0, 1)
    }


def test_max_step_num_bounds_the_run():
    class Endless(Stepper):
        stop_after = 100

    exps = run_task(Task(workflow=Endless, raw_task={}), _model())
    assert sorted({e.eid.step for e in exps}) == [0, 1, 2, 3, 4]


class Propagator(RewardPropagationWorkflow):
    """Calls the model directly (no client); the run's reward is its number of calls."""

    @property
    def max_step_num(self):
        return 4

    def step(self, step_num):
        self.model.chat(Q)
        return step_num < 1  # two steps

    def reward(self, exps):
        return float(len(exps))


def test_the_run_reward_goes_to_every_step():
    exps = run_task(Task(workflow=Propagator, raw_task={}), _model())
    assert [(e.eid.step, e.reward) for e in exps] == [(0, 2.0), (1, 2.0)]
    assert all(e.metrics["actual_env_steps"] == 2.0 for e in exps)


def test_async_twins_run_through_run_async():
    class AsyncStepper(AsyncStepWiseRewardWorkflow):
        @property
        def max_step_num(self):
            return 2

        async def step_async(self, step_num):
            await self.client.chat.completions.create(model=self.client.model_path, messages=Q)
            return True

        async def reward_async(self, exps, step_num):
            return 1.0 + step_num

    class AsyncPropagator(AsyncRewardPropagationWorkflow):
        @property
        def max_step_num(self):
            return 3

        async def step_async(self, step_num):
            await self.model.chat_async(Q)
            return True

        async def reward_async(self, exps):
            return -1.0

    exps = run_task(Task(workflow=AsyncStepper, raw_task={}), _model())
    assert [(e.eid.step, e.reward) for e in exps] == [(0, 1.0), (1, 2.0)]
    exps = run_task(Task(workflow=AsyncPropagator, raw_task={}), _model())
    assert [(e.eid.step, e.reward) for e in exps] == [(0, -1.0), (1, -1.0), (2, -1.0)]
    assert exps[0].metrics["actual_env_steps"] == 3.0


def test_a_model_without_history_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match="explorer.rollout_model.enable_history"):
        run_task(Task(workflow=Propagator, raw_task={}), FakeModelWrapper(responses="x"))


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        ("high", TypeError, "returned str 'high'"),
        (float("nan"), ValueError, "returned nan; expected a finite float"),
    ],
)
def test_a_bad_reward_is_an_error_naming_the_workflow(bad, error, match):
    class Bad(Propagator):
        def reward(self, exps):
            return bad

    with pytest.raises(error, match=f"Bad.reward {match}"):
        run_task(Task(workflow=Bad, raw_task={}), _model())


def test_numpy_and_torch_rewards_are_taken_as_floats():
    import numpy as np
    import torch

    for value in (np.float32(0.25), torch.tensor(0.25), 1):

        class Numeric(Propagator):
            def reward(self, exps, value=value):
                return value

        exps = run_task(Task(workflow=Numeric, raw_task={}), _model())
        assert {e.reward for e in exps} == {float(value)}
        assert all(type(e.reward) is float for e in exps)


def test_a_bad_max_step_num_is_an_error():
    class NoSteps(Propagator):
        max_step_num = 0

    with pytest.raises(ValueError, match=r"NoSteps.max_step_num is 0; expected an int >= 1"):
        run_task(Task(workflow=NoSteps, raw_task={}), _model())


class LengthLimited(RewardPropagationWorkflow):
    """Asks for a short reply at step ``cut_at`` (``max_tokens=1``): that reply is truncated."""

    cut_at = 1

    @property
    def max_step_num(self):
        return 5

    def step(self, step_num):
        limit = 1 if step_num == self.cut_at else None
        self.model.chat(Q, max_tokens=limit)
        return True  # the agent would go on; the truncated reply must stop it

    def reward(self, exps):
        return 1.0


def test_a_truncated_response_ends_the_run_after_its_step():
    model = FakeModelWrapper(responses="a long reply of many words", enable_history=True)
    exps = run_task(Task(workflow=LengthLimited, raw_task={}), model)
    assert [e.eid.step for e in exps] == [0, 1]  # the truncated step is kept, no step 2
    assert exps[1].truncate_status == "response_truncated"
    assert all(e.metrics["actual_env_steps"] == 2.0 for e in exps)


def test_a_truncated_response_ends_an_async_step_wise_run_too():
    class AsyncLimited(AsyncStepWiseRewardWorkflow):
        @property
        def max_step_num(self):
            return 4

        async def step_async(self, step_num):
            await self.model.chat_async(Q, max_tokens=1 if step_num == 2 else None)
            return True

        async def reward_async(self, exps, step_num):
            return float(step_num)

    model = FakeModelWrapper(responses="a long reply of many words", enable_history=True)
    exps = run_task(Task(workflow=AsyncLimited, raw_task={}), model)
    assert [(e.eid.step, e.reward) for e in exps] == [(0, 0.0), (1, 1.0), (2, 2.0)]


def test_a_model_without_history_is_also_an_assertion_error_as_trinity_rft_raised():
    from trinity.common.workflows.step_wise_workflow import HistoryDisabledError

    with pytest.raises(AssertionError) as info:
        Propagator(task=Task(workflow=Propagator, raw_task={}), model=FakeModelWrapper("x"))
    assert isinstance(info.value, (HistoryDisabledError, ValueError))
