"""Helpers shared by the config modules (derived values, intent dumps, merging)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Union

from pydantic import (
    BaseModel,
)

from ._errors import ConfigIssue, _fmt_loc

if TYPE_CHECKING:
    from ._core import Config


logger = logging.getLogger("trinity.common.config")


# --------------------------------------------------------------------------------------
# Helpers for the cross-field rules
# --------------------------------------------------------------------------------------


def cuda_is_available() -> bool:
    """Whether CUDA can be used here (torch imported lazily; False without torch)."""
    try:
        import torch
    except Exception:  # pragma: no cover - torch is a dependency, but be defensive
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover
        return False


def _set_derived(obj: BaseModel, name: str, value: Any) -> None:
    """Set a derived value without marking it as user-set: the one config API for derived
    values (the rules, ``check_and_update``). Nothing writes a model's ``__dict__``.

    Derived values are recomputed on every validation; keeping them out of
    ``model_fields_set`` lets stages and ``check_and_update`` start from what the user
    actually wrote (see ``_intent_dump``).

    How, with pydantic's documented API only: ordinary attribute assignment (a field of the
    model; ``extra="forbid"`` refuses any other name; the sections do not set
    ``validate_assignment``, so the value is stored as given, never re-validated into
    something else), then ``model_fields_set`` (the model's own live set,
    ``__pydantic_fields_set__``) is put back as it was for ``name``: assignment marks a field
    set, a derived value must not, and a value the user wrote stays user-set when a rule
    adjusts it.
    """
    user_set = name in obj.model_fields_set
    setattr(obj, name, value)
    if not user_set:
        obj.model_fields_set.discard(name)


def _intent_dump(model: BaseModel) -> dict[str, Any]:
    """Dump the values a user (or a program, by assignment) set explicitly, recursively."""
    out: dict[str, Any] = {}
    fields_set = model.model_fields_set
    for name in type(model).model_fields:
        value = getattr(model, name)
        explicit = name in fields_set
        if isinstance(value, BaseModel):
            sub = _intent_dump(value)
            if explicit or sub:
                out[name] = sub
        elif explicit:
            out[name] = _dump_value(value)
    return out


def _dump_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return _intent_dump(value)
    if isinstance(value, list):
        return [_dump_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump_value(v) for k, v in value.items()}
    return copy.deepcopy(value)


def _changes(current: Any, snapshot: Any) -> Any:
    """The parts of ``current`` that differ from ``snapshot`` (dicts recursively)."""
    if isinstance(current, dict) and isinstance(snapshot, dict):
        out: dict[str, Any] = {}
        for key, value in current.items():
            if key not in snapshot:
                out[key] = value
            elif value != snapshot[key]:
                out[key] = _changes(value, snapshot[key])
        return out
    return current


def _drop_values(data: Any, pairs: dict[str, Any]) -> None:
    """Remove, recursively, every ``key: value`` of ``pairs`` found in ``data``."""
    if isinstance(data, dict):
        for key, value in pairs.items():
            if key in data and data[key] == value:
                del data[key]
        for value in data.values():
            _drop_values(value, pairs)
    elif isinstance(data, list):
        for item in data:
            _drop_values(item, pairs)


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class _Checker:
    """Collects warnings and located errors while the cross-field rules run."""

    def __init__(self, config: Config, run_checks: bool, quiet: bool) -> None:
        self.config = config
        self.run_checks = run_checks
        self.quiet = quiet
        self.warnings: list[str] = []
        self.issues: list[ConfigIssue] = []

    def warn(self, message: str) -> None:
        self.warnings.append(message)
        if not self.quiet:
            logger.warning(message)

    def error(self, loc: tuple[Union[str, int], ...], value: Any, message: str) -> None:
        self.issues.append(
            ConfigIssue(
                path=_fmt_loc(loc), message=message, value=value, kind="cross_field", loc=loc
            )
        )
