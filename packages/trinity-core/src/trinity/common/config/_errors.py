"""ConfigError / ConfigIssue and the translation of pydantic errors into them."""

from __future__ import annotations

import dataclasses
import difflib
import types
from collections.abc import Iterable
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin

from pydantic import (
    AliasChoices,
    BaseModel,
    ValidationError,
)

# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class ConfigIssue:
    """One problem in a config: where it is, the offending value, and what is wrong."""

    path: str
    message: str
    value: Any = None
    file: Optional[str] = None
    line: Optional[int] = None
    kind: str = "invalid"
    loc: tuple[Union[str, int], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly form for programs (the Studio UI, the CLI's --json output)."""
        return {
            "path": self.path,
            "message": self.message,
            "value": self.value,
            "file": self.file,
            "line": self.line,
            "kind": self.kind,
        }

    def __str__(self) -> str:
        where = self.file or ""
        if where and self.line:
            where = f"{where}:{self.line}"
        prefix = f"{where}: " if where else ""
        path = f"{self.path}: " if self.path else ""
        return f"{prefix}{path}{self.message}"


class ConfigError(ValueError):
    """A config is invalid. ``errors`` lists every problem; ``str()`` is for people."""

    def __init__(self, errors: list[ConfigIssue], source: Optional[str] = None) -> None:
        self.errors: list[ConfigIssue] = list(errors)
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        n = len(self.errors)
        head = "Invalid Trinity config"
        if self.source:
            head += f" {self.source}"
        head += f" ({n} problem{'s' if n != 1 else ''}):"
        return "\n".join([head] + [f"  - {issue}" for issue in self.errors])

    def __str__(self) -> str:
        return self._render()


class _CrossFieldErrors(ValueError):
    """Raised inside validators to carry several located issues through pydantic."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        super().__init__("; ".join(f"{i.path}: {i.message}" for i in issues))
        self.issues = issues


def _fmt_loc(loc: tuple[Union[str, int], ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unwrap(ann: Any) -> Any:
    while True:
        origin = get_origin(ann)
        if origin is Annotated:
            ann = get_args(ann)[0]
            continue
        if origin is Union or origin is types.UnionType:
            args = [a for a in get_args(ann) if a is not type(None)]
            if len(args) == 1:
                ann = args[0]
                continue
        return ann


def _literal_choices(ann: Any) -> list[str]:
    """The string values of a ``Literal`` annotation (empty for anything else)."""
    ann = _unwrap(ann)
    if get_origin(ann) is Literal:
        return [a for a in get_args(ann) if isinstance(a, str)]
    return []


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``known`` to ``name``, or ``""``."""
    match = difflib.get_close_matches(str(name), sorted(map(str, known)), n=1, cutoff=0.6)
    return f"; did you mean '{match[0]}'?" if match else ""


def _is_model(ann: Any) -> bool:
    return isinstance(ann, type) and issubclass(ann, BaseModel)


def _field_keys(model: type[BaseModel]) -> dict[str, str]:
    """Accepted input keys of a model -> field name (aliases included)."""
    keys: dict[str, str] = {}
    for name, info in model.model_fields.items():
        keys[name] = name
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            for choice in alias.choices:
                if isinstance(choice, str):
                    keys[choice] = name
        elif isinstance(alias, str):
            keys[alias] = name
    return keys


def _annotation_at(root: type[BaseModel], loc: tuple[Union[str, int], ...]) -> Any:
    ann: Any = root
    for part in loc:
        ann = _unwrap(ann)
        origin = get_origin(ann)
        if _is_model(ann):
            name = _field_keys(ann).get(str(part))
            if name is None:
                return None
            ann = ann.model_fields[name].annotation
        elif origin in (list, tuple, set) and isinstance(part, int):
            args = get_args(ann)
            ann = args[0] if args else Any
        elif origin is dict:
            args = get_args(ann)
            ann = args[1] if len(args) == 2 else Any
        else:
            return None
    return ann


def _describe_type(ann: Any) -> str:
    nullable = False
    while True:
        origin = get_origin(ann)
        if origin is Annotated:
            ann = get_args(ann)[0]
            continue
        if origin is Union or origin is types.UnionType:
            args = [a for a in get_args(ann) if a is not type(None)]
            nullable = nullable or len(args) < len(get_args(ann))
            if len(args) == 1:
                ann = args[0]
                continue
            text = " or ".join(_describe_type(a) for a in args)
            return text + (" or null" if nullable else "")
        break
    origin = get_origin(ann)
    simple = {int: "an integer", float: "a number", bool: "a boolean (true/false)", str: "a string"}
    if ann in simple:
        text = simple[ann]
    elif origin is Literal:
        text = "one of " + ", ".join(repr(a) for a in get_args(ann))
    elif origin in (list, tuple, set):
        args = get_args(ann)
        inner = _describe_type(args[0]) if args else "anything"
        text = f"a list (of {inner})"
    elif ann is dict or origin is dict:
        text = "a mapping"
    elif _is_model(ann):
        text = f"a mapping ({ann.__name__} section)"
    else:
        text = getattr(ann, "__name__", str(ann))
    return text + (" or null" if nullable else "")


_TYPE_ERRORS = {
    "int_type",
    "int_parsing",
    "int_from_float",
    "float_type",
    "float_parsing",
    "bool_type",
    "bool_parsing",
    "string_type",
    "dict_type",
    "list_type",
    "model_type",
    "model_attributes_type",
    "tuple_type",
    "set_type",
    "none_required",
}


#: No model has a context this long (the longest are ~10M tokens): a larger token limit is a
#: typo, refused at validation rather than by the engine at start-up.
MAX_CONTEXT_TOKENS = 1 << 24

_BOUND_ERRORS = {
    "greater_than_equal": "must be >= {ge}",
    "greater_than": "must be > {gt}",
    "less_than_equal": "must be <= {le}",
    "less_than": "must be < {lt}",
    "too_short": "must have at least {min_length} item(s)",
    "too_long": "must have at most {max_length} item(s)",
}


def _issues_from_validation_error(
    exc: ValidationError, root: type[BaseModel], prefix: tuple[Union[str, int], ...] = ()
) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        etype = err.get("type", "")
        value = err.get("input")
        ctx = err.get("ctx") or {}
        error_obj = ctx.get("error")
        if isinstance(error_obj, _CrossFieldErrors):
            for issue in error_obj.issues:
                full = prefix + loc + issue.loc
                issues.append(dataclasses.replace(issue, loc=full, path=_fmt_loc(full)))
            continue
        full = prefix + loc
        kind = etype
        if etype == "extra_forbidden":
            key = str(loc[-1]) if loc else "?"
            parent = _unwrap(_annotation_at(root, loc[:-1]))
            message = f"unknown key '{key}'"
            if _is_model(parent):
                keys = _field_keys(parent)
                known = [k for k in keys if k == keys[k]]
                match = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
                if key in keys:
                    message = f"'{key}' is another spelling of '{keys[key]}'; give only one of them"
                elif match:
                    message += f"; did you mean '{match[0]}'?"
                else:
                    message += f"; known keys: {', '.join(sorted(known))}"
            kind = "unknown_key"
        elif etype in ("literal_error", "enum"):
            expected = ctx.get("expected", "")
            message = f"invalid value {_short(value)}; allowed values: {expected}"
            choices = _literal_choices(_annotation_at(root, loc))
            if isinstance(value, str) and choices:
                match = difflib.get_close_matches(value.strip().lower(), choices, n=1, cutoff=0.5)
                if match:
                    message += f"; did you mean '{match[0]}'?"
            kind = "invalid_choice"
        elif etype == "finite_number":
            message = f"must be a finite number, got {_short(value)}"
            kind = "out_of_range"
        elif etype == "missing":
            message = "required key is missing"
            value = None
        elif etype in _TYPE_ERRORS:
            ann = _annotation_at(root, loc)
            expected = _describe_type(ann) if ann is not None else err.get("msg", "")
            message = f"expected {expected}, got {type(value).__name__} {_short(value)}"
            kind = "type_error"
        elif etype in _BOUND_ERRORS:
            try:
                bound = _BOUND_ERRORS[etype].format(**ctx)
            except (KeyError, IndexError):
                bound = err.get("msg", "out of range")
            message = f"{bound}, got {_short(value)}"
            if etype == "less_than_equal" and ctx.get("le") == MAX_CONTEXT_TOKENS:
                message += " (no model has a context that long)"
            kind = "out_of_range"
        elif etype in ("value_error", "assertion_error"):
            message = str(error_obj) if error_obj is not None else err.get("msg", "")
        else:
            message = f"{err.get('msg', 'invalid value')} (got {_short(value)})"
        issues.append(
            ConfigIssue(path=_fmt_loc(full), message=message, value=value, kind=kind, loc=full)
        )
    return issues
