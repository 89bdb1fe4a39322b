"""Config entries of the explorer, its rollout engines and the synchronizer.

One small ``set_<field>`` function per entry, registered with ``register_config``, alike in
shape on purpose: it is the developer guide's Config Generator pattern, which plugin authors
copy to add their own entries (the registry keys entries by the function's name). Entries of
the rollout model share ``_rollout_entry``; the rest stay one function each.
"""

from __future__ import annotations

import streamlit as st

from trinity.common.config._sections import DType, EngineType, SyncMethodName, SyncStyleName
from trinity.manager.config_registry._common import choices, literal_values, run_mode
from trinity.manager.config_registry.buffer_config_manager import explores
from trinity.manager.config_registry.config_registry import CONFIG_GENERATORS
from trinity.manager.config_registry.model_config_manager import set_trainer_gpu_num

_ROLLOUT = "explorer.rollout_model"


def _rollout_entry(key, default, path=None, visible=explores):
    return CONFIG_GENERATORS.register_config(
        default_value=default, visible=visible, config_path=path or f"{_ROLLOUT}.{key}"
    )


@CONFIG_GENERATORS.register_config(
    default_value=8, visible=explores, config_path="explorer.runner_per_model"
)
def set_runner_per_model(**kwargs):
    st.number_input(
        "Runners per Model",
        min_value=1,
        help="Workflow runner processes per engine (concurrent tasks: this x tasks per runner).",
        **kwargs,
    )


@CONFIG_GENERATORS.register_config(
    default_value=1, visible=explores, config_path="explorer.tasks_per_runner"
)
def set_tasks_per_runner(**kwargs):
    st.number_input(
        "Tasks per Runner",
        min_value=1,
        help="Tasks one runner runs at once (1: Trinity-RFT's one task per runner; more suits "
        "workflows that mostly wait on the engine, with fewer runner processes).",
        **kwargs,
    )


@CONFIG_GENERATORS.register_config(
    default_value=100, visible=explores, config_path="explorer.eval_interval"
)
def set_eval_interval(**kwargs):
    st.number_input("Eval Interval", min_value=1, help="Evaluate every N explore steps.", **kwargs)


@CONFIG_GENERATORS.register_config(
    default_value=1800, visible=explores, config_path="explorer.max_timeout"
)
def set_max_timeout(**kwargs):
    st.number_input("Task Timeout (s)", min_value=1, **kwargs)


@CONFIG_GENERATORS.register_config(
    default_value=2, visible=explores, config_path="explorer.max_retry_times"
)
def set_explorer_max_retry_times(**kwargs):
    st.number_input("Task Retries", min_value=0, **kwargs)


@_rollout_entry("engine_type", "vllm")
def set_engine_type(**kwargs):
    st.selectbox(
        "Engine Type",
        choices(literal_values(EngineType), kwargs["key"]),
        help="`vllm` (CUDA build, or vLLM's CPU build), `transformers` (plain HF generate).",
        **kwargs,
    )


@_rollout_entry("engine_num", 2)
def set_engine_num(**kwargs):
    st.number_input("Engine Num", min_value=1, on_change=set_trainer_gpu_num, **kwargs)


@_rollout_entry("tensor_parallel_size", 1)
def set_tensor_parallel_size(**kwargs):
    st.number_input("Tensor Parallel Size", min_value=1, on_change=set_trainer_gpu_num, **kwargs)


@_rollout_entry("gpu_memory_utilization", 0.9)
def set_gpu_memory_utilization(**kwargs):
    st.number_input("GPU Memory Utilization", min_value=0.0, max_value=1.0, **kwargs)


@_rollout_entry("dtype", "bfloat16")
def set_dtype(**kwargs):
    st.selectbox("Dtype", choices(literal_values(DType), kwargs["key"]), **kwargs)


@_rollout_entry("seed", 42)
def set_seed(**kwargs):
    st.number_input("Seed", step=1, **kwargs)


@_rollout_entry("enforce_eager", False)
def set_enforce_eager(**kwargs):
    st.checkbox("Enforce Eager", help="Disable CUDA graphs.", **kwargs)


@_rollout_entry("enable_prefix_caching", True)
def set_enable_prefix_caching(**kwargs):
    st.checkbox("Prefix Caching", **kwargs)


@_rollout_entry("enable_chunked_prefill", True)
def set_enable_chunked_prefill(**kwargs):
    st.checkbox("Chunked Prefill", **kwargs)


@_rollout_entry("enable_history", False)
def set_enable_history(**kwargs):
    st.checkbox("Record History", help="Record OpenAI-API calls as experiences.", **kwargs)


@_rollout_entry("enable_openai_api", False)
def set_enable_openai_api(**kwargs):
    st.checkbox("OpenAI API", help="Expose an OpenAI-compatible server to workflows.", **kwargs)


@_rollout_entry("enable_auto_tool_choice", False)
def set_enable_auto_tool_choice(**kwargs):
    st.checkbox("Auto Tool Choice", **kwargs)


@_rollout_entry("tool_call_parser", "")
def set_tool_call_parser(**kwargs):
    st.text_input("Tool Call Parser", help="e.g. `hermes`", **kwargs)


@_rollout_entry("reasoning_parser", "")
def set_reasoning_parser(**kwargs):
    st.text_input("Reasoning Parser", **kwargs)


# Synchronizer


def _synchronizes() -> bool:
    return run_mode().explores_and_trains


@CONFIG_GENERATORS.register_config(
    default_value="nccl", visible=_synchronizes, config_path="synchronizer.sync_method"
)
def set_sync_method(**kwargs):
    st.selectbox(
        "Sync Method",
        choices(literal_values(SyncMethodName), kwargs["key"]),
        help="`nccl`: GPU broadcast (falls back to `checkpoint` without CUDA); `memory`: "
        "state dict through Ray; `checkpoint`: through the checkpoint directory.",
        **kwargs,
    )


@CONFIG_GENERATORS.register_config(
    default_value="fixed", visible=_synchronizes, config_path="synchronizer.sync_style"
)
def set_sync_style(**kwargs):
    st.selectbox("Sync Style", choices(literal_values(SyncStyleName), kwargs["key"]), **kwargs)


@CONFIG_GENERATORS.register_config(
    default_value=1, visible=_synchronizes, config_path="synchronizer.sync_interval"
)
def set_sync_interval(**kwargs):
    st.number_input("Sync Interval", min_value=1, **kwargs)


@CONFIG_GENERATORS.register_config(
    default_value=0, visible=_synchronizes, config_path="synchronizer.sync_offset"
)
def set_sync_offset(**kwargs):
    st.number_input("Sync Offset", min_value=0, help="Explorer steps run ahead.", **kwargs)


@CONFIG_GENERATORS.register_config(
    default_value=3600, visible=_synchronizes, config_path="synchronizer.sync_timeout"
)
def set_sync_timeout(**kwargs):
    st.number_input("Sync Timeout (s)", min_value=1, **kwargs)
