"""Config entries of the algorithm: type, components and their arguments, optimizer.

Choosing an algorithm type fills its defaults from ``ALGORITHM_TYPE`` (through
``resolve_algorithm``, the same resolution the launcher applies), so the page shows what a run
would use. Component arguments are edited as YAML mappings.
"""

from __future__ import annotations

from typing import Any

import streamlit as st
import yaml

from trinity.algorithm import ALGORITHM_TYPE
from trinity.algorithm.resolve import COMPONENT_FIELDS, component_registry, resolve_algorithm
from trinity.common.config._sections import LossAggMode
from trinity.launcher.trainer.data import DATASET_SCHEMAS
from trinity.manager.config_registry._common import (
    args_help,
    choices,
    literal_values,
    registry_names,
    run_mode,
)
from trinity.manager.config_registry.config_registry import CONFIG_GENERATORS

#: the schemas of the algorithm types that train on a data set of rows (mode train)
OFFLINE_ALGORITHMS = DATASET_SCHEMAS


def algorithm_class() -> Any:
    return ALGORITHM_TYPE[st.session_state["algorithm_type"]]


def use_critic() -> bool:
    """Whether the chosen algorithm type trains a critic (PPO does, GRPO does not)."""
    try:
        return bool(algorithm_class().use_critic)
    except Exception:
        return False


def is_offline() -> bool:
    """SFT and DPO train on a fixed data set (mode ``train``, no task set, no explorer)."""
    try:
        schema = algorithm_class().schema_name()
    except Exception:
        return st.session_state["algorithm_type"] in OFFLINE_ALGORITHMS
    return schema in OFFLINE_ALGORITHMS


def resolved_defaults(**overrides: Any) -> dict[str, Any]:
    """``resolve_algorithm`` of the chosen type plus ``overrides``, as a flat dict."""
    data = {"algorithm_type": st.session_state["algorithm_type"], **overrides}
    return resolve_algorithm(data).to_dict()


def _dump_args(args: dict[str, Any]) -> str:
    return yaml.safe_dump(args, sort_keys=False).strip() if args else "{}"


def apply_algorithm_type_defaults() -> None:
    """Fill repeat_times, components, their arguments and loss_agg_mode from the type."""
    try:
        values = resolved_defaults()
    except Exception:  # an unknown type: keep the values; the schema check reports it
        return
    for key in ("repeat_times", "loss_agg_mode", *COMPONENT_FIELDS):
        st.session_state[key] = values[key]
    for field in COMPONENT_FIELDS:
        st.session_state[f"{field}_args"] = _dump_args(values[f"{field}_args"])
    if is_offline():
        st.session_state["mode"] = "train"
    elif run_mode().trains_on_dataset:  # a data set's mode, for an algorithm that explores
        st.session_state["mode"] = "both"


def _component_changed(field: str) -> None:
    try:
        values = resolved_defaults(**{field: st.session_state[field]})
    except Exception:
        return
    st.session_state[f"{field}_args"] = _dump_args(values[f"{field}_args"])


@CONFIG_GENERATORS.register_config(default_value="grpo", config_path="algorithm.algorithm_type")
def set_algorithm_type(**kwargs):
    st.selectbox(
        "Algorithm Type",
        choices(registry_names(ALGORITHM_TYPE), kwargs["key"]),
        help="Choosing a type fills its defaults (components, arguments, repeat times).",
        on_change=apply_algorithm_type_defaults,
        **kwargs,
    )


@CONFIG_GENERATORS.register_config(
    default_value=2, visible=lambda: not is_offline(), config_path="algorithm.repeat_times"
)
def set_repeat_times(**kwargs):
    st.number_input(
        "Repeat Times",
        min_value=1,
        help="Rollouts per task (the group size of GRPO-like algorithms).",
        **kwargs,
    )


@CONFIG_GENERATORS.register_config(default_value=1e-6, config_path="algorithm.optimizer.lr")
def set_actor_lr(**kwargs):
    st.number_input("Learning Rate", min_value=1e-12, max_value=1.0, format="%.2e", **kwargs)


@CONFIG_GENERATORS.register_config(
    default_value=0.0, config_path="algorithm.optimizer.lr_warmup_steps_ratio"
)
def set_lr_warmup_steps_ratio(**kwargs):
    st.number_input("LR Warmup Steps Ratio", min_value=0.0, max_value=1.0, **kwargs)


@CONFIG_GENERATORS.register_config(
    default_value="constant", config_path="algorithm.optimizer.lr_scheduler_type"
)
def set_lr_scheduler_type(**kwargs):
    st.selectbox("LR Scheduler", choices(["constant", "cosine"], kwargs["key"]), **kwargs)


@CONFIG_GENERATORS.register_config(default_value="token-mean")
def set_loss_agg_mode(**kwargs):
    st.selectbox("Loss Aggregation", choices(literal_values(LossAggMode), kwargs["key"]), **kwargs)


def _register_component(field: str, label: str, default: str) -> None:
    def setter(**kwargs):
        st.selectbox(
            label,
            choices(registry_names(component_registry(field)), kwargs["key"]),
            on_change=_component_changed,
            args=(field,),
            **kwargs,
        )

    setter.__name__ = f"set_{field}"
    setter.__qualname__ = f"set_{field}"
    CONFIG_GENERATORS.register_config(
        default_value=default,
        config_func=setter,
        other_configs={f"{field}_args": "{}"},
    )

    def check(unfinished_fields: set, key: str):
        text = st.session_state.get(f"{key}_args", "{}")
        try:
            value = yaml.safe_load(text) if text.strip() else {}
        except yaml.YAMLError as exc:
            value = exc
        if not isinstance(value, dict):
            unfinished_fields.add(f"{key}_args")
            st.warning(f"`{key}_args` must be a YAML mapping (got: {text!r})")

    check.__name__ = f"check_{field}"
    check.__qualname__ = f"check_{field}"
    CONFIG_GENERATORS.register_check(check)


for _field, _label, _default in (
    ("sample_strategy", "Sample Strategy", "default"),
    ("advantage_fn", "Advantage Function", "grpo"),
    ("policy_loss_fn", "Policy Loss Function", "ppo"),
    ("kl_penalty_fn", "KL Penalty Function", "none"),
    ("kl_loss_fn", "KL Loss Function", "k2"),
    ("entropy_loss_fn", "Entropy Loss Function", "default"),
):
    _register_component(_field, _label, _default)


def component_args_editor(field: str) -> None:
    """A YAML text area for ``<field>_args`` (drawn in the expert Trainer tab)."""
    key = f"{field}_args"
    help_text = args_help(component_registry(field), st.session_state.get(field)) or None
    st.text_area(f"`{key}`", key=key, height=80, help=help_text)
    CONFIG_GENERATORS.add_placeholder(key)


def parse_component_args(field: str) -> Any:
    text = st.session_state.get(f"{field}_args", "{}") or "{}"
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError:
        return None
