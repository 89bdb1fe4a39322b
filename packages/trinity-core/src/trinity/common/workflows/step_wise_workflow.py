"""Agent workflows trained step by step (Trinity-RFT's ``step_wise_workflow`` module).

An agent application runs in steps (one environment turn each: a few model calls and tool
calls); the model's history (``explorer.rollout_model.enable_history``) records every call as an
Experience. The workflow collects each step's Experiences, stamps them with the step number
(``eid.step``) and rewards them, so step-wise algorithms (``algorithm_type: multi_step_grpo``)
can group them by task and step:

* :class:`StepWiseRewardWorkflow` -- each step gets its own reward (``reward(exps, step_num)``);
* :class:`RewardPropagationWorkflow` -- the run's final reward (``reward(exps)``) goes to every
  step, and ``actual_env_steps`` records how many steps ran.

A subclass writes :meth:`step` (return ``False`` to stop early), the reward, and
:attr:`max_step_num`; ``Async...`` twins take ``step_async`` / ``reward_async``. The agent may
call ``self.model`` or the OpenAI client ``self.client`` (built when first used, so a model
without an OpenAI endpoint serves subclasses that never touch it).

A run also stops after a step whose model call was cut off by the length limit (an
Experience with ``truncate_status == "response_truncated"``, i.e. finish reason ``length``),
whatever ``step`` returned: the agent acted on a reply it never finished, so later steps would
build on a broken turn. That step's Experiences are still kept and rewarded (upstream
Trinity-RFT's step-wise tests expect this stop; its 0.6.0 release did not have it yet).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, Optional, Sequence

from trinity.common.experience import Experience
from trinity.common.workflows.workflow import Task, Workflow

__all__ = [
    "HistoryDisabledError",
    "StepWiseRewardWorkflow",
    "AsyncStepWiseRewardWorkflow",
    "RewardPropagationWorkflow",
    "AsyncRewardPropagationWorkflow",
]


class HistoryDisabledError(ValueError, AssertionError):
    """A step-wise workflow got a model whose history recording is off.

    Also an ``AssertionError``: Trinity-RFT asserts ``model.enable_history``, and code
    written for it catches that.
    """


def _truncated(exps: Sequence[Any]) -> bool:
    """Whether a step's model output was cut off by the length limit (finish reason
    ``length``); objects without ``truncate_status`` (a test's stand-ins) count as whole."""
    return any(getattr(exp, "truncate_status", None) == "response_truncated" for exp in exps)


class _StepWorkflow(Workflow):
    """What both step-wise bases share: the history check, the client, the step loop."""

    def __init__(
        self,
        *args: Any,
        task: Optional[Task] = None,
        model: Any = None,
        auxiliary_models: Optional[Sequence[Any]] = None,
        use_openai_client: bool = True,
    ) -> None:
        super().__init__(*args, task=task, model=model, auxiliary_models=auxiliary_models)
        if not getattr(self.model, "enable_history", False):
            raise HistoryDisabledError(
                f"{type(self).__name__} collects each step's Experiences from the model's "
                "history, which is off: set explorer.rollout_model.enable_history: true"
            )
        self.use_openai_client = use_openai_client
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The rollout model's OpenAI client (its calls are recorded in the history)."""
        if not self.use_openai_client:
            return None
        if self._client is None:
            self._client = (
                self.model.get_openai_async_client()
                if self.is_async
                else self.model.get_openai_client()
            )
        return self._client

    @client.setter
    def client(self, value: Any) -> None:
        self._client = value

    @property
    def max_step_num(self) -> int:
        """The most steps one run takes."""
        raise NotImplementedError(f"{type(self).__name__} must define max_step_num")

    def _max_steps(self) -> int:
        steps = self.max_step_num
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ValueError(
                f"{type(self).__name__}.max_step_num is {steps!r}; expected an int >= 1"
            )
        return steps

    def _step_experiences(self, step_num: int) -> list[Experience]:
        """The Experiences the model recorded since the last step, stamped with ``step_num``."""
        exps = self.model.extract_experience_from_history()
        for exp in exps:
            exp.eid.step = step_num
        return exps

    def _loop(
        self, step: Callable[[int], bool], step_reward: Optional[Callable[..., float]]
    ) -> tuple[list[Experience], int]:
        """Run steps until one returns ``False``, one's response was truncated, or
        ``max_step_num`` ran, rewarding each step's Experiences with
        ``step_reward(exps, step_num)`` when given. Returns the Experiences and the number of
        steps run."""
        experiences: list[Experience] = []
        ran = 0
        for step_num in range(self._max_steps()):
            keep_going = step(step_num)
            ran = step_num + 1
            exps = self._step_experiences(step_num)
            if step_reward is not None:
                self._reward_step(exps, step_reward(exps, step_num))
            experiences.extend(exps)
            if not keep_going or _truncated(exps):
                break
        return experiences, ran

    async def _loop_async(
        self,
        step: Callable[[int], Awaitable[bool]],
        step_reward: Optional[Callable[..., Awaitable[float]]],
    ) -> tuple[list[Experience], int]:
        """:meth:`_loop` with async ``step`` and ``step_reward``."""
        experiences: list[Experience] = []
        ran = 0
        for step_num in range(self._max_steps()):
            keep_going = await step(step_num)
            ran = step_num + 1
            exps = self._step_experiences(step_num)
            if step_reward is not None:
                self._reward_step(exps, await step_reward(exps, step_num))
            experiences.extend(exps)
            if not keep_going or _truncated(exps):
                break
        return experiences, ran

    def _reward_step(self, exps: list[Experience], reward: Any) -> None:
        value = _checked_reward(self, reward)
        for exp in exps:
            exp.reward = value


def _checked_reward(workflow: Workflow, value: Any) -> float:
    """``value`` as a finite float (a numpy or 0-d torch number converts), or a
    ``TypeError``/``ValueError`` naming the workflow."""
    number: Optional[float] = None
    if not isinstance(value, (bool, str, bytes)) and value is not None:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = None
    if number is None:
        raise TypeError(
            f"{type(workflow).__name__}.reward returned {type(value).__name__} {value!r}; "
            "expected a float"
        )
    if not math.isfinite(number):
        raise ValueError(
            f"{type(workflow).__name__}.reward returned {value!r}; expected a finite float"
        )
    return number


class StepWiseRewardWorkflow(_StepWorkflow):
    """Each step's Experiences get that step's reward, ``reward(exps, step_num)``."""

    def run(self) -> list[Experience]:
        experiences, _ = self._loop(self.step, self.reward)
        return experiences

    def step(self, step_num: int) -> bool:
        """Run step ``step_num`` of the agent; return whether to go on."""
        raise NotImplementedError(f"{type(self).__name__} must define step(step_num)")

    def reward(self, exps: list[Experience], step_num: int) -> float:
        """The reward of step ``step_num``, whose Experiences are ``exps``."""
        raise NotImplementedError(f"{type(self).__name__} must define reward(exps, step_num)")


class AsyncStepWiseRewardWorkflow(StepWiseRewardWorkflow):
    """:class:`StepWiseRewardWorkflow` with ``step_async`` and ``reward_async``."""

    is_async = True

    async def run_async(self) -> list[Experience]:
        experiences, _ = await self._loop_async(self.step_async, self.reward_async)
        return experiences

    async def step_async(self, step_num: int) -> bool:
        """Run step ``step_num`` of the agent; return whether to go on."""
        raise NotImplementedError(f"{type(self).__name__} must define step_async(step_num)")

    async def reward_async(self, exps: list[Experience], step_num: int) -> float:
        """The reward of step ``step_num``, whose Experiences are ``exps``."""
        raise NotImplementedError(f"{type(self).__name__} must define reward_async(exps, step_num)")


class RewardPropagationWorkflow(_StepWorkflow):
    """The run's reward, ``reward(exps)`` over every step's Experiences, goes to all of them;
    ``metrics["actual_env_steps"]`` is the number of steps that ran."""

    def run(self) -> list[Experience]:
        experiences, ran = self._loop(self.step, None)
        return _propagate(self, experiences, self.reward(experiences), ran)

    def step(self, step_num: int) -> bool:
        """Run step ``step_num`` of the agent; return whether to go on."""
        raise NotImplementedError(f"{type(self).__name__} must define step(step_num)")

    def reward(self, exps: list[Experience]) -> float:
        """The reward of the whole run, whose Experiences are ``exps``."""
        raise NotImplementedError(f"{type(self).__name__} must define reward(exps)")


class AsyncRewardPropagationWorkflow(RewardPropagationWorkflow):
    """:class:`RewardPropagationWorkflow` with ``step_async`` and ``reward_async``."""

    is_async = True

    async def run_async(self) -> list[Experience]:
        experiences, ran = await self._loop_async(self.step_async, None)
        return _propagate(self, experiences, await self.reward_async(experiences), ran)

    async def step_async(self, step_num: int) -> bool:
        """Run step ``step_num`` of the agent; return whether to go on."""
        raise NotImplementedError(f"{type(self).__name__} must define step_async(step_num)")

    async def reward_async(self, exps: list[Experience]) -> float:
        """The reward of the whole run, whose Experiences are ``exps``."""
        raise NotImplementedError(f"{type(self).__name__} must define reward_async(exps)")


def _propagate(
    workflow: Workflow, experiences: list[Experience], reward: Any, ran: int
) -> list[Experience]:
    value = _checked_reward(workflow, reward)
    for exp in experiences:
        exp.reward = value
        exp.metrics = dict(exp.metrics or {})
        exp.metrics["actual_env_steps"] = float(ran)
    return experiences
