"""Declared arguments of pluggable components (the ``*_args`` mappings of a config).

A component (policy loss, advantage function, sample strategy, experience operator,
workflow, reward function, ...) declares its arguments **once**, and validation, the Studio's
forms and the docs all read that declaration:

* preferably as a class attribute ``Args``, a :class:`ComponentArgs` subclass (a pydantic
  model: names, types, defaults, ranges and descriptions)::

      class MyLoss(PolicyLossFn):
          class Args(ComponentArgs):
              tau: float = Field(1.0, gt=0.0, description="Temperature of the soft baseline.")
              loss_agg_mode: LossAggMode = "token-mean"

          def __init__(self, backend: str = "verl", tau: float = 1.0, loss_agg_mode=...): ...

* or implicitly, through a typed ``__init__``: its parameters (with
  ``Annotated[float, Field(ge=0)]`` for a range) become the model.

``Args`` counts for the class that defines it and for subclasses that keep its ``__init__``; a
subclass with its own ``__init__`` and no ``Args`` of its own is read from that ``__init__``.
A component whose ``__init__`` takes ``**kwargs`` and declares no ``Args`` is only partly
declared (an *open* model, :func:`is_open`): its named parameters are checked, any other key is
passed unchecked and validation warns. Every built-in declares an ``Args`` model.

Checking is strict: unknown keys are refused with the closest valid name, no bool where a
number belongs, no string where a number belongs, floats finite, documented ranges enforced.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Mapping
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from ._errors import ConfigIssue, _describe_type, _fmt_loc, _issues_from_validation_error

__all__ = [
    "ComponentArgs",
    "Field",
    "model_validator",
    "args_model",
    "check_component_args",
    "describe_args",
    "is_open",
]


class ComponentArgs(BaseModel):
    """Base of a component's ``Args`` model: strict types, finite floats, no unknown keys."""

    model_config = ConfigDict(
        extra="forbid", strict=True, allow_inf_nan=False, protected_namespaces=()
    )


def _owner(cls: type, attribute: str) -> Optional[type]:
    for klass in cls.__mro__:
        if attribute in vars(klass):
            return klass
    return None


def _declared_args(cls: type) -> Optional[type[BaseModel]]:
    owner = _owner(cls, "Args")
    if owner is None:
        return None
    declared = vars(owner)["Args"]
    if not (isinstance(declared, type) and issubclass(declared, BaseModel)):
        return None
    init_owner = _owner(cls, "__init__")
    if init_owner is not None and init_owner is not object and not issubclass(owner, init_owner):
        return None  # a subclass changed __init__ without declaring its own Args
    return declared


def _open_base(cls: type) -> type[BaseModel]:
    """Base of a model read from an ``__init__`` with ``**kwargs``: extra keys allowed (they go
    to ``**kwargs``); the nearest ``Args`` an ancestor declares is kept (kwargs are usually
    forwarded to it), so its keys are still type-checked."""
    owner = _owner(cls, "Args")
    parent = vars(owner)["Args"] if owner is not None else ComponentArgs
    if not (isinstance(parent, type) and issubclass(parent, BaseModel)):
        parent = ComponentArgs
    return type(
        f"Open{parent.__name__}",
        (parent,),
        {"model_config": ConfigDict(extra="allow"), "__module__": __name__},
    )


def is_open(model: Optional[type[BaseModel]]) -> bool:
    """Whether ``model`` lets unknown keys through (its component takes ``**kwargs``)."""
    return model is not None and model.model_config.get("extra") == "allow"


@functools.cache
def args_model(cls: type) -> Optional[type[BaseModel]]:
    """The arguments model of component class ``cls`` (None only where it cannot be read).

    ``cls.Args`` where it applies (see the module docstring); else a model built from the typed
    ``__init__`` (keys of ``default_args()`` the ``__init__`` does not take are kept as untyped
    fields: ``build_component`` sets them as attributes). An ``__init__`` with ``**kwargs``
    gives an *open* model (:func:`is_open`): its named parameters are checked, other keys are
    let through (validation warns about them).
    """
    declared = _declared_args(cls)
    if declared is not None:
        return declared
    init = getattr(cls, "__init__", None)
    if init is None or init is object.__init__:
        params: dict[str, inspect.Parameter] = {}
    else:
        try:
            params = dict(inspect.signature(init).parameters)
        except (TypeError, ValueError):
            return None
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    try:
        hints = typing.get_type_hints(init, include_extras=True) if params else {}
    except Exception:  # unresolvable string annotations: keep the names, drop the types
        hints = {}
    fields: dict[str, Any] = {}
    for index, (name, param) in enumerate(params.items()):
        if index == 0 and name in ("self", "cls"):
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            continue
        annotation = hints.get(name, Any)
        default = ... if param.default is param.empty else param.default
        fields[name] = (annotation, default)
    default_args = getattr(cls, "default_args", None)
    if callable(default_args):
        try:
            defaults = dict(default_args() or {})
        except Exception:
            defaults = {}
        for name, value in defaults.items():
            fields.setdefault(name, (Any, value))
    base = _open_base(cls) if takes_kwargs else ComponentArgs
    try:
        return create_model(f"{cls.__name__}Args", __base__=base, **fields)
    except Exception:  # annotations pydantic cannot validate: treat as undeclared
        return None


def check_component_args(
    cls: type,
    args: Optional[Mapping[str, Any]],
    loc: tuple[Union[str, int], ...],
    *,
    label: Optional[str] = None,
    derive: bool = True,
) -> tuple[list[ConfigIssue], list[str]]:
    """Check ``args`` against what ``cls`` declares; return (issues, warnings).

    ``loc`` is the config path of the mapping (e.g. ``("algorithm", "policy_loss_fn_args")``);
    each issue is located at the key it is about, names the bad value and what is allowed.
    With ``derive=False`` only an explicit ``Args`` model counts (a workflow's ``__init__``
    takes the task and model, not its ``workflow_args``): nothing is checked without one.
    """
    where = _fmt_loc(loc)
    name = label or cls.__name__
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        issue = ConfigIssue(
            path=where,
            message=f"expected a mapping of {name}'s arguments, got {type(args).__name__}",
            value=args,
            kind="type_error",
            loc=loc,
        )
        return [issue], []
    model = args_model(cls) if derive else _declared_args(cls)
    if model is None:
        return [], []
    warnings: list[str] = []
    unchecked = sorted(str(k) for k in args if k not in model.model_fields)
    if is_open(model) and unchecked:
        if model.model_fields:
            text = f"does not declare {unchecked} (its __init__ takes **kwargs)"
        else:
            text = "declares no arguments (no Args model, and its __init__ takes **kwargs)"
        warnings.append(f"{where}: {name} {text}, so {unchecked} are passed unchecked")
    try:
        model.model_validate(dict(args))
    except ValidationError as exc:
        issues = _issues_from_validation_error(exc, model, prefix=loc)
        for issue in issues:
            if issue.kind == "missing":
                issue.message = f"{name} requires this argument"
            issue.message = (
                f"{issue.message} ({name})" if name not in issue.message else issue.message
            )
        return issues, warnings
    return [], warnings


def _metadata(annotation: Any) -> list[Any]:
    """Constraint objects inside ``annotation`` (``Optional[Annotated[float, Field(ge=0)]]``)."""
    found: list[Any] = []
    if typing.get_origin(annotation) is typing.Annotated:
        for meta in typing.get_args(annotation)[1:]:
            found += list(getattr(meta, "metadata", [meta]))
    for arg in typing.get_args(annotation):
        if not isinstance(arg, (str, int, float)) and arg is not None:
            found += _metadata(arg)
    return found


def _constraints(info: FieldInfo) -> str:
    parts = []
    for meta in [*info.metadata, *_metadata(info.annotation)]:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            bound = getattr(meta, attr, None)
            if bound is not None:
                parts.append(f"{sign} {bound}")
    return ", ".join(parts)


def describe_args(model: Optional[type[BaseModel]]) -> list[dict[str, Any]]:
    """One row per declared argument (name, type, default, range, description).

    For forms (the Studio) and generated docs; empty for an undeclared component.
    """
    rows: list[dict[str, Any]] = []
    if model is None:
        return rows
    for field_name, info in model.model_fields.items():
        default = info.default
        if default is PydanticUndefined:
            default = info.default_factory() if info.default_factory else None  # type: ignore[call-arg]
        rows.append(
            {
                "name": field_name,
                "type": _describe_type(info.annotation),
                "default": default,
                "required": info.is_required(),
                "range": _constraints(info),
                "description": info.description or "",
            }
        )
    return rows
