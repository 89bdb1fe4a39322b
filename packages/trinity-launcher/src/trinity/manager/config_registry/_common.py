"""Small helpers shared by the config-entry modules."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import streamlit as st

from trinity.common.config import RunModeSpec, run_mode_spec


def choices(options: Iterable[Any], key: str) -> list[Any]:
    """``options`` plus the key's current value when it is not among them.

    A YAML loaded into the page may name a plugin workflow or a value this page does not
    list; the selectbox keeps it (the schema check then says whether it is valid) instead of
    silently switching to the first option.
    """
    values = list(dict.fromkeys(options))
    current = st.session_state.get(key)
    if current is not None and current not in values:
        values.append(current)
    return values


def run_mode() -> RunModeSpec:
    """The run-mode table's row for the page's ``mode``: ask it what the run does (explores,
    trains, ...), never compare the mode's name. A mode the table does not know (a YAML loaded
    into the page may hold one; the schema check reports it) answers no to every question."""
    mode = st.session_state.get("mode")
    try:
        return run_mode_spec(mode)
    except ValueError:
        return RunModeSpec(
            str(mode),
            explores=False,
            trains=False,
            needs_taskset=False,
            colocated=False,
            resumable=False,
            saves=False,
        )


def registry_names(registry: Any) -> list[str]:
    """Names a Trinity registry knows: registered in this process or advertised by packages."""
    try:
        return list(registry.list())
    except Exception:  # a broken entry point must not take the page down
        return sorted(registry.modules)


def literal_values(annotation: Any) -> list[Any]:
    """The allowed values of a schema type such as ``Annotated[Literal["a", "b"], ...]``."""
    from typing import Annotated, Literal, get_args, get_origin

    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    raise TypeError(f"not a Literal type: {annotation!r}")


def args_help(registry: Any, name: Any) -> str:
    """Markdown listing the arguments component ``name`` of ``registry`` declares.

    Read from the component's declaration (its ``Args`` model or typed ``__init__``, see
    :func:`trinity.common.config.args_model`) -- the same one validation checks against and
    the docs list -- so the form's help never disagrees with what a run accepts.
    """
    from trinity.common.config import args_model, describe_args, is_open

    try:
        cls = registry[name]
    except Exception:  # an unknown or broken name: the check under the form reports it
        return ""
    if not isinstance(cls, type):
        return ""
    model = args_model(cls)
    rows = describe_args(model)
    if not rows:
        if model is None or is_open(model):
            return f"`{name}` declares no arguments: whatever is given is passed unchecked."
        return f"`{name}` takes no arguments."
    lines = [f"Arguments of `{name}`:"]
    for row in rows:
        extra = f", {row['range']}" if row["range"] else ""
        default = "required" if row["required"] else f"default {row['default']!r}"
        text = f"- `{row['name']}` ({row['type']}{extra}; {default})"
        lines.append(text + (f": {row['description']}" if row["description"] else ""))
    if is_open(model):
        lines.append("- other keys go to its `**kwargs`, unchecked")
    return "\n".join(lines)
