"""Config entries of the trainer (verl's FSDP engine): strategy, checkpoints, batching."""

from __future__ import annotations

import streamlit as st

from trinity.common.config._sections import SaveHFCheckpoint, TrainerStrategy
from trinity.manager.config_registry._common import choices, literal_values, run_mode
from trinity.manager.config_registry.algorithm_config_manager import use_critic
from trinity.manager.config_registry.config_registry import CONFIG_GENERATORS


def trains() -> bool:
    return run_mode().trains


def _entry(key, default, visible=trains, path=None):
    return CONFIG_GENERATORS.register_config(
        default_value=default, visible=visible, config_path=path or f"trainer.{key}"
    )


@_entry("trainer_type", "verl")
def set_trainer_type(**kwargs):
    st.selectbox("Trainer Type", choices(["verl"], kwargs["key"]), **kwargs)


@_entry("trainer_strategy", "fsdp2")
def set_trainer_strategy(**kwargs):
    st.selectbox(
        "Training Strategy", choices(literal_values(TrainerStrategy), kwargs["key"]), **kwargs
    )


@_entry("save_interval", 100)
def set_save_interval(**kwargs):
    st.number_input(
        "Save Interval", min_value=0, help="Checkpoint every N steps; 0 saves at the end.", **kwargs
    )


@_entry("save_hf_checkpoint", "last")
def set_save_hf_checkpoint(**kwargs):
    st.selectbox(
        "Save HF Checkpoint", choices(literal_values(SaveHFCheckpoint), kwargs["key"]), **kwargs
    )


@_entry("max_checkpoints_to_keep", 0)
def set_max_checkpoints_to_keep(**kwargs):
    st.number_input("Checkpoints to Keep", min_value=0, help="0 keeps all.", **kwargs)


@_entry("grad_clip", 1.0)
def set_grad_clip(**kwargs):
    st.number_input("Gradient Clip", min_value=0.0001, **kwargs)


@_entry("use_dynamic_bsz", True)
def set_use_dynamic_bsz(**kwargs):
    st.checkbox("Dynamic Batch Size", help="Pack micro batches by token count.", **kwargs)


@_entry("max_token_len_per_gpu", None)
def set_max_token_len_per_gpu(**kwargs):
    st.number_input(
        "Max Tokens per GPU",
        min_value=1,
        help="Tokens per micro batch; defaults to 2 * max_model_len.",
        **kwargs,
    )


@_entry("ulysses_sequence_parallel_size", 1)
def set_ulysses_sequence_parallel_size(**kwargs):
    st.number_input("Sequence Parallel Size", min_value=1, **kwargs)


@_entry("param_offload", False)
def set_param_offload(**kwargs):
    st.checkbox("Parameter Offload", **kwargs)


@_entry("optimizer_offload", False)
def set_optimizer_offload(**kwargs):
    st.checkbox("Optimizer Offload", **kwargs)


@_entry("critic_warmup", 0, visible=lambda: trains() and use_critic())
def set_critic_warmup(**kwargs):
    st.number_input("Critic Warmup Steps", min_value=0, **kwargs)
