"""Loading a YAML into Studio's page: every entry takes the config's value (or the schema's
default), the algorithm shows what the launcher resolves, eval task sets and experience
operators become their editors' rows, and whatever no entry covers is kept to be written back
unchanged (``_loaded_config``). Split from :mod:`trinity.manager.config_manager`, which draws
the page and generates the YAML back from it."""

from __future__ import annotations

import copy
from typing import Any

import streamlit as st

from trinity.algorithm.resolve import COMPONENT_FIELDS, resolve_algorithm
from trinity.manager.config_io import get_path, has_path, pop_path, schema_defaults, set_path
from trinity.manager.config_registry import CONFIG_GENERATORS
from trinity.manager.config_registry.algorithm_config_manager import _dump_args
from trinity.manager.config_registry.buffer_config_manager import (
    EVAL_TASKSET_KEYS,
    add_eval_taskset,
)
from trinity.manager.config_registry.model_config_manager import set_trainer_gpu_num

OPERATORS_PATH = "data_processor.experience_pipeline.operators"
EVAL_TASKSETS_PATH = "buffer.explorer_input.eval_tasksets"
# Where older configs (and the quickstart) put values the page keeps elsewhere.
ALTERNATE_PATHS = {
    "default_workflow_type": "buffer.explorer_input.taskset.default_workflow_type",
    "default_reward_fn_type": "buffer.explorer_input.taskset.default_reward_fn_type",
}


def load_into_page(data: dict[str, Any]) -> None:
    """Put a config (as parsed from YAML) into the page's session state, keeping what the page
    cannot show.

    Every entry with a ``config_path`` takes the YAML's value, or the schema's default when
    the YAML leaves it out (so the generated config means what the loaded one meant).
    Whatever no entry covers stays in ``_loaded_config`` and is written back unchanged.
    """
    data = copy.deepcopy(data)
    base = copy.deepcopy(data)  # what no entry covers: each part below pops what it shows
    _move_alternate_paths(data)
    problems = _load_entries(data)
    _load_algorithm(data, base)
    _load_eval_tasksets(data)
    pop_path(base, EVAL_TASKSETS_PATH)
    _load_operators(data)
    pop_path(base, OPERATORS_PATH)
    _derive_page_state()
    st.session_state["_loaded_config"] = base
    st.session_state["_load_problems"] = problems
    st.session_state.config_generated = False


def _move_alternate_paths(data: dict[str, Any]) -> None:
    """Values an older layout keeps at :data:`ALTERNATE_PATHS` go to the entry's path; the
    page remembers to write them back where the YAML had them (``_moved_paths``)."""
    moved = {}
    for key, alternate in ALTERNATE_PATHS.items():
        path = CONFIG_GENERATORS.config_paths[key]
        if not has_path(data, path) and has_path(data, alternate):
            set_path(data, path, get_path(data, alternate))
            moved[key] = alternate
    st.session_state["_moved_paths"] = moved


def _load_entries(data: dict[str, Any]) -> list[str]:
    """Each entry's value from ``data`` (or the schema's default); returns the problems of
    values no widget can show (kept in the YAML as written)."""
    defaults = schema_defaults()
    problems = []
    for key, path in CONFIG_GENERATORS.config_paths.items():
        value = get_path(data, path) if has_path(data, path) else get_path(defaults, path)
        try:
            value = coerce(value, CONFIG_GENERATORS.default_config.get(key))
        except ValueError:
            problems.append(f"`{path}`: {value!r} cannot be edited here; kept as written")
            continue
        st.session_state[key] = copy.deepcopy(value)
    return problems


def _load_algorithm(data: dict[str, Any], base: dict[str, Any]) -> None:
    """The algorithm as the launcher resolves it, so the page shows effective values (a config
    the resolver refuses keeps its algorithm section as written)."""
    try:
        resolved = resolve_algorithm(data.get("algorithm") or {}).to_dict()
    except Exception:
        return
    st.session_state["repeat_times"] = resolved["repeat_times"]
    st.session_state["loss_agg_mode"] = resolved["loss_agg_mode"]
    for field in COMPONENT_FIELDS:
        st.session_state[field] = resolved[field]
        st.session_state[f"{field}_args"] = _dump_args(resolved[f"{field}_args"])
    for field in (*COMPONENT_FIELDS, "loss_agg_mode"):
        pop_path(base, f"algorithm.{field}")
        pop_path(base, f"algorithm.{field}_args")


def _load_eval_tasksets(data: dict[str, Any]) -> None:
    """One editor row per eval task set (the old rows cleared); keys no row shows stay in
    that row's ``_eval_taskset_<i>_extra``."""
    for idx in range(st.session_state["_eval_tasksets_num"]):
        for short in EVAL_TASKSET_KEYS:
            st.session_state.pop(f"eval_taskset_{idx}_{short}", None)
        st.session_state.pop(f"_eval_taskset_{idx}_extra", None)
    st.session_state["_eval_tasksets_num"] = 0
    for entry in get_path(data, EVAL_TASKSETS_PATH) or []:
        if not isinstance(entry, dict):
            continue
        extra = copy.deepcopy(entry)
        values = {}
        for short, (path, _) in EVAL_TASKSET_KEYS.items():
            if has_path(entry, path):
                values[short] = get_path(entry, path)
                pop_path(extra, path)
        idx = st.session_state["_eval_tasksets_num"]
        add_eval_taskset(values)
        st.session_state[f"_eval_taskset_{idx}_extra"] = extra


def _load_operators(data: dict[str, Any]) -> None:
    """The experience pipeline's operators: their names and their arguments (as YAML)."""
    names, op_args = [], {}
    for op in get_path(data, OPERATORS_PATH) or []:
        if isinstance(op, dict) and op.get("name"):
            names.append(op["name"])
            if op.get("args"):
                op_args[op["name"]] = op["args"]
    st.session_state["experience_operators"] = names
    st.session_state["experience_operator_args"] = _dump_args(op_args)


def _derive_page_state() -> None:
    """Page values computed from the loaded ones (GPU counts, the per-GPU batch size)."""
    st.session_state["total_gpu_num"] = (
        st.session_state["gpu_per_node"] * st.session_state["node_num"]
    )
    set_trainer_gpu_num()
    tbs = st.session_state.get("train_batch_size")
    if tbs and st.session_state["trainer_gpu_num"] > 0:
        st.session_state["_train_batch_size_per_gpu"] = max(
            tbs // st.session_state["trainer_gpu_num"], 1
        )


def coerce(value: Any, default: Any) -> Any:
    """A loaded value in the type the entry's widget holds (YAML writes ``1`` for ``1.0``).

    Raises:
        ValueError: the value cannot be shown by that widget (e.g. an interpolation string
            in a number field); the caller keeps it in the YAML as written.
    """
    if value is None:
        return "" if isinstance(default, str) else None
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise ValueError(value)
    if (
        isinstance(default, float)
        and isinstance(value, (int, float, str))
        and not isinstance(value, bool)
    ):
        return float(value)
    if isinstance(default, int) and not isinstance(value, bool):
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        raise ValueError(value)
    if isinstance(default, str) and not isinstance(value, str):
        if isinstance(value, (dict, list)):
            raise ValueError(value)
        return str(value)
    return value
