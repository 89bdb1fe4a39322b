"""Contracts of workflows and reward functions, run on the deterministic fake model.

Workflows are driven the way the explorer drives them (:func:`trinity.common.workflows.run_task`:
repeats, run ids, reuse through ``reset``) against
:class:`~trinity.common.models.testing.FakeModelWrapper`, which needs no GPU and no model files,
so the kit works with only trinity-core installed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Optional

import pytest
import torch

from trinity.common.experience import Experience
from trinity.common.models.model import ModelWrapper
from trinity.common.models.testing import FakeModelWrapper, ResponseSpec
from trinity.common.workflows.workflow import (
    Task,
    is_resettable,
    run_task,
    run_task_async,
    run_workflow,
)
from trinity.testing._contract import ComponentContract, check_metrics, rule
from trinity.utils.aio import run_sync

__all__ = ["RewardFnContract", "WorkflowContract"]


def _summary(exps: list[Experience], runs: bool = True) -> list[tuple]:
    """What must match between two runs (ids' random suffixes left out; run ids optional)."""
    return sorted(
        (
            (e.eid.run if runs else 0, e.eid.step),
            e.tokens.tolist(),
            e.prompt_length,
            e.reward,
            None if e.action_mask is None else e.action_mask.tolist(),
        )
        for e in exps
    )


class WorkflowContract(ComponentContract):
    """Rules of a workflow.

    Class attributes besides the common ones:

    * ``task_args``: keyword arguments of the :class:`~trinity.common.workflows.Task` the rules
      run (``raw_task``, ``workflow_args``, ``reward_fn``, ``format_args``, ``rollout_args`` ...;
      ``workflow`` is the component). The task is built as a run builds it, so ``format_args``
      defaults to :class:`~trinity.common.config.FormatConfig`'s defaults (Trinity-RFT's:
      ``prompt_key="prompt"``, ``response_key="response"``); a workflow that reads the row
      through ``task.task_desc`` / ``task.truth`` needs the ``format_args`` its YAML gives
      (the examples' ``{"prompt_key": "question", "response_key": "answer"}``).
    * ``other_task_args``: a second task for the ``reset`` rule (default: ``task_args``).
    * ``responses``: what the fake model answers (a string, a list used in order, or
      ``fn(messages_or_prompt, sample_index) -> str``); ``None`` gives a default reply. A list
      is one script for the model and the clones concurrent runs get: the n-th call gets the
      n-th reply, so runs that call the model once get the same replies sequentially and
      concurrently. Runs that call it several times interleave their calls when concurrent:
      answer from the messages (a callable) for those (the ``concurrent-parity`` rule says so).
    * ``model_args``: other :class:`FakeModelWrapper` options (``max_tokens`` ...).
    * ``repeat_times``: runs per task in the rules (default 2).
    * ``model_factory``: ``fn() -> ModelWrapper`` to run on a real engine instead of the fake
      (e.g. the launcher's tiny model); ``responses`` and ``model_args`` are then unused.
    * ``auxiliary_responses``: one response spec per auxiliary model (e.g. an LLM judge); each
      becomes a :class:`FakeModelWrapper` passed as ``auxiliary_models``.

    ``component_args`` does not apply: workflows get their settings from the task.
    """

    kind = "workflow"
    registry_path = "trinity.common.workflows.workflow:WORKFLOWS"
    task_args: ClassVar[Mapping[str, Any]] = {}
    other_task_args: ClassVar[Optional[Mapping[str, Any]]] = None
    responses: ClassVar[ResponseSpec] = None
    model_args: ClassVar[Mapping[str, Any]] = {}
    repeat_times: ClassVar[int] = 2
    auxiliary_responses: ClassVar[tuple[ResponseSpec, ...]] = ()
    model_factory: ClassVar[Optional[Callable[[], ModelWrapper]]] = None

    # ------------------------------------------------------------------ helpers
    def _class_attr(self, name: str) -> Any:
        """A class attribute as set (a plain function stays a function, not a method)."""
        value = next(k.__dict__[name] for k in type(self).__mro__ if name in k.__dict__)
        return value.__func__ if isinstance(value, staticmethod) else value

    def model(self) -> ModelWrapper:
        factory = self._class_attr("model_factory")
        if factory is not None:
            return factory()
        return FakeModelWrapper(self._class_attr("responses"), **dict(self.model_args))

    def auxiliary(self) -> Optional[list[FakeModelWrapper]]:
        specs = list(self.auxiliary_responses or ())
        return [
            FakeModelWrapper(spec, model_path=f"fake/auxiliary-{i}") for i, spec in enumerate(specs)
        ] or None

    def task(self, other: bool = False, **overrides: Any) -> Task:
        args = dict(self.task_args)
        if other and self.other_task_args is not None:
            args = dict(self.other_task_args)
        args.setdefault("repeat_times", self.repeat_times)
        args.update(overrides)
        return Task(workflow=self.component, **self.clone(args))

    def seeded(self) -> None:
        random.seed(self.seed)
        torch.manual_seed(self.seed)

    def run(self, task: Optional[Task] = None, **kwargs: Any) -> list[Experience]:
        self.seeded()
        return run_task(task or self.task(), self.model(), self.auxiliary(), **kwargs)

    def build(self, **overrides: Any) -> Any:  # type: ignore[override]
        return self.task().to_workflow(self.model(), self.auxiliary())

    def direct(self, task: Task, use_async: bool) -> list[Experience]:
        """One ``run()`` call, or one call through the runner's entry point (``run_async``, or
        a ``run`` override below it: :func:`~trinity.common.workflows.run_workflow`), on a
        fresh instance set up as the runner sets it up."""
        self.seeded()
        workflow = task.to_workflow(self.model(), self.auxiliary())
        if workflow.repeatable:
            workflow.set_repeat_times(task.repeat_times or 1, 0)
        else:
            workflow.set_repeat_times(1, 0)
        return run_sync(run_workflow(workflow)) if use_async else workflow.run()

    # ------------------------------------------------------------------ rules
    @rule("builds", "Task.to_workflow builds it from the task")
    def test_builds_from_default_args(self) -> None:
        self.build()

    @rule("output", "it returns well-formed Experiences with finite float rewards")
    def test_output(self) -> None:
        exps = self.run()
        assert exps, "the workflow returned no experience"
        for exp in exps:
            uid = exp.eid.uid
            r = exp.response_length
            assert exp.tokens.dtype == torch.int64, f"{uid}: tokens are {exp.tokens.dtype}"
            assert 0 < exp.prompt_length <= exp.tokens.shape[0], (
                f"{uid}: prompt_length {exp.prompt_length} for {exp.tokens.shape[0]} tokens"
            )
            assert isinstance(exp.reward, float), (
                f"{uid}: reward is {exp.reward!r}; the trainer needs a float"
            )
            assert math.isfinite(exp.reward), f"{uid}: reward is {exp.reward}"
            for field in ("logprobs", "action_mask"):
                value = getattr(exp, field)
                if value is not None:
                    assert tuple(value.shape) == (r,), (
                        f"{uid}: {field} has shape {tuple(value.shape)}, expected ({r},)"
                    )
            if exp.logprobs is not None:
                assert bool(torch.isfinite(exp.logprobs).all()), f"{uid}: non-finite logprobs"
            check_metrics(exp.metrics, f"{uid}: Experience.metrics")

    @rule("serializable", "its experiences survive the buffer's serialization")
    def test_serializable(self) -> None:
        for exp in self.run():
            back = Experience.deserialize(exp.serialize())
            assert torch.equal(back.tokens, exp.tokens), f"{exp.eid.uid}: tokens changed"
            assert back.reward == exp.reward, f"{exp.eid.uid}: reward changed"

    @rule("run-ids", "repeat_times runs give run ids 0 .. repeat_times - 1")
    def test_run_ids(self) -> None:
        runs = {exp.eid.run for exp in self.run()}
        assert runs == set(range(self.repeat_times)), (
            f"repeat_times={self.repeat_times} gave run ids {sorted(runs)} (GRPO and friends "
            "group runs by these ids)"
        )

    @rule("run-async-parity", "run() and run_async() give the same experiences")
    def test_run_and_run_async_agree(self) -> None:
        sync = self.direct(self.task(), use_async=False)
        async_ = self.direct(self.task(), use_async=True)
        assert _summary(sync) == _summary(async_), "run() and run_async() differ"

    @rule("concurrent-parity", "concurrent runs give what sequential runs give")
    def test_concurrent_mode(self) -> None:
        model, task = self.model(), self.task()
        self.seeded()
        sequential = run_task(task, model, self.auxiliary(), concurrent_mode="sequential")
        self._check_script_order_free(model, task.repeat_times or 1)
        concurrent = self.run(concurrent_mode="asynchronous")
        # a scripted list answers calls in order, whichever run (clone of the model) makes
        # them; concurrent runs start in run order, but a synchronous run() goes to a worker
        # thread, where two runs may reach the model in either order: compare the experiences
        # without their run ids (the 'run-ids' rule checks those)
        assert _summary(sequential, runs=False) == _summary(concurrent, runs=False), (
            "explorer.concurrent_mode 'asynchronous' changed the experiences"
        )

    def _check_script_order_free(self, model: ModelWrapper, runs: int) -> None:
        """Refuse, saying why, a scripted list the rule cannot check with: runs that call the
        model several times each interleave their calls when concurrent, so a list answered in
        call order cannot give them what sequential runs get (the failure would be the
        script's, not the workflow's, and with a sync run() it would depend on threads)."""
        if not isinstance(model, FakeModelWrapper) or runs < 2:
            return
        spec = model.responses
        if spec is None or isinstance(spec, str) or callable(spec) or len(set(spec)) < 2:
            return
        if self.build().repeatable:  # all runs in one call: concurrent_mode does not apply
            return
        calls = sum(
            len(call.prompts or []) if call.kind == "generate" else 1
            for call in model.calls
            if call.kind in ("chat", "generate", "openai.chat.completions")
        )
        if calls <= runs:
            return
        raise AssertionError(
            f"cannot check with this script: the {runs} runs called the model "
            f"{calls} times, and `responses` is a list, answered in call order (the n-th call "
            "gets the n-th reply, whichever run makes it); concurrent runs interleave their "
            "calls, so they cannot get the replies sequential runs get. Script `responses` as "
            "fn(messages, sample_index) -> str answering from the conversation, or exempt the "
            "rule: skip_rules = {'concurrent-parity': 'why'}"
        )

    @rule("reset", "a reset instance gives what a fresh instance gives")
    def test_reset_reuse(self) -> None:
        model, aux = self.model(), self.auxiliary()
        first = self.task()
        workflow = first.to_workflow(model, aux)
        if not is_resettable(workflow):
            pytest.skip(f"{self._component_name()} is not resettable (resettable() is False)")
        self.seeded()
        _, reused = run_sync(run_task_async(first, model, aux))
        assert is_resettable(reused), "resettable() changed after a run"
        self.seeded()
        again, same = run_sync(run_task_async(self.task(other=True), model, aux, workflow=reused))
        assert same is reused, "run_task did not reuse the resettable workflow"
        # the same two tasks on a second model, with a new instance for the second task (the
        # model's state, e.g. a scripted reply cursor, advances alike on both paths)
        model2, aux2 = self.model(), self.auxiliary()
        self.seeded()
        run_sync(run_task_async(self.task(), model2, aux2))
        self.seeded()
        fresh, _ = run_sync(run_task_async(self.task(other=True), model2, aux2))
        assert _summary(again) == _summary(fresh), (
            "reset(task) then run() differs from a new instance on the same task (state "
            "from the previous task leaked)"
        )

    @rule("deterministic", "the same seed gives the same experiences")
    def test_deterministic(self) -> None:
        assert _summary(self.run()) == _summary(self.run()), "two seeded runs differ"


class RewardFnContract(ComponentContract):
    """Rules of a reward function (``taskset.default_reward_fn_type``).

    Class attributes besides the common ones:

    * ``call_args``: the keyword arguments of a few calls (``response``, ``truth`` and whatever
      else the function reads, e.g. ``raw_task``); each is one scored response.
    """

    kind = "reward function"
    registry_path = "trinity.common.rewards.reward_fn:REWARD_FUNCTIONS"
    call_args: ClassVar[list[Mapping[str, Any]]] = [
        {"response": "42", "truth": "42"},
        {"response": "I do not know", "truth": "42"},
    ]

    def score(self, fn: Any, kwargs: Mapping[str, Any]) -> dict:
        out = fn(**self.clone(dict(kwargs)))
        assert isinstance(out, Mapping), (
            f"a reward function returns a dict of named components, got {type(out).__name__}"
        )
        assert out, "the reward dict is empty (the workflow sums its values into the reward)"
        check_metrics(out, "reward components")
        return dict(out)

    @rule("output", "it returns a non-empty dict of finite numbers")
    def test_output(self) -> None:
        fn = self.build()
        for kwargs in self.call_args:
            self.score(fn, kwargs)

    @rule("empty-response", "an empty response gets a finite reward, not an error")
    def test_empty_response(self) -> None:
        fn = self.build()
        for kwargs in self.call_args:
            self.score(fn, {**kwargs, "response": ""})

    @rule("deterministic", "the same response gets the same reward")
    def test_deterministic(self) -> None:
        for kwargs in self.call_args:
            random.seed(self.seed)
            first = self.score(self.build(), kwargs)
            random.seed(self.seed)
            second = self.score(self.build(), kwargs)
            assert first == second, f"{dict(kwargs)} scored {first} then {second}"
