"""Building a run's trainer: its engines (policy, reference, critic; in this process or as
Ray worker ranks), readers and loop object. The loop itself is the run layer's
(:class:`trinity.launcher.run.coordinator.Coordinator`), the same in every mode that trains.

One rank runs in this process (gloo on CPU / NCCL on one GPU); several ranks run as Ray
workers (:mod:`trinity.launcher.trainer.workers`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Optional

from trinity.common.config import Config
from trinity.launcher.trainer.data import (
    DATASET_SCHEMAS,
    DatasetExperienceReader,
    build_trainer_readers,
)
from trinity.launcher.trainer.trainer import Trainer
from trinity.launcher.trainer.workers import trainer_world_size
from trinity.utils.log import get_logger

logger = get_logger(__name__)


@dataclass
class TrainEngines:
    """What a trainer trains with: the policy engine, a reference engine where the loss
    needs one, a critic where the algorithm type uses one (local engines or Ray rank groups)."""

    engine: Any
    ref_engine: Any = None
    critic: Any = None
    plan: Optional[_Plan] = field(default=None, repr=False)  # what they were built for


@dataclass
class _Plan:
    algorithm: Any
    schema: str
    total_steps: Optional[int]
    settings: Any
    needs_ref: bool
    world_size: int


def trainer_plan(config: Config) -> _Plan:
    """What the trainer of ``config`` is built with: the algorithm, the policy engine's settings
    (also the reference engine's), the total steps, whether a reference is needed and the
    world size. One function, so the engines and the verl view of ``trainer.trainer_config``
    (:mod:`~trinity.launcher.trainer.verl_view`) agree."""
    from trinity.algorithm.resolve import resolve_algorithm
    from trinity.launcher.trainer.trainer import uses_kl_penalty
    from trinity.launcher.trainer.verl_engine import TrinityLoss, VerlEngineSettings

    algorithm = resolve_algorithm(config)
    schema = algorithm.algorithm.schema_name()
    total_steps = _total_steps(config, schema)
    overrides: dict[str, Any] = {"total_training_steps": total_steps or -1}
    if schema == "dpo":
        # The DPO loss pairs rows [chosen_i, rejected_i]; micro-batches must not split a pair
        # and its normalisation is per batch, so a step is one micro-batch (see the engine).
        rows = 2 * (config.buffer.train_batch_size or config.buffer.batch_size)
        overrides.update(use_dynamic_bsz=False, micro_batch_size=rows)
    settings = VerlEngineSettings.from_config(config, **overrides)
    # built here too so that a loss refusing algorithm.rollout_correction fails before engines
    loss = TrinityLoss.from_algorithm(
        algorithm, rollout_correction=config.algorithm.rollout_correction
    )
    needs_ref = (
        "ref_logprob" in loss.required_fields() or uses_kl_penalty(algorithm)  # KL in the reward
    )
    world_size = trainer_world_size(config, settings.resolved_device)
    return _Plan(algorithm, schema, total_steps, settings, needs_ref, world_size)


def _reference(engine: Any, plan: _Plan, build: Any) -> Any:
    """The reference policy where the loss needs one: with LoRA the policy engine with its
    adapter disabled (the frozen base, no second copy); else ``build()``, a second engine of
    the same model that is never stepped."""
    if not plan.needs_ref:
        return None
    if plan.settings.lora_rank:
        from trinity.launcher.trainer.verl_lora import AdapterDisabledReference

        return AdapterDisabledReference(engine)
    return build()


def _local_engines(config: Config, plan: _Plan) -> TrainEngines:
    from trinity.launcher.trainer.verl_engine import VerlTrainEngine

    engine = VerlTrainEngine(plan.settings)
    ref_engine = _reference(engine, plan, partial(VerlTrainEngine, plan.settings))
    critic = None
    if plan.algorithm.use_critic:
        from trinity.launcher.trainer.critic import VerlCriticEngine

        critic = VerlCriticEngine.from_config(config, total_training_steps=plan.total_steps or -1)
    return TrainEngines(engine, ref_engine, critic, plan)


def build_local_cpu_engines(config: Config) -> Optional[TrainEngines]:
    """The trainer's engines when they run in this process on the CPU (one rank), else ``None``.

    They need neither Ray nor a placement, so mode ``both`` builds them while Ray starts: on a
    small CPU box, importing verl and building the model and optimizer then use the cores
    ``ray.init`` leaves idle while it waits for its processes, instead of competing with the
    rollout engine's start (the quickstart's path to its first step). Only on the CPU: whatever
    the imports set in ``os.environ`` while Ray starts its processes may reach Ray's workers,
    and on the CPU that is harmless (verl's and tensordict's flags, inductor's default cache
    directory, a CUDA arch list CPU builds ignore).
    """
    plan = trainer_plan(config)
    if plan.world_size > 1 or plan.settings.resolved_device != "cpu":
        return None
    return _local_engines(config, plan)


def build_trainer(
    config: Config, placement: Any = None, engines: Optional[TrainEngines] = None
) -> Trainer:
    """The policy engine (a reference engine where the loss needs one, a critic where the
    algorithm type uses one), readers, loop. Ray worker ranks go in ``placement``'s trainer
    bundles when given (:class:`~trinity.launcher.placement.Placement`). ``engines``, when
    given, are the ones :func:`build_local_cpu_engines` built for this config."""
    plan = (
        engines.plan if engines is not None and engines.plan is not None else trainer_plan(config)
    )
    if engines is None:
        if plan.world_size > 1:
            engines = TrainEngines(*_remote_engines(config, plan, placement=placement))
        else:
            engines = _local_engines(config, plan)
    readers = build_trainer_readers(config, plan.schema, engines.engine.tokenizer)
    pad = getattr(engines.engine.tokenizer, "pad_token_id", None)
    return Trainer(
        config,
        engines.engine,
        readers,
        ref_engine=engines.ref_engine,
        pad_token_id=pad or 0,
        critic=engines.critic,
    )


def _remote_engines(config: Config, plan: _Plan, placement: Any = None) -> tuple[Any, Any, Any]:
    """The policy (and reference, critic) engines as ``plan.world_size`` Ray worker ranks."""
    import ray
    from verl.utils import hf_tokenizer

    from trinity.launcher.trainer.critic import VerlCriticEngine
    from trinity.launcher.trainer.verl_engine import VerlTrainEngine
    from trinity.launcher.trainer.workers import RemoteEngine, TrainerWorkerGroup

    if not ray.is_initialized():
        raise RuntimeError("trainer Ray workers need Ray: run inside ray_session(config)")
    settings, use_critic, total_steps = plan.settings, plan.algorithm.use_critic, plan.total_steps
    builders: dict[str, Any] = {"actor": partial(VerlTrainEngine, settings)}
    if plan.needs_ref and not settings.lora_rank:  # with LoRA: the actor, adapter disabled
        builders["ref"] = partial(VerlTrainEngine, settings)
    if use_critic:
        builders["critic"] = partial(
            VerlCriticEngine.from_config, config, total_training_steps=total_steps or -1
        )
    device = settings.resolved_device
    from trinity.launcher.colocate import trainer_rank_gpus

    rank_options = (
        placement.trainer_options if placement is not None and placement.plan.trainer else None
    )
    group = TrainerWorkerGroup(
        plan.world_size,
        builders,
        device,
        rank_options=rank_options,
        gpus_per_rank=trainer_rank_gpus(config),
    )
    # verl's loader, as the engines' HFModelConfig uses (a missing pad token becomes EOS)
    tokenizer = hf_tokenizer(
        settings.tokenizer_path or settings.model_path,
        trust_remote_code=settings.trust_remote_code,
    )
    unit = 2 if plan.schema == "dpo" else 1  # DPO's [chosen_i, rejected_i] pairs stay on one rank
    # trainer.balance_batch: ranks get about equal token counts (verl's partition); with a
    # fixed micro-batch size also equal row counts
    shard = dict(
        tokenizer=tokenizer,
        row_unit=unit,
        balance=bool(config.trainer.balance_batch),
        equal_rows=not settings.use_dynamic_bsz,
    )
    engine = RemoteEngine(group, "actor", **shard)
    ref = _reference(engine, plan, partial(RemoteEngine, group, "ref", **shard))
    critic = RemoteEngine(group, "critic", **{**shard, "equal_rows": True}) if use_critic else None
    return engine, ref, critic


def _total_steps(config: Config, schema: str) -> Optional[int]:
    """The steps the trainer will run (the lr schedule's length): where the train loop stops
    (:func:`~trinity.launcher.run.coordinator.train_step_limit`), or, for an offline set read
    from a file with no step limit, its rows x epochs / batch; ``None`` when unknown."""
    from trinity.launcher.run.coordinator import train_step_limit

    limit = train_step_limit(config)
    if config.buffer.total_steps:
        return limit
    exp = config.buffer.trainer_input.experience_buffer
    if schema in DATASET_SCHEMAS and exp is not None and exp.storage_type == "file":
        from trinity.buffer.taskset.loading import load_taskset_data

        rows = len(load_taskset_data(exp.path, split=exp.split, subset_name=exp.subset_name))
        per_step = config.buffer.train_batch_size or config.buffer.batch_size
        epochs = max(math.floor(rows * config.buffer.total_epochs / per_step), 1)
        return min(epochs, limit) if limit else epochs
    return limit


__all__ = [
    "DatasetExperienceReader",
    "TrainEngines",
    "build_local_cpu_engines",
    "build_trainer",
    "trainer_plan",
]
