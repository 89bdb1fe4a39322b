"""Config entries of the run, the model and the cluster (``project`` ... ``gpu_per_node``)."""

from __future__ import annotations

import streamlit as st

from trinity.common.config import LogLevel, MonitorType, RunMode
from trinity.manager.config_registry._common import choices, literal_values, run_mode
from trinity.manager.config_registry.algorithm_config_manager import use_critic
from trinity.manager.config_registry.config_registry import CONFIG_GENERATORS


def set_total_gpu_num() -> None:
    """Recompute ``total_gpu_num`` and ``trainer_gpu_num`` after a cluster or engine change."""
    st.session_state["total_gpu_num"] = (
        st.session_state["gpu_per_node"] * st.session_state["node_num"]
    )
    set_trainer_gpu_num()


def set_trainer_gpu_num() -> None:
    """GPUs left to the trainer: all of them in ``train`` mode (and in ``colocate``, where it
    takes turns with the engines on every GPU), else what the engines leave."""
    total = st.session_state["gpu_per_node"] * st.session_state["node_num"]
    mode = run_mode()
    if not mode.uses_rollout_engines or mode.colocated:
        st.session_state["trainer_gpu_num"] = total
    else:
        rollout = st.session_state["engine_num"] * st.session_state["tensor_parallel_size"]
        st.session_state["trainer_gpu_num"] = max(total - rollout, 0) if total else 0


@CONFIG_GENERATORS.register_config(default_value="both", config_path="mode")
def set_mode(**kwargs):
    st.selectbox(
        "Mode",
        list(literal_values(RunMode)),
        help="`both`: explore and train together on separate GPUs; `colocate`: explore and "
        "train in turns on the same GPU(s) (one GPU is enough; synchronous, sync_offset 0); "
        "`train`: train on a data set or buffer; `explore`: only generate experiences; "
        "`bench`: only evaluate.",
        on_change=set_trainer_gpu_num,
        **kwargs,
    )


@CONFIG_GENERATORS.register_config(default_value="Trinity-RFT", config_path="project")
def set_project(**kwargs):
    st.text_input("Project", **kwargs)


@CONFIG_GENERATORS.register_config(default_value="", config_path="group")
def set_group(**kwargs):
    st.text_input("Group", help="Optional; runs are saved under project/group/name.", **kwargs)


@CONFIG_GENERATORS.register_config(default_value="qwen2.5-1.5B", config_path="name")
def set_exp_name(**kwargs):
    st.text_input("Experiment Name", **kwargs)


@CONFIG_GENERATORS.register_config(default_value="", config_path="checkpoint_root_dir")
def set_checkpoint_root_dir(**kwargs):
    st.text_input(
        "Checkpoint Root Dir",
        help="Checkpoints, logs, buffers and metrics.jsonl go to root/project/group/name.",
        **kwargs,
    )


@CONFIG_GENERATORS.register_config(default_value="tensorboard", config_path="monitor.monitor_type")
def set_monitor_type(**kwargs):
    st.selectbox("Monitor Type", choices(literal_values(MonitorType), kwargs["key"]), **kwargs)


@CONFIG_GENERATORS.register_config(default_value="INFO", config_path="log.level")
def set_log_level(**kwargs):
    st.selectbox("Log Level", choices(literal_values(LogLevel), kwargs["key"]), **kwargs)


# Model


@CONFIG_GENERATORS.register_config(default_value="", config_path="model.model_path")
def set_model_path(**kwargs):
    st.text_input("Model Path", help="A local Hugging Face model directory or hub id.", **kwargs)


@CONFIG_GENERATORS.register_config(
    default_value="", visible=use_critic, config_path="model.critic_model_path"
)
def set_critic_model_path(**kwargs):
    st.text_input("Critic Model Path (defaults to `model_path`)", **kwargs)


@CONFIG_GENERATORS.register_config(default_value=1024, config_path="model.max_response_tokens")
def set_max_response_tokens(**kwargs):
    st.number_input("Max Response Tokens", min_value=1, **kwargs)


@CONFIG_GENERATORS.register_config(default_value=None, config_path="model.max_prompt_tokens")
def set_max_prompt_tokens(**kwargs):
    st.number_input(
        "Max Prompt Tokens",
        min_value=1,
        help="Leave empty to use max_model_len - max_response_tokens.",
        **kwargs,
    )


@CONFIG_GENERATORS.register_config(default_value=2048, config_path="model.max_model_len")
def set_max_model_len(**kwargs):
    st.number_input("Max Model Length", min_value=1, **kwargs)


# Cluster


@CONFIG_GENERATORS.register_config(default_value=1, config_path="cluster.node_num")
def set_node_num(**kwargs):
    st.number_input("Node Num", min_value=1, on_change=set_total_gpu_num, **kwargs)


@CONFIG_GENERATORS.register_config(
    default_value=8,
    other_configs={"total_gpu_num": 8, "trainer_gpu_num": 6},
    config_path="cluster.gpu_per_node",
)
def set_gpu_per_node(**kwargs):
    st.number_input(
        "GPU Per Node",
        min_value=0,
        help="0 runs on CPUs (vLLM's CPU build and verl's FSDP2 engine with gloo).",
        on_change=set_total_gpu_num,
        **kwargs,
    )


@CONFIG_GENERATORS.register_config()
def set_trainer_gpu_num_display(**kwargs):
    st.number_input(
        "Trainer GPUs",
        value=st.session_state["trainer_gpu_num"],
        disabled=True,
        help="`gpu_per_node * node_num - engine_num * tensor_parallel_size` "
        "(all GPUs in train mode).",
    )
