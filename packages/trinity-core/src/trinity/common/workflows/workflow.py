"""Tasks, workflows and the ``WORKFLOWS`` registry.

A :class:`Task` is one row of a task set plus the task set's settings; ``task.to_workflow(model)``
builds the registered :class:`Workflow` that runs it. A workflow talks to the model being trained
(a :class:`~trinity.common.models.model.ModelWrapper`), gets feedback from its environment, and
returns :class:`~trinity.common.experience.Experience` objects.

:func:`run_task` / :func:`run_task_async` are the one place that drives a task the way the
explorer's runners do (repeats, run ids, reset of reusable workflows), so tests of every package
exercise the same path as production.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from trinity.common.config import FormatConfig, GenerationConfig
from trinity.common.experience import Experience
from trinity.common.models.calls import call_model, prefer_sync_model_calls
from trinity.common.models.model import ModelWrapper
from trinity.common.rewards.reward_fn import REWARD_FUNCTIONS, RewardFn
from trinity.utils.aio import run_sync
from trinity.utils.log import get_logger
from trinity.utils.registry import Registry

__all__ = [
    "CONCURRENT_MODES",
    "WORKFLOWS",
    "Task",
    "Workflow",
    "MultiTurnWorkflow",
    "run_task",
    "run_task_async",
]

WORKFLOWS: Registry[type[Workflow]] = Registry("workflows")


@dataclass
class Task:
    """One task of a task set, with the settings needed to build and run its workflow.

    ``workflow`` and ``reward_fn`` may be registered names (as written in YAML) or classes;
    names are resolved through the registries when the task becomes a workflow, so a task stays
    a small, picklable record until then.
    """

    workflow: Union[str, type[Workflow], None] = None
    repeat_times: Optional[int] = None
    format_args: FormatConfig = field(default_factory=FormatConfig)
    rollout_args: GenerationConfig = field(default_factory=GenerationConfig)
    workflow_args: dict = field(default_factory=dict)
    reward_fn_args: dict = field(default_factory=dict)
    is_eval: bool = False
    reward_fn: Union[str, type[RewardFn], None] = None
    raw_task: Optional[dict] = None

    # assigned by the explorer
    batch_id: Union[int, str] = ""
    task_id: Union[int, str] = ""
    index: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        # YAML/dict input is accepted for the two config blocks as well as model instances.
        if isinstance(self.format_args, dict):
            self.format_args = FormatConfig(**self.format_args)
        if isinstance(self.rollout_args, dict):
            self.rollout_args = GenerationConfig(**self.rollout_args)
        if self.repeat_times is not None and self.repeat_times < 1:
            raise ValueError(f"Task.repeat_times must be >= 1, got {self.repeat_times}")

    # ------------------------------------------------------------------ resolution
    @property
    def workflow_cls(self) -> type[Workflow]:
        """The workflow class (a registered name is looked up in ``WORKFLOWS``)."""
        if self.workflow is None:
            raise ValueError(
                "This task has no workflow: set buffer.explorer_input.taskset."
                "default_workflow_type (or a per-row workflow) to a registered name. "
                f"Known workflows: {', '.join(WORKFLOWS.list()) or 'none installed'}."
            )
        if isinstance(self.workflow, str):
            return WORKFLOWS[self.workflow]
        return self.workflow

    @property
    def reward_fn_cls(self) -> Optional[type[RewardFn]]:
        """The reward-function class, or None (a registered name is looked up)."""
        if isinstance(self.reward_fn, str):
            return REWARD_FUNCTIONS[self.reward_fn]
        return self.reward_fn

    def to_workflow(
        self,
        model: ModelWrapper,
        auxiliary_models: Optional[Sequence[Any]] = None,
    ) -> Workflow:
        """Build this task's workflow around ``model``.

        Registered names in ``workflow`` / ``reward_fn`` are replaced by their classes first, so
        workflow code can call ``task.reward_fn(**task.reward_fn_args)``. The workflow class is
        called with keyword arguments, which fits both the current guide's
        ``__init__(self, task, model, auxiliary_models)`` and the older
        ``__init__(self, model, task, auxiliary_models)``.
        """
        cls = self.workflow_cls
        self.workflow = cls
        self.reward_fn = self.reward_fn_cls
        kwargs: dict[str, Any] = {
            "task": self,
            "model": model,
            "auxiliary_models": list(auxiliary_models) if auxiliary_models else None,
        }
        params = inspect.signature(cls.__init__).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            kwargs = {k: v for k, v in kwargs.items() if k in params}
        return cls(**kwargs)

    # ------------------------------------------------------------------ conveniences
    @property
    def task_desc(self) -> Optional[str]:
        """The prompt of the task: ``raw_task[format_args.prompt_key]``."""
        return (self.raw_task or {}).get(self.format_args.prompt_key)

    @property
    def truth(self) -> Optional[str]:
        """The reference answer: ``raw_task[format_args.response_key]``."""
        return (self.raw_task or {}).get(self.format_args.response_key)

    def to_dict(self) -> dict:
        return dict(self.raw_task or {})


#: default of ``Workflow(task=..., model=...)``: told apart from an explicit ``None``
_UNSET: Any = object()


class _CallableFlag:
    """A bool that can also be called (``flag`` and ``flag()`` give the same answer)."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __bool__(self) -> bool:
        return self.value

    def __call__(self) -> bool:
        return self.value

    def __eq__(self, other: object) -> bool:
        return self.value == (bool(other) if isinstance(other, _CallableFlag) else other)

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


class Workflow:
    """Base class of workflows: run a task with the model, return Experiences.

    Subclasses implement :meth:`run` (synchronous) or :meth:`run_async` (set ``is_async = True``
    for clarity); the other one is derived. Class attributes tell the runner what the workflow
    supports:

    * ``can_reset`` / :meth:`resettable` — the instance can be reused for another task through
      :meth:`reset` instead of being rebuilt (worth it for heavy environments);
    * ``can_repeat`` — one :meth:`run` produces all ``repeat_times`` samples (e.g. with ``n=``
      in one generation call); otherwise the runner calls :meth:`run` ``repeat_times`` times.

    The constructor is keyword-only in the current API, ``Workflow(task=..., model=...,
    auxiliary_models=...)``; the older positional order ``Workflow(model, task,
    auxiliary_models)`` is accepted as well.

    ``auxiliary_models`` given as :class:`ModelWrapper` objects (what the explorer passes) are
    kept in ``self.auxiliary_model_wrappers`` and exposed as OpenAI clients in
    ``self.auxiliary_models`` (async clients for async workflows), as the guide describes.
    """

    can_reset: bool = False
    can_repeat: bool = False
    is_async: bool = False

    def __init__(
        self,
        *args: Any,
        task: Optional[Task] = _UNSET,
        model: Optional[ModelWrapper] = _UNSET,
        auxiliary_models: Optional[Sequence[Any]] = None,
    ) -> None:
        # Both are required, but may be None (Trinity-RFT 0.6 takes ``Workflow(task=None,
        # model=None)``, e.g. to run a workflow that needs neither)
        if args:
            task, model, auxiliary_models = _positional_init_args(
                type(self).__name__,
                args,
                None if task is _UNSET else task,
                None if model is _UNSET else model,
                auxiliary_models,
            )
            missing = task is None or model is None
        else:
            missing = task is _UNSET or model is _UNSET
        if missing:
            raise TypeError(
                f"{type(self).__name__}() needs task= and model= "
                "(Workflow(task=task, model=model, auxiliary_models=None))"
            )
        if not _overrides(type(self), "run") and not _overrides(type(self), "run_async"):
            raise TypeError(f"{type(self).__name__} must implement run() or run_async()")
        self.task = task
        self.model = model
        self.auxiliary_model_wrappers: Optional[list[ModelWrapper]] = None
        self.auxiliary_models: Optional[list[Any]] = None
        if auxiliary_models:
            wrappers = [m for m in auxiliary_models if isinstance(m, ModelWrapper)]
            if len(wrappers) == len(auxiliary_models):
                self.auxiliary_model_wrappers = wrappers
                self.auxiliary_models = [
                    m.get_openai_async_client() if self.is_async else m.get_openai_client()
                    for m in wrappers
                ]
            else:  # already clients (the older API passed openai.OpenAI objects)
                self.auxiliary_models = list(auxiliary_models)
        self.repeat_times = 1
        self.run_id_base = 0
        self.logger = get_logger(type(self).__module__)

    # ------------------------------------------------------------------ running
    def run(self) -> list[Experience]:
        """Run the workflow and return a list of Experiences.

        An async-only workflow runs its :meth:`run_async` here, asking a duck-typed model for
        its synchronous methods first (:func:`~trinity.common.models.calls.call_model`): the
        caller chose the synchronous API, as code for Trinity-RFT's synchronous workflows does
        with a model that offers only ``chat``.
        """
        if _overrides(type(self), "run_async"):
            return run_sync(self._run_async_preferring_sync())
        raise NotImplementedError(f"{type(self).__name__} implements neither run nor run_async")

    async def _run_async_preferring_sync(self) -> list[Experience]:
        async with prefer_sync_model_calls():
            return await self.run_async()

    async def run_async(self) -> list[Experience]:
        """Async twin of :meth:`run`; a sync-only workflow runs in a worker thread."""
        if _overrides(type(self), "run"):
            return await asyncio.to_thread(self.run)
        raise NotImplementedError(f"{type(self).__name__} implements neither run nor run_async")

    @property
    def asynchronous(self) -> bool:
        """Trinity-RFT's deprecated spelling of ``is_async``."""
        return bool(type(self).is_async)

    # ------------------------------------------------------------------ reuse
    @property
    def resettable(self) -> _CallableFlag:
        """Whether :meth:`reset` can re-target this instance at another task (``can_reset``).

        The guides call it (``workflow.resettable()``) and override it as a method;
        Trinity-RFT 0.6 reads it as a property (``if workflow.resettable:``) and overrides it
        as one. The value works both ways, and the runners read any override through
        :func:`is_resettable`.
        """
        return _CallableFlag(bool(type(self).can_reset))

    def reset(self, task: Task) -> None:
        """Re-initialise for ``task`` (implement together with ``resettable() -> True``)."""
        raise NotImplementedError(f"{type(self).__name__} is not resettable")

    @property
    def repeatable(self) -> bool:
        return bool(self.can_repeat)

    def set_repeat_times(self, repeat_times: int, run_id_base: int) -> None:
        """Ask a repeatable workflow for ``repeat_times`` samples with run ids from ``run_id_base``."""
        self.repeat_times = repeat_times
        self.run_id_base = run_id_base


class MultiTurnWorkflow(Workflow):
    """Base for multi-turn workflows that train on a whole conversation as one sequence.

    :meth:`process_messages_to_experience` tokenizes the conversation with the model's chat
    template and marks only the model's own tokens in ``action_mask`` (environment, user and
    tool tokens are context, not actions).
    """

    def process_messages_to_experience(
        self,
        messages: list[dict],
        reward: float,
        info: Optional[dict] = None,
        truncate_status: Optional[str] = None,
        tools: Optional[list[dict]] = None,
    ) -> Experience:
        converted = self.model.convert_messages_to_experience(messages, tools=tools)
        return _finish_multi_turn(converted, reward, info, truncate_status)

    async def process_messages_to_experience_async(
        self,
        messages: list[dict],
        reward: float,
        info: Optional[dict] = None,
        truncate_status: Optional[str] = None,
        tools: Optional[list[dict]] = None,
    ) -> Experience:
        converted = await call_model(
            self.model, "convert_messages_to_experience", messages, tools=tools
        )
        return _finish_multi_turn(converted, reward, info, truncate_status)


def _finish_multi_turn(
    exp: Experience, reward: float, info: Optional[dict], truncate_status: Optional[str]
) -> Experience:
    info = dict(info or {})
    exp.truncate_status = exp.truncate_status or truncate_status
    # A conversation cut off by the length limit did not finish the task: no credit for it.
    exp.reward = 0.0 if exp.truncate_status == "response_truncated" else float(reward)
    exp.info = {**(exp.info or {}), **info}
    numeric = {
        k: float(v)
        for k, v in info.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    exp.metrics = {**(exp.metrics or {}), **numeric}
    return exp


# ---------------------------------------------------------------------- driving a task
#: ``explorer.concurrent_mode`` values: how a non-repeatable workflow's runs of one task execute
CONCURRENT_MODES = ("sequential", "asynchronous", "multi-threading")


async def run_task_async(
    task: Task,
    model: ModelWrapper,
    auxiliary_models: Optional[Sequence[Any]] = None,
    workflow: Optional[Workflow] = None,
    *,
    run_id_base: int = 0,
    concurrent_mode: str = "sequential",
) -> tuple[list[Experience], Workflow]:
    """Run one task the way the explorer's runners do.

    Reuses ``workflow`` through :meth:`Workflow.reset` when it is resettable and of the task's
    class, else builds a new one. Produces ``task.repeat_times`` runs with run ids
    ``run_id_base, run_id_base + 1, ...`` (``run_id_base`` > 0 when the explorer splits one
    task's runs across runners, ``explorer.max_repeat_times_per_runner``), stamps each
    Experience's id with the task's batch/task ids (a task id the workflow set is kept: a
    second group of its own, e.g. ``math_trainable_ruler_workflow``'s judge samples) and its
    run index, and records the model version that produced it.

    A repeatable workflow samples every run in one call. Any other runs ``repeat_times`` times:
    one after the other (``concurrent_mode="sequential"``: each later run on the instance reset
    for it, or on a new one when it is not resettable, as in Trinity-RFT 0.6), or all at once
    (``"asynchronous"`` / ``"multi-threading"``; a sync workflow's ``run`` goes to a worker
    thread either way), each run on its own workflow instance and its own view of the model
    (:meth:`ModelWrapper.clone_with_isolated_history`), so histories never mix. Concurrent runs
    are what multi-turn agent workflows need: a step otherwise waits for ``repeat_times``
    whole episodes in a row.

    Returns:
        The experiences and the workflow instance (to reuse for the next task).
    """
    if concurrent_mode not in CONCURRENT_MODES:
        raise ValueError(
            f"explorer.concurrent_mode: {concurrent_mode!r} is not one of "
            f"{', '.join(CONCURRENT_MODES)}"
        )
    cls = task.workflow_cls
    if workflow is not None and type(workflow) is cls and is_resettable(workflow):
        task.workflow = cls
        task.reward_fn = task.reward_fn_cls
        workflow.task = task
        workflow.reset(task)
    else:
        workflow = task.to_workflow(model, auxiliary_models)
    repeat_times = task.repeat_times or 1
    run_ids = range(run_id_base, run_id_base + repeat_times)

    async def one_run(flow: Workflow, run_id: int) -> list[Experience]:
        flow.set_repeat_times(1, run_id_base=run_id)
        run_exps = _checked(cls, await run_workflow(flow))
        for exp in run_exps:
            exp.eid.run = run_id
        return run_exps

    experiences: list[Experience] = []
    if workflow.repeatable:
        workflow.set_repeat_times(repeat_times, run_id_base=run_id_base)
        experiences = _checked(cls, await run_workflow(workflow))
    elif concurrent_mode == "sequential" or repeat_times == 1:
        for i, run_id in enumerate(run_ids):
            if i > 0:  # each run starts afresh, as the first did (an episode's state is its own)
                workflow = _next_run(workflow, task, model, auxiliary_models)
            experiences.extend(await one_run(workflow, run_id))
    else:
        clone = getattr(model, "clone_with_isolated_history", None)
        flows = [workflow] + [
            task.to_workflow(clone() if callable(clone) else model, auxiliary_models)
            for _ in run_ids[1:]
        ]
        results = await asyncio.gather(
            *(one_run(f, r) for f, r in zip(flows, run_ids, strict=True))
        )
        experiences = [exp for run_exps in results for exp in run_exps]
    # duck-typed models (anything with chat()) work too; they just report no version
    version = getattr(model, "model_version", None)
    for exp in experiences:
        exp.eid.batch = task.batch_id
        if exp.eid.task == "":  # a workflow may label a group of its own ("3-ruler"), as in 0.6
            exp.eid.task = task.task_id
        if exp.model_version is None:
            exp.model_version = version
    return experiences, workflow


def run_task(
    task: Task,
    model: ModelWrapper,
    auxiliary_models: Optional[Sequence[Any]] = None,
    workflow: Optional[Workflow] = None,
    *,
    run_id_base: int = 0,
    concurrent_mode: str = "sequential",
) -> list[Experience]:
    """Synchronous :func:`run_task_async` returning only the experiences."""
    experiences, _ = run_sync(
        run_task_async(
            task,
            model,
            auxiliary_models,
            workflow,
            run_id_base=run_id_base,
            concurrent_mode=concurrent_mode,
        )
    )
    return experiences


# ---------------------------------------------------------------------- helpers
def _next_run(
    workflow: Workflow, task: Task, model: Any, auxiliary_models: Optional[Sequence[Any]]
) -> Workflow:
    """The instance for a task's next sequential run: ``workflow`` re-initialised through
    :meth:`Workflow.reset` when it is resettable, else a new one (as Trinity-RFT 0.6's runner
    does), so no run sees what the one before it left (an environment's state, a turn
    counter, a history)."""
    if is_resettable(workflow):
        workflow.reset(task)
        return workflow
    return task.to_workflow(model, auxiliary_models)


def _checked(cls: type, result: Any) -> list[Experience]:
    """A workflow's output as a list, refusing anything but Experiences (named in the error)."""
    if not isinstance(result, (list, tuple)):
        raise TypeError(
            f"{cls.__name__}.run() must return a list of Experience, got {type(result).__name__}"
        )
    for item in result:
        if not isinstance(item, Experience):
            raise TypeError(
                f"{cls.__name__}.run() must return a list of Experience, "
                f"got an item of type {type(item).__name__}"
            )
    return list(result)


def is_resettable(workflow: Workflow) -> bool:
    """Whether ``workflow`` can be reused through ``reset``: ``resettable`` is a method in
    the guides' API and a property in Trinity-RFT's classes, and subclasses override either."""
    value = workflow.resettable
    return bool(value() if callable(value) else value)


def entry_point(cls: type) -> str:
    """``"run"`` or ``"run_async"``: the one the most derived class defining either defines.

    A subclass of a built-in (async) workflow that overrides only ``run`` -- as code written
    for Trinity-RFT, whose ``SimpleWorkflow`` is synchronous, does -- is run through its
    ``run``; a class defining both is run through ``run_async``.
    """
    for klass in cls.__mro__:
        if klass is Workflow:
            break
        if "run_async" in vars(klass):
            return "run_async"
        if "run" in vars(klass):
            return "run"
    return "run_async"


async def run_workflow(workflow: Workflow) -> Any:
    """One call of ``workflow`` through :func:`entry_point` (a synchronous ``run`` in a worker
    thread, so it may block and call the model's sync API)."""
    if entry_point(type(workflow)) == "run":
        return await asyncio.to_thread(workflow.run)
    return await workflow.run_async()


def _overrides(cls: type, name: str) -> bool:
    return getattr(cls, name) is not getattr(Workflow, name)


def _positional_init_args(
    cls_name: str,
    args: tuple,
    task: Optional[Task],
    model: Optional[ModelWrapper],
    auxiliary_models: Optional[Sequence[Any]],
) -> tuple[Optional[Task], Optional[ModelWrapper], Optional[Sequence[Any]]]:
    """Map positional arguments, recognising task and model by type (either order)."""
    if len(args) > 3:
        raise TypeError(f"{cls_name}() takes at most 3 positional arguments ({len(args)} given)")
    rest = []
    for arg in args:
        if isinstance(arg, Task) and task is None:
            task = arg
        elif model is None and not isinstance(arg, (Task, list, tuple)) and arg is not None:
            model = arg
        else:
            rest.append(arg)
    if rest:
        if auxiliary_models is not None or len(rest) > 1:
            raise TypeError(f"{cls_name}(): cannot map positional arguments {args!r}")
        auxiliary_models = rest[0]
    return task, model, auxiliary_models


#: Trinity-RFT class names with no class of their own here: its ``BaseSimpleWorkflow`` is a
#: ``SimpleWorkflow`` without ``run`` (a subclass brings its own ``run``).
_UPSTREAM_ALIASES = {"BaseSimpleWorkflow": "SimpleWorkflow"}


def __getattr__(name: str) -> Any:
    """Built-in workflow classes by name (``trinity.common.workflows.workflow.SimpleWorkflow``,
    Trinity-RFT's path), resolved through the ``trinity.workflows`` entry points."""
    return WORKFLOWS.module_getattr(__name__, _UPSTREAM_ALIASES.get(name, name))
