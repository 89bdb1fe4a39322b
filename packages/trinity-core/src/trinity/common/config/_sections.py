"""Config sections: the pydantic models of every YAML section.

The shared types live in ``_base.py`` and the data sections (task sets, buffers, pipelines) in
``_storage.py``; both are re-exported here, so ``from ._sections import X`` finds every name.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import (
    BeforeValidator,
    Field,
)

from ._base import (  # noqa: F401 - re-exported (see __all__)
    _NO_GPU_ENGINES,
    _SFT_LIKE,
    DEFAULT_EXPERIENCE_BUFFER_NAME,
    EXPLORER_NAME,
    LOG_DIR_ENV_VAR,
    LOG_LEVEL_ENV_VAR,
    LOG_NODE_IP_ENV_VAR,
    PLUGIN_DIRS_ENV_VAR,
    ROLLOUT_WEIGHT_SYNC_GROUP_NAME,
    TRAINER_NAME,
    ConcurrentMode,
    DType,
    EngineType,
    Float,
    Int,
    LogLevel,
    LossAggMode,
    LRSchedulerType,
    MonitorType,
    PromptTypeName,
    RunMode,
    SaveHFCheckpoint,
    SaveStrategy,
    StorageTypeName,
    SyncMethodName,
    SyncStyleName,
    TrainerStrategy,
    _normalized,
    _Section,
    _stringify_values,
)
from ._cluster import ClusterConfig  # noqa: F401 - re-exported (see __all__)
from ._errors import MAX_CONTEXT_TOKENS  # noqa: F401 - re-exported
from ._model import (  # noqa: F401 - re-exported (see __all__)
    ExternalModelConfig,
    InferenceModelConfig,
    LoRAConfig,
    ModelConfig,
    TinkerConfig,
)
from ._storage import (  # noqa: F401 - re-exported (see __all__)
    _STORAGE_ALIAS,
    DataProcessorConfig,
    DataSelectorConfig,
    ExperienceBufferConfig,
    ExperiencePipelineConfig,
    FormatConfig,
    GenerationConfig,
    OperatorConfig,
    ReplayBufferConfig,
    StorageConfig,
    TaskPipelineConfig,
    TasksetConfig,
)
from ._trainer import (  # noqa: F401 - re-exported (see __all__)
    MegatronParallelConfig,
    TrainerConfig,
)
from ._utils import _intent_dump
from .rollout_correction import RolloutCorrectionConfig

#: every name of the three modules: ``from ._sections import X`` keeps working for each
__all__ = [
    "AlgorithmConfig",
    "BufferConfig",
    "ClusterConfig",
    "ConcurrentMode",
    "DEFAULT_EXPERIENCE_BUFFER_NAME",
    "DType",
    "DataJuicerServiceConfig",
    "DataProcessorConfig",
    "DataSelectorConfig",
    "DynamicTimeoutConfig",
    "EXPLORER_NAME",
    "EngineType",
    "ExperienceBufferConfig",
    "ExperiencePipelineConfig",
    "ExplorerConfig",
    "ExplorerInput",
    "ExternalModelConfig",
    "Float",
    "FormatConfig",
    "GenerationConfig",
    "InferenceModelConfig",
    "Int",
    "LOG_DIR_ENV_VAR",
    "LOG_LEVEL_ENV_VAR",
    "LOG_NODE_IP_ENV_VAR",
    "LRSchedulerType",
    "LoRAConfig",
    "LogConfig",
    "LogLevel",
    "LossAggMode",
    "MegatronParallelConfig",
    "ModelConfig",
    "MonitorConfig",
    "MonitorType",
    "OperatorConfig",
    "OptimizerConfig",
    "OverRolloutConfig",
    "PLUGIN_DIRS_ENV_VAR",
    "PromptTypeName",
    "ROLLOUT_WEIGHT_SYNC_GROUP_NAME",
    "ReplayBufferConfig",
    "RunMode",
    "SaveHFCheckpoint",
    "SaveStrategy",
    "ServiceConfig",
    "StageConfig",
    "StorageConfig",
    "StorageTypeName",
    "SyncMethodName",
    "SyncStyleName",
    "SynchronizerConfig",
    "TRAINER_NAME",
    "TaskPipelineConfig",
    "TasksetConfig",
    "TinkerConfig",
    "TrainerConfig",
    "TrainerInput",
    "TrainerStrategy",
    "_NO_GPU_ENGINES",
    "_SFT_LIKE",
    "_STORAGE_ALIAS",
    "_Section",
    "_normalized",
    "_stringify_values",
]

# --------------------------------------------------------------------------------------
# Algorithm
# --------------------------------------------------------------------------------------


class OptimizerConfig(_Section):
    """Optimizer and learning-rate schedule of the policy model."""

    lr: Float = Field(1e-6, gt=0.0, description="Peak learning rate.")
    lr_warmup_steps: Int = Field(
        -1, ge=-1, description="Warm-up steps; -1 uses lr_warmup_steps_ratio."
    )
    lr_warmup_steps_ratio: Float = Field(
        0.0, ge=0.0, le=1.0, description="Warm-up steps as a fraction of total steps."
    )
    min_lr_ratio: Float = Field(0.01, ge=0.0, le=1.0, description="Final lr as a fraction of lr.")
    warmup_style: Optional[LRSchedulerType] = Field(
        None, description="Deprecated; copied into lr_scheduler_type."
    )
    lr_scheduler_type: LRSchedulerType = Field("constant", description="constant or cosine.")
    optimizer_type: str = Field("adam", description="adam, adamw, sgd, ...")
    betas: list[Annotated[Float, Field(ge=0.0, lt=1.0)]] = Field(
        default_factory=lambda: [0.9, 0.999], min_length=2, max_length=2, description="Adam betas."
    )
    weight_decay: Float = Field(0.01, ge=0.0, description="Weight decay.")
    clip_grad: Float = Field(1.0, gt=0.0, description="Gradient clipping norm.")


class AlgorithmConfig(_Section):
    """The RL algorithm and its pluggable components.

    Component names left unset (None) take the algorithm type's defaults; that
    resolution needs the algorithm registry and happens in ``trinity.algorithm``.
    """

    algorithm_type: str = Field("ppo", description="Registered algorithm: ppo, grpo, opmd, sft...")
    repeat_times: Int = Field(1, ge=1, description="Rollouts per task (group size for GRPO).")
    optimizer: OptimizerConfig = Field(
        default_factory=OptimizerConfig, description="Policy optimizer."
    )
    sample_strategy: Optional[str] = Field(None, description="How batches are drawn from buffers.")
    sample_strategy_args: Optional[dict[str, Any]] = Field(None, description="Its arguments.")
    advantage_fn: Optional[str] = Field(None, description="Advantage / return computation.")
    advantage_fn_args: Optional[dict[str, Any]] = Field(None, description="Its arguments.")
    kl_penalty_fn: Optional[str] = Field(
        None, description="KL penalty applied to rewards ('none' disables it)."
    )
    kl_penalty_fn_args: Optional[dict[str, Any]] = Field(None, description="Its arguments.")
    policy_loss_fn: Optional[str] = Field(None, description="Policy loss.")
    policy_loss_fn_args: Optional[dict[str, Any]] = Field(None, description="Its arguments.")
    kl_loss_fn: Optional[str] = Field(None, description="KL loss term ('none' disables it).")
    kl_loss_fn_args: Optional[dict[str, Any]] = Field(None, description="Its arguments.")
    entropy_loss_fn: Optional[str] = Field(None, description="Entropy loss term.")
    entropy_loss_fn_args: Optional[dict[str, Any]] = Field(None, description="Its arguments.")
    loss_agg_mode: Optional[LossAggMode] = Field(
        None, description="How token losses are aggregated; defaults to token-mean."
    )
    enable_router_replay: bool = Field(False, description="Rollout router replay (MoE models).")
    bypass_old_logprobs: bool = Field(
        True, description="Use rollout logprobs as old logprobs instead of recomputing them."
    )
    rollout_correction: Optional[RolloutCorrectionConfig] = Field(
        None,
        description="Rollout/training mismatch correction (verl's keys: IS weights, rejection "
        "sampling, bypass mode); null: off.",
    )


# --------------------------------------------------------------------------------------
# Cluster, buffer, explorer, synchronizer, trainer, monitor, log, service
# --------------------------------------------------------------------------------------


class ExplorerInput(_Section):
    """What the explorer reads: train task sets, eval task sets and their defaults."""

    taskset: Optional[TasksetConfig] = Field(None, description="The train task set.")
    tasksets: list[TasksetConfig] = Field(
        default_factory=list, description="Several train task sets (instead of taskset)."
    )
    eval_tasksets: list[TasksetConfig] = Field(
        default_factory=list, description="Task sets evaluated every explorer.eval_interval."
    )
    default_workflow_type: Optional[str] = Field(
        None, description="Workflow for task sets that name none."
    )
    default_eval_workflow_type: Optional[str] = Field(
        None, description="Workflow for eval task sets that name none."
    )
    default_reward_fn_type: Optional[str] = Field(
        None, description="Reward function for task sets that name none."
    )

    def get_tasksets(self) -> list[TasksetConfig]:
        """The train task sets, whichever of ``taskset`` / ``tasksets`` was used."""
        return [self.taskset] if self.taskset is not None else list(self.tasksets)


class TrainerInput(_Section):
    """What the trainer reads."""

    experience_buffer: Optional[ExperienceBufferConfig] = Field(
        None, description="Main experience buffer (created as a queue for mode both/explore)."
    )
    auxiliary_buffers: dict[str, ExperienceBufferConfig] = Field(
        default_factory=dict, description="Extra buffers by name (e.g. SFT data for mixing)."
    )


class BufferConfig(_Section):
    """Batch sizes and the storages connecting explorer and trainer."""

    batch_size: Int = Field(1, ge=1, description="Tasks per explore step.")
    train_batch_size: Int = Field(
        0, ge=0, description="Experiences per train step; 0 means batch_size * repeat_times."
    )
    total_epochs: Int = Field(1, ge=1, description="Passes over the train task set.")
    total_steps: Optional[Int] = Field(None, ge=1, description="Stop after this many steps.")
    explorer_input: ExplorerInput = Field(
        default_factory=ExplorerInput, description="Inputs of the explorer."
    )
    trainer_input: TrainerInput = Field(
        default_factory=TrainerInput, description="Inputs of the trainer."
    )
    explorer_output: Optional[StorageConfig] = Field(None, description="Set automatically.")
    tokenizer_path: Optional[str] = Field(None, description="Set from model.model_path.")
    cache_dir: Optional[str] = Field(None, description="Set to <checkpoint_job_dir>/buffer.")


class ServeConfig(_Section):
    """Mode ``serve``'s proxy beyond Trinity-RFT's keys (``explorer.serve``; a Trinity
    extension)."""

    api_key_env: Optional[str] = Field(
        None,
        description=(
            "Name of an environment variable holding the API key clients must send "
            "(Authorization: Bearer <key>; others get 401). None: no key."
        ),
    )
    max_request_bytes: Int = Field(
        1 << 20, ge=1024, description="Largest request body accepted (bytes; larger: 413)."
    )
    max_concurrent_requests: Int = Field(
        128, ge=1, description="Chat completions in flight at most (more: 429, retry later)."
    )
    commit_every: Optional[Int] = Field(
        None,
        ge=1,
        description=(
            "Commit automatically once this many rewarded experiences wait. None: only "
            "POST /commit writes them to the buffer."
        ),
    )


class OverRolloutConfig(_Section):
    """Start training before the slowest tasks of a step finish."""

    ratio: Float = Field(
        0.0, ge=0.0, lt=1.0, description="Fraction of a step's tasks the explorer may skip."
    )
    wait_after_min: Float = Field(30.0, ge=0.0, description="Seconds to wait after the minimum.")
    return_partial_tasks: bool = Field(False, description="Keep tasks with partial results.")


class DynamicTimeoutConfig(_Section):
    """Per-step task timeout derived from observed task durations."""

    enable: bool = Field(False, description="Enable dynamic timeouts.")
    warmup_min_steps: Int = Field(1, ge=0, description="Fully observed steps before enabling.")
    ratio: Float = Field(3.0, gt=0.0, description="Timeout = average task time * ratio.")


class ExplorerConfig(_Section):
    """The explorer: rollout engines, workflow runners, evaluation."""

    name: str = Field(EXPLORER_NAME, description="Ray actor name of the explorer.")
    mode: Optional[RunMode] = Field(None, description="Copied from Config.mode; do not set.")
    runner_per_model: Int = Field(8, ge=1, description="Workflow runners per rollout engine.")
    tasks_per_runner: Int = Field(
        1,
        ge=1,
        description=(
            "Tasks one workflow runner runs at once (Trinity extension; 1 is Trinity-RFT's "
            "one task per runner). More suits workflows that mostly wait on the engine: fewer "
            "runner processes to start, one wave per step. A crashing or hung task can then "
            "take the other tasks of its runner with it (they are retried)."
        ),
    )
    max_timeout: Int = Field(1800, ge=1, description="Seconds a task may run.")
    max_retry_times: Int = Field(2, ge=0, description="Retries of a failed or timed-out task.")
    min_batch_fraction: Float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description=(
            "Fraction of a step's tasks that must succeed; below it the explorer runs "
            "replacement tasks. The trainer trains on what the step produced."
        ),
    )
    max_replacement_rounds: Int = Field(
        3,
        ge=0,
        description=(
            "Rounds of replacement tasks per explore step before it gives up on "
            "min_batch_fraction (a step with no experience at all stops the run)."
        ),
    )
    max_engine_restarts: Int = Field(
        3,
        ge=0,
        description=(
            "Restarts of a dead rollout engine allowed within engine_restart_window seconds; "
            "one more death stops the run (0: the first death stops it)."
        ),
    )
    engine_restart_window: Float = Field(
        600.0, gt=0, description="Seconds over which max_engine_restarts is counted."
    )
    env_vars: Annotated[dict[str, str], BeforeValidator(_stringify_values)] = Field(
        default_factory=dict, description="Environment variables for workflow runners."
    )
    concurrent_mode: ConcurrentMode = Field(
        "sequential", description="How a runner executes a group of repeated tasks."
    )
    max_repeat_times_per_runner: Optional[Int] = Field(
        None, ge=1, description="Split repeated tasks across runners in chunks of this size."
    )
    runner_num: Optional[Int] = Field(None, ge=1, description="Deprecated; use runner_per_model.")
    rollout_model: InferenceModelConfig = Field(
        default_factory=InferenceModelConfig, description="Engines serving the policy model."
    )
    auxiliary_models: list[InferenceModelConfig] = Field(
        default_factory=list, description="Extra models for workflows (judges, tools, ...)."
    )
    eval_interval: Int = Field(100, ge=1, description="Evaluate every N explore steps.")
    eval_on_startup: bool = Field(True, description="Evaluate at step 0.")
    bench_on_latest_checkpoint: bool = Field(
        False, description="bench mode: only evaluate the latest checkpoint."
    )
    proxy_port: Int = Field(8010, ge=1, le=65535, description="serve mode proxy port.")
    listen_address: str = Field(
        "127.0.0.1",
        description=(
            "serve mode listen address (Trinity-RFT: 0.0.0.0; here loopback unless told otherwise)."
        ),
    )
    service_status_check_interval: Int = Field(
        60,
        ge=1,
        description="serve mode: seconds between checks for new weights and dead engines.",
    )
    serve: ServeConfig = Field(
        default_factory=ServeConfig, description="serve mode: API key and limits."
    )
    min_running_model_num: Int = Field(1, ge=1, description="serve mode: models kept running.")
    db_url: Optional[str] = Field(None, description="serve mode history database.")
    over_rollout: OverRolloutConfig = Field(
        default_factory=OverRolloutConfig, description="Over-rollout (experimental)."
    )
    dynamic_timeout: DynamicTimeoutConfig = Field(
        default_factory=DynamicTimeoutConfig, description="Dynamic timeout (experimental)."
    )
    runner_state_report_interval: Int = Field(
        0, ge=0, description="Report runner state every N seconds; 0 disables."
    )
    max_inflight_batches: Int = Field(
        2,
        ge=1,
        description="sync_style fully_async: batches the explorer may have generated and the "
        "trainer not yet trained (how far it runs ahead).",
    )


class SynchronizerConfig(_Section):
    """How and when new weights travel from the trainer to the rollout engines."""

    sync_method: SyncMethodName = Field(
        "nccl", description="nccl (GPU broadcast), checkpoint (via disk) or memory."
    )
    sync_style: SyncStyleName = Field(
        "fixed", description="fixed, dynamic_by_explorer, dynamic_by_trainer or fully_async."
    )
    sync_interval: Int = Field(1, ge=1, description="Synchronise every N steps.")
    explorer_sync_interval: Optional[Int] = Field(
        None, ge=1, description="Defaults to sync_interval."
    )
    trainer_sync_interval: Optional[Int] = Field(
        None, ge=1, description="Defaults to sync_interval."
    )
    sync_offset: Int = Field(0, ge=0, description="Explorer steps run ahead before the first sync.")
    sync_timeout: Int = Field(3600, ge=1, description="Seconds to wait for a synchronisation.")
    group_name: str = Field(ROLLOUT_WEIGHT_SYNC_GROUP_NAME, description="NCCL process group name.")
    wait_for_checkpoint: bool = Field(False, description="Wait for the latest checkpoint.")
    explorer_world_size: Optional[Int] = Field(None, ge=1, description="Computed.")
    ray_namespace: str = Field("", description="Set from Config.ray_namespace.")


class MonitorConfig(_Section):
    """Where metrics go."""

    monitor_type: MonitorType = Field(
        "tensorboard",
        description=(
            "tensorboard, wandb, mlflow, swanlab, or any monitor registered in "
            "trinity.utils.monitor.MONITOR (a plugin's @MONITOR.register_module). The built-in "
            "names always validate; other names must be registered when the config is loaded."
        ),
    )
    monitor_args: Optional[dict[str, Any]] = Field(None, description="Monitor arguments.")
    detailed_stats: bool = Field(False, description="Report mean/std/max/min for eval metrics.")
    enable_ray_timeline: bool = Field(False, description="Write a Ray timeline profile.")
    cache_dir: str = Field("", description="Set to <checkpoint_job_dir>/monitor.")


class LogConfig(_Section):
    """Logging."""

    level: LogLevel = Field("INFO", description="DEBUG, INFO, WARNING or ERROR.")
    group_by_node: bool = Field(False, description="Group log files by node IP.")
    save_dir: str = Field("", description="Set to <checkpoint_job_dir>/log.")


class DataJuicerServiceConfig(_Section):
    """A Data-Juicer server used by data_juicer operators."""

    server_url: Optional[str] = Field(None, description="URL of a running server.")
    auto_start: bool = Field(False, description="Start a local server.")
    port: Optional[Int] = Field(None, ge=1, le=65535, description="Port of the local server.")


class ServiceConfig(_Section):
    """External services."""

    data_juicer: Optional[DataJuicerServiceConfig] = Field(None, description="Data-Juicer.")


class StageConfig(_Section):
    """One stage of a multi-stage run (e.g. SFT warm-up, then GRPO).

    Every section is a *partial override*: only the keys written here replace those of
    the base config; the merged result is validated as a whole config.
    """

    stage_name: str = Field(
        ..., min_length=1, description="Stage name; the run becomes name/stage."
    )
    mode: Optional[RunMode] = None
    algorithm: Optional[AlgorithmConfig] = None
    model: Optional[ModelConfig] = None
    cluster: Optional[ClusterConfig] = None
    buffer: Optional[BufferConfig] = None
    explorer: Optional[ExplorerConfig] = None
    synchronizer: Optional[SynchronizerConfig] = None
    trainer: Optional[TrainerConfig] = None
    data_processor: Optional[DataProcessorConfig] = None
    monitor: Optional[MonitorConfig] = None
    log: Optional[LogConfig] = None

    def overrides(self) -> dict[str, Any]:
        """The keys this stage sets, as a nested dict (without ``stage_name``)."""
        data = _intent_dump(self)
        data.pop("stage_name", None)
        return data
