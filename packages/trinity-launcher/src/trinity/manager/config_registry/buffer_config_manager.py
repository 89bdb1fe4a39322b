"""Config entries of the buffer: batch sizes, task sets, experience buffer, data operators."""

from __future__ import annotations

import streamlit as st

from trinity.common.config._sections import PromptTypeName, StorageTypeName
from trinity.common.rewards import REWARD_FUNCTIONS
from trinity.common.workflows import WORKFLOWS
from trinity.manager.config_registry._common import (
    args_help,
    choices,
    literal_values,
    registry_names,
    run_mode,
)
from trinity.manager.config_registry.algorithm_config_manager import is_offline
from trinity.manager.config_registry.config_registry import CONFIG_GENERATORS


def explores() -> bool:
    """Whether the run has an explorer that runs task sets (train task sets, or the eval task
    sets of a mode that evaluates checkpoints)."""
    mode = run_mode()
    return (mode.explores or mode.evaluates_checkpoints) and not is_offline()


def trains_online() -> bool:
    return run_mode().trains and not is_offline()


@CONFIG_GENERATORS.register_config(default_value=20, config_path="buffer.total_epochs")
def set_total_epochs(**kwargs):
    st.number_input("Total Epochs", min_value=1, **kwargs)


@CONFIG_GENERATORS.register_config(default_value=None, config_path="buffer.total_steps")
def set_total_steps(**kwargs):
    st.number_input("Total Steps", min_value=1, help="If set, `Total Epochs` is ignored.", **kwargs)


@CONFIG_GENERATORS.register_config(default_value=48, config_path="buffer.batch_size")
def set_explore_batch_size(**kwargs):
    st.number_input(
        "Task Batch Size",
        min_value=1,
        help="Tasks explored in one explore step (samples per SFT/DPO step).",
        **kwargs,
    )


def _str_for_train_batch_size() -> str:
    trainer_gpu_num_str = (
        "`gpu_per_node * node_num`"
        if not run_mode().uses_rollout_engines
        else "`gpu_per_node * node_num - engine_num * tensor_parallel_size`"
    )
    return (
        "Number of experiences in a training mini-batch. "
        f"Please ensure that `train_batch_size` ({st.session_state.get('train_batch_size')}) "
        f"can be divided by {trainer_gpu_num_str} ({st.session_state['trainer_gpu_num']})."
    )


@CONFIG_GENERATORS.register_config(
    default_value=96,
    visible=lambda: st.session_state["trainer_gpu_num"] > 0,
    other_configs={"_train_batch_size_per_gpu": 16},
    config_path="buffer.train_batch_size",
)
def set_train_batch_size(**kwargs):
    key = kwargs.get("key")
    trainer_gpu_num = st.session_state["trainer_gpu_num"]
    st.session_state[key] = (
        st.session_state["_train_batch_size_per_gpu"] * st.session_state["trainer_gpu_num"]
    )

    def on_change():
        st.session_state["_train_batch_size_per_gpu"] = max(
            st.session_state[key] // st.session_state["trainer_gpu_num"], 1
        )

    st.number_input(
        "Train Batch Size",
        min_value=trainer_gpu_num,
        step=trainer_gpu_num,
        help=_str_for_train_batch_size(),
        on_change=on_change,
        **kwargs,
    )


@CONFIG_GENERATORS.register_check()
def check_train_batch_size(unfinished_fields: set, key: str):
    if st.session_state[key] % st.session_state["trainer_gpu_num"] != 0:
        unfinished_fields.add(key)
        st.warning(_str_for_train_batch_size())


# Task sets


@CONFIG_GENERATORS.register_config(
    default_value="", visible=explores, config_path="buffer.explorer_input.taskset.path"
)
def set_taskset_path(**kwargs):
    st.text_input(
        "Taskset Path", help="A data set directory or file (jsonl, parquet, ...).", **kwargs
    )


_TASKSET_ARGS = {
    "taskset_name": ("buffer.explorer_input.taskset.name", "taskset"),
    "taskset_split": ("buffer.explorer_input.taskset.split", "train"),
    "taskset_subset_name": ("buffer.explorer_input.taskset.subset_name", ""),
    "taskset_prompt_key": ("buffer.explorer_input.taskset.format.prompt_key", "question"),
    "taskset_response_key": ("buffer.explorer_input.taskset.format.response_key", "answer"),
    "temperature": ("buffer.explorer_input.taskset.rollout_args.temperature", 1.0),
    "logprobs": ("buffer.explorer_input.taskset.rollout_args.logprobs", 0),
}


@CONFIG_GENERATORS.register_config(visible=explores)
def set_taskset_args(**kwargs):
    name_col, split_col, subset_col = st.columns(3)
    name_col.text_input("Taskset Name", key="taskset_name")
    split_col.text_input("Train Split", key="taskset_split")
    subset_col.text_input("Subset Name", key="taskset_subset_name")
    prompt_col, response_col = st.columns(2)
    prompt_col.text_input("Prompt Key", key="taskset_prompt_key")
    response_col.text_input("Response Key", key="taskset_response_key")
    temperature_col, logprobs_col = st.columns(2)
    temperature_col.number_input("Temperature", key="temperature", min_value=0.0, max_value=2.0)
    logprobs_col.number_input("Logprobs", key="logprobs", min_value=0, max_value=20)


# Each keyword of the task set gets its own (hidden-widget) entry, so that it is written to and
# read back from the YAML like any other entry.
def _register_taskset_arg(key: str, path: str, default) -> None:
    def setter(**kwargs):  # drawn by set_taskset_args
        pass

    setter.__name__ = setter.__qualname__ = f"set_{key}"
    CONFIG_GENERATORS.register_config(
        default_value=default, config_func=setter, visible=explores, config_path=path
    )


for _key, (_path, _default) in _TASKSET_ARGS.items():
    _register_taskset_arg(_key, _path, _default)

EVAL_TASKSET_KEYS = {
    "name": ("name", ""),
    "path": ("path", ""),
    "split": ("split", "test"),
    "prompt_key": ("format.prompt_key", "question"),
    "response_key": ("format.response_key", "answer"),
    "temperature": ("rollout_args.temperature", 0.0),
    "n": ("rollout_args.n", 1),
}


def add_eval_taskset(values: dict | None = None) -> None:
    """Append an eval task set to the page's list (defaults, or ``values`` by short key)."""
    idx = st.session_state["_eval_tasksets_num"]
    for short, (_, default) in EVAL_TASKSET_KEYS.items():
        value = default if values is None else values.get(short, default)
        st.session_state[f"eval_taskset_{idx}_{short}"] = value
    if not st.session_state[f"eval_taskset_{idx}_name"]:
        st.session_state[f"eval_taskset_{idx}_name"] = f"eval_{idx}"
    st.session_state["_eval_tasksets_num"] = idx + 1


def delete_eval_taskset(idx: int) -> None:
    count = st.session_state["_eval_tasksets_num"]
    for i in range(idx, count - 1):
        for short in EVAL_TASKSET_KEYS:
            st.session_state[f"eval_taskset_{i}_{short}"] = st.session_state[
                f"eval_taskset_{i + 1}_{short}"
            ]
    for short in EVAL_TASKSET_KEYS:
        st.session_state.pop(f"eval_taskset_{count - 1}_{short}", None)
    st.session_state["_eval_tasksets_num"] = count - 1


@CONFIG_GENERATORS.register_config(
    other_configs={"_eval_tasksets_num": 0},
    visible=lambda: run_mode().uses_eval_tasksets,
)
def set_eval_tasksets(**kwargs):
    st.button("Add Eval Taskset", on_click=add_eval_taskset, key="_add_eval_taskset")
    count = st.session_state["_eval_tasksets_num"]
    if count == 0:
        return
    tabs = st.tabs([f"Eval Taskset {i + 1}" for i in range(count)])
    for idx, tab in enumerate(tabs):
        with tab:
            name_col, del_col = st.columns([9, 1])
            name_col.text_input("Taskset Name", key=f"eval_taskset_{idx}_name")
            del_col.button(
                "✖", key=f"_eval_taskset_{idx}_del", on_click=delete_eval_taskset, args=(idx,)
            )
            st.text_input("Eval Taskset Path", key=f"eval_taskset_{idx}_path")
            CONFIG_GENERATORS.add_placeholder(f"eval_taskset_{idx}_path")
            split_col, prompt_col, response_col = st.columns(3)
            split_col.text_input("Eval Split", key=f"eval_taskset_{idx}_split")
            prompt_col.text_input("Prompt Key", key=f"eval_taskset_{idx}_prompt_key")
            response_col.text_input("Response Key", key=f"eval_taskset_{idx}_response_key")
            temperature_col, n_col = st.columns(2)
            temperature_col.number_input(
                "Temperature", key=f"eval_taskset_{idx}_temperature", min_value=0.0, max_value=2.0
            )
            n_col.number_input("Eval Repeat Times", key=f"eval_taskset_{idx}_n", min_value=1)


@CONFIG_GENERATORS.register_config(
    default_value="math_workflow",
    visible=explores,
    config_path="buffer.explorer_input.default_workflow_type",
)
def set_default_workflow_type(**kwargs):
    st.selectbox(
        "Default Workflow Type",
        choices(registry_names(WORKFLOWS), kwargs["key"]),
        help="Workflows of installed packages and loaded plugins.",
        **kwargs,
    )


@CONFIG_GENERATORS.register_config(
    default_value=None,
    visible=explores,
    config_path="buffer.explorer_input.default_eval_workflow_type",
)
def set_default_eval_workflow_type(**kwargs):
    st.selectbox(
        "Default Eval Workflow Type",
        choices(registry_names(WORKFLOWS), kwargs["key"]),
        index=None,
        placeholder="same as the train workflow",
        **kwargs,
    )


@CONFIG_GENERATORS.register_config(
    default_value=None,
    visible=explores,
    config_path="buffer.explorer_input.default_reward_fn_type",
)
def set_default_reward_fn_type(**kwargs):
    st.selectbox(
        "Default Reward Function",
        choices(registry_names(REWARD_FUNCTIONS), kwargs["key"]),
        index=None,
        placeholder="the workflow's own",
        **kwargs,
    )


# Experience buffer / offline data set


@CONFIG_GENERATORS.register_config(
    default_value=None, config_path="buffer.trainer_input.experience_buffer.storage_type"
)
def set_storage_type(**kwargs):
    options = ["file", "sql"] if is_offline() else ["queue", "priority_queue", "sql"]
    st.selectbox(
        "Storage Type",
        choices([o for o in literal_values(StorageTypeName) if o in options], kwargs["key"]),
        index=None,
        placeholder="file" if is_offline() else "queue (default)",
        **kwargs,
    )


@CONFIG_GENERATORS.register_config(
    default_value="", config_path="buffer.trainer_input.experience_buffer.path"
)
def set_experience_buffer_path(**kwargs):
    if is_offline():
        title, help_msg = "Offline Dataset Path", "The SFT/DPO data set (directory or file)."
    else:
        title = "Experience Buffer Path"
        help_msg = "Optional persistent storage of experiences (an SQLAlchemy URL for sql)."
    st.text_input(title, help=help_msg, **kwargs)


@CONFIG_GENERATORS.register_check()
def check_experience_buffer_path(unfinished_fields: set, key: str):
    # The launcher would derive a path in the run's cache directory, which is right for an
    # experience buffer the explorer fills and wrong for an SFT/DPO data set.
    if is_offline() and not (st.session_state[key] or "").strip():
        unfinished_fields.add(key)
        st.warning(f"Please input the {st.session_state['algorithm_type'].upper()} dataset path.")


_OFFLINE_KEYS = {
    "offline_dataset_split": ("buffer.trainer_input.experience_buffer.split", "train"),
    "offline_prompt_type": ("buffer.trainer_input.experience_buffer.format.prompt_type", None),
    "offline_prompt_key": ("buffer.trainer_input.experience_buffer.format.prompt_key", "prompt"),
    "offline_response_key": (
        "buffer.trainer_input.experience_buffer.format.response_key",
        "response",
    ),
    "offline_messages_key": (
        "buffer.trainer_input.experience_buffer.format.messages_key",
        "messages",
    ),
    "offline_chosen_key": ("buffer.trainer_input.experience_buffer.format.chosen_key", "chosen"),
    "offline_rejected_key": (
        "buffer.trainer_input.experience_buffer.format.rejected_key",
        "rejected",
    ),
}


def _offline_visible(key: str):
    def visible() -> bool:
        if not is_offline():
            return False
        dpo = st.session_state["algorithm_type"] == "dpo"
        if key in ("offline_chosen_key", "offline_rejected_key"):
            return dpo
        if key == "offline_response_key":
            return not dpo
        return True

    return visible


for _key, (_path, _default) in _OFFLINE_KEYS.items():

    def _setter(**kwargs):  # drawn by set_offline_dataset_args
        pass

    _setter.__name__ = _setter.__qualname__ = f"set_{_key}"
    CONFIG_GENERATORS.register_config(
        default_value=_default,
        config_func=_setter,
        visible=_offline_visible(_key),
        config_path=_path,
    )


@CONFIG_GENERATORS.register_config(visible=is_offline)
def set_offline_dataset_args(**kwargs):
    split_col, type_col = st.columns(2)
    split_col.text_input("Train Split", key="offline_dataset_split")
    type_col.selectbox(
        "Prompt Type",
        literal_values(PromptTypeName),
        key="offline_prompt_type",
        index=None,
        placeholder="messages",
        help="`messages`: rows hold a chat; `plaintext`: rows hold prompt and response text.",
    )
    keys = [k for k in _OFFLINE_KEYS if k.endswith("_key") and _offline_visible(k)()]
    for column, key in zip(st.columns(len(keys)), keys, strict=False):
        label = key.removeprefix("offline_").replace("_", " ").title()
        column.text_input(label, key=key)


# Data operators


def _operator_names() -> list[str]:
    try:
        from trinity.buffer.operators import EXPERIENCE_OPERATORS
    except ImportError:
        return []
    return registry_names(EXPERIENCE_OPERATORS)


@CONFIG_GENERATORS.register_config(
    default_value=[], other_configs={"experience_operator_args": "{}"}, visible=trains_online
)
def set_experience_operators(**kwargs):
    names = _operator_names()
    names += [n for n in st.session_state[kwargs["key"]] if n not in names]
    st.multiselect(
        "Experience Operators",
        names,
        help="Applied in order to every batch of experiences before training "
        "(operators of installed packages and loaded plugins).",
        **kwargs,
    )
    help_text = None
    if st.session_state[kwargs["key"]]:
        from trinity.buffer.operators import EXPERIENCE_OPERATORS

        help_text = "\n\n".join(
            args_help(EXPERIENCE_OPERATORS, n) for n in st.session_state[kwargs["key"]]
        )
    st.text_area(
        "Operator arguments (YAML: operator name -> arguments)",
        key="experience_operator_args",
        height=80,
        help=help_text or None,
    )
    CONFIG_GENERATORS.add_placeholder("experience_operator_args")
