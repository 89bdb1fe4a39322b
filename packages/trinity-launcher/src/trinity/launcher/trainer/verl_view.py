"""What the verl trainer derives from a config, in verl's config shape: the view behind
``config.trainer.trainer_config.<attribute>`` after ``check_and_update`` (trinity-core's
``TrainerConfigDict``, docs/compat.md D11).

Trinity-RFT 0.6 fills a veRL config object there and code written for it reads derived values
(``...actor_rollout_ref.actor.ppo_max_token_len_per_gpu``, ``...actor.optim.lr``,
``...trainer.n_gpus_per_node``). This module answers those reads with the values *this*
trainer uses, taken from the functions that build it -- :func:`~.build.trainer_plan` (the
policy and reference settings, total steps, world size), :func:`~.critic.critic_settings`,
:func:`~.workers.trainer_ranks_per_node` -- so the view cannot drift from the trainer. Where
they differ from Trinity-RFT's, the view shows ours (docs/compat.md D11 lists them). Only
settings the trainer really has are here; the keys a config names but the trainer does not
read come from the config itself (core overlays this view on them).

Registered for ``trainer_type: verl`` through the ``trinity.trainer_views`` entry point.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trinity.common.config import Config
    from trinity.launcher.trainer.verl_settings import VerlEngineSettings

__all__ = ["verl_view"]

#: the trainer always shards with FSDP2 (``trainer_strategy: fsdp`` is read as ``fsdp2``)
_STRATEGY = "fsdp2"


def verl_view(config: Config) -> dict[str, Any]:
    """The settings the verl trainer of ``config`` runs with, as verl's nested config keys.

    ``actor_rollout_ref.{model, actor, ref}``: the policy engine's settings (the reference
    engine, built where the loss or the reward's KL needs one, has the same ones); ``critic``:
    the critic's (``{"enable": False}`` when the algorithm has no critic); ``trainer``: ranks,
    nodes, names and steps. Raises ``ValueError`` where the trainer would refuse the config.
    """
    from trinity.launcher.trainer.build import trainer_plan

    plan = trainer_plan(config)
    settings = plan.settings
    return {
        "trainer": _trainer(config, settings, plan.world_size),
        "actor_rollout_ref": {
            "model": _model(settings),
            "actor": {
                "strategy": _STRATEGY,
                "ppo_micro_batch_size_per_gpu": settings.micro_batch_size,
                "use_dynamic_bsz": settings.use_dynamic_bsz,
                "ppo_max_token_len_per_gpu": settings.max_token_len_per_gpu,
                "grad_clip": settings.grad_clip,
                "ulysses_sequence_parallel_size": settings.ulysses_sequence_parallel_size,
                "optim": _optim(settings),
                "fsdp_config": _fsdp(settings),
            },
            "ref": {
                "strategy": _STRATEGY,
                "log_prob_micro_batch_size_per_gpu": _infer_micro_batch(settings),
                "log_prob_use_dynamic_bsz": settings.use_dynamic_bsz,
                "log_prob_max_token_len_per_gpu": _infer_tokens(settings),
                "ulysses_sequence_parallel_size": settings.ulysses_sequence_parallel_size,
                "fsdp_config": _fsdp(settings),
            },
        },
        "critic": _critic(config, plan) if plan.algorithm.use_critic else {"enable": False},
    }


def _trainer(config: Config, settings: VerlEngineSettings, world_size: int) -> dict[str, Any]:
    """verl's ``trainer`` section: the ranks are the trainer's processes (GPUs on CUDA, CPU
    ranks otherwise; one rank runs in the driver), packed per node as the placement packs
    them."""
    from trinity.launcher.trainer.workers import trainer_ranks_per_node

    per_node = trainer_ranks_per_node(config, world_size) if world_size > 1 else 1
    return {
        "n_gpus_per_node": per_node,
        "nnodes": math.ceil(world_size / per_node),
        "device": settings.resolved_device,
        "project_name": config.project,
        "group_name": config.group,
        "experiment_name": config.name,
        "total_training_steps": settings.total_training_steps,
        "balance_batch": config.trainer.balance_batch,
        "critic_warmup": config.trainer.critic_warmup,
    }


def _model(settings: VerlEngineSettings) -> dict[str, Any]:
    target = settings.lora_target_modules
    exclude = settings.lora_exclude_modules
    return {
        "path": settings.model_path,
        "trust_remote_code": settings.trust_remote_code,
        "enable_gradient_checkpointing": settings.gradient_checkpointing,
        "use_remove_padding": settings.use_remove_padding,
        "lora_rank": settings.lora_rank,
        "lora_alpha": settings.lora_alpha,
        "target_modules": list(target) if isinstance(target, (list, tuple)) else target,
        "exclude_modules": list(exclude) if isinstance(exclude, (list, tuple)) else exclude,
        "lora_adapter_path": settings.lora_adapter_path,
    }


def _optim(settings: VerlEngineSettings) -> dict[str, Any]:
    """verl's ``optim`` keys, plus the Megatron-style names Trinity-RFT 0.6 also fills, each
    describing the schedule verl's FSDP engine runs: the warm-up starts from 0 (both of its
    schedules), a cosine decays to ``min_lr_ratio * lr`` at ``total_training_steps``, a
    constant schedule stays at ``lr``."""
    cosine = settings.lr_scheduler_type == "cosine"
    return {
        "optimizer": settings.optimizer,
        "lr": settings.lr,
        "betas": list(settings.betas),
        "weight_decay": settings.weight_decay,
        "clip_grad": settings.grad_clip,
        "lr_scheduler_type": settings.lr_scheduler_type,
        "lr_warmup_steps": settings.lr_warmup_steps,
        "lr_warmup_steps_ratio": settings.lr_warmup_steps_ratio,
        "min_lr_ratio": settings.min_lr_ratio,
        "num_cycles": settings.num_cycles,
        "total_training_steps": settings.total_training_steps,
        "lr_decay_style": settings.lr_scheduler_type,
        "lr_decay_steps": settings.total_training_steps,
        "lr_warmup_init": 0.0,
        "min_lr": settings.min_lr_ratio * settings.lr if cosine else settings.lr,
    }


def _fsdp(settings: VerlEngineSettings) -> dict[str, Any]:
    return {
        "param_offload": settings.param_offload,
        "optimizer_offload": settings.optimizer_offload,
        "fsdp_size": settings.fsdp_size,
    }


def _infer_micro_batch(settings: VerlEngineSettings) -> int:
    """Rows per log-prob / value forward (the engine's ``infer_micro_batch_size_per_gpu``)."""
    return settings.infer_micro_batch_size or settings.micro_batch_size


def _infer_tokens(settings: VerlEngineSettings) -> Any:
    """Tokens per log-prob / value forward (the engine's ``infer_max_token_len_per_gpu``)."""
    return settings.infer_max_token_len_per_gpu or settings.max_token_len_per_gpu


def _critic(config: Config, plan: Any) -> dict[str, Any]:
    from trinity.launcher.trainer.critic import critic_settings

    settings, value_loss = critic_settings(config, total_training_steps=plan.total_steps or -1)
    return {
        "enable": True,
        "strategy": _STRATEGY,
        "ppo_epochs": 1,
        "ppo_micro_batch_size_per_gpu": settings.micro_batch_size,
        "forward_micro_batch_size_per_gpu": _infer_micro_batch(settings),
        "use_dynamic_bsz": settings.use_dynamic_bsz,
        "ppo_max_token_len_per_gpu": settings.max_token_len_per_gpu,
        "forward_max_token_len_per_gpu": _infer_tokens(settings),
        "ulysses_sequence_parallel_size": settings.ulysses_sequence_parallel_size,
        "grad_clip": settings.grad_clip,
        "cliprange_value": value_loss.cliprange_value,
        "loss_agg_mode": value_loss.loss_agg_mode,
        "optim": _optim(settings),
        "model": {
            "path": settings.model_path,
            "tokenizer_path": settings.tokenizer_path,
            "trust_remote_code": settings.trust_remote_code,
            "enable_gradient_checkpointing": settings.gradient_checkpointing,
            "use_remove_padding": settings.use_remove_padding,
            "fsdp_config": _fsdp(settings),
        },
    }
