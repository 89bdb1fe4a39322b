"""Small helpers shared by the built-in workflows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from trinity.common.config import GenerationConfig
from trinity.common.workflows import WORKFLOWS

__all__ = [
    "WorkflowArgsError",
    "generation_kwargs",
    "read_workflow_args",
    "registered_name",
    "require_keys",
    "MissingTaskFieldError",
    "ResettableWorkflowMixin",
]


class MissingTaskFieldError(KeyError, ValueError):
    """A task row lacks a field its workflow needs (names the field and the workflow)."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


class WorkflowArgsError(ValueError):
    """A task's ``workflow_args`` break what its workflow declares (each bad key is named, with
    the bad value and what is allowed)."""


def read_workflow_args(cls: type, workflow_args: Optional[Mapping[str, Any]], who: str) -> Any:
    """``workflow_args`` checked against ``cls.Args`` (a ``ComponentArgs`` model), as a model.

    The launcher checks a config's ``workflow_args`` against the same model before a run starts;
    this check covers tasks built by hand and per-row workflows, so a typo or a bad value fails
    when the workflow is built, naming the key, not as a silent default. ``None`` when ``cls``
    declares no ``Args`` (its arguments are free-form).

    Raises:
        WorkflowArgsError: one line per bad key (unknown key with the closest valid one, wrong
            type, value out of range).
    """
    from trinity.common.config import check_component_args

    model = getattr(cls, "Args", None)
    if model is None:
        return None
    issues, _ = check_component_args(
        cls, workflow_args, ("workflow_args",), label=who, derive=False
    )
    if issues:
        raise WorkflowArgsError(f"{who}: " + "; ".join(str(issue) for issue in issues))
    return model.model_validate(dict(workflow_args or {}))


def generation_kwargs(
    rollout_args: Optional[GenerationConfig | Mapping[str, Any]], n: Optional[int] = None
) -> dict[str, Any]:
    """Sampling keyword arguments for ``ModelWrapper.chat`` from a task's ``rollout_args``.

    ``n`` (the number of samples, usually the run's ``repeat_times``) overrides
    ``rollout_args.n``; ``None`` values (an unset ``max_tokens``) are left out so the engine's
    defaults apply. ``logprobs`` is not forwarded: it is the *top*-k count of the OpenAI API and
    every engine already returns the sampled tokens' logprobs.
    """
    if rollout_args is None:
        args: dict[str, Any] = {}
    elif isinstance(rollout_args, Mapping):
        args = dict(rollout_args)
    else:
        args = rollout_args.model_dump()
    args.pop("logprobs", None)
    if args.get("top_k") == -1:  # "disabled" in the config, i.e. the engine default
        args.pop("top_k")
    if n is not None:
        args["n"] = int(n)
    return {k: v for k, v in args.items() if v is not None}


def require_keys(raw_task: Optional[Mapping[str, Any]], keys: Mapping[str, str], who: str) -> None:
    """Refuse a task row without the fields a workflow needs.

    Args:
        raw_task: the task's row.
        keys: ``{row key: config field that names it}`` (``{"question": "format.prompt_key"}``).
        who: the workflow's registered name, for the message.
    """
    row = raw_task or {}
    missing = [f"{key!r} (set by {field})" for key, field in keys.items() if key not in row]
    if missing:
        raise MissingTaskFieldError(
            f"{who}: the task row lacks {', '.join(missing)}; the row has keys "
            f"{sorted(row) or 'none'}. Point the format keys at the row's columns."
        )


def registered_name(cls: type) -> str:
    """The name ``cls`` is registered under in ``WORKFLOWS`` (for messages), else its class name."""
    for name, module in WORKFLOWS.modules.items():
        if module is cls:
            return name
    return cls.__name__


class ResettableWorkflowMixin:
    """Construct-then-``reset`` for the built-in workflows.

    Every built-in reads its task in ``reset(task)`` so a runner can re-target one instance at
    the next task instead of building a new one (``resettable = True``). Putting the
    ``__init__`` here keeps the two paths identical: construction is ``reset`` on the first task.
    Subclasses that need state before the first ``reset`` override :meth:`_setup`.
    """

    def __init__(
        self,
        *args: Any,
        task: Any = None,
        model: Any = None,
        auxiliary_models: Optional[list] = None,
    ) -> None:
        super().__init__(*args, task=task, model=model, auxiliary_models=auxiliary_models)  # type: ignore[call-arg]
        self._setup()
        self.reset(self.task)  # type: ignore[attr-defined]

    def _setup(self) -> None:
        """State created once per instance, before the first ``reset``."""

    @property
    def workflow_name(self) -> str:
        """The registered name of this workflow (for messages), else its class name."""
        return registered_name(type(self))
