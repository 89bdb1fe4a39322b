"""The Trinity run-config schema (pydantic v2) and its YAML loading.

A run is described by one YAML file whose sections map onto the models below
(``algorithm``, ``model``, ``cluster``, ``buffer``, ``explorer``, ``synchronizer``,
``trainer``, ``data_processor``, ``monitor``, ``log``, ``stages``). Field names and
defaults follow Trinity-RFT so that configs written for it keep working.

Validation happens at two levels:

* **Schema level** (``load_config`` / ``Config.model_validate``): types, allowed values,
  unknown keys, and every cross-field rule that depends on the config alone (derived
  defaults such as ``model.critic_model_path``, ``buffer.train_batch_size``, the
  ``nccl`` -> ``checkpoint`` downgrade for modes that cannot use NCCL, ...). Partial
  configs such as the snippets in the developer guide pass this level.
* **Run level** (``Config.check_and_update()`` or ``load_config(..., check=True)``):
  what a run on *this* machine needs on top: a model path, a checkpoint directory,
  task sets for the chosen mode, derived output directories, and the CUDA check for
  NCCL weight synchronisation.

Both levels raise a single :class:`ConfigError` that lists every problem with the file,
the dotted field path, the offending value and what is allowed. Numbers are strict (no
boolean or string where a number belongs), floats finite, ranges enforced, token limits
bounded by the local model's context; the run level also checks that input paths exist and
outputs can be written. Checks that need a registry (does workflow ``X`` exist? are its
arguments the ones it declares?) live in the packages that own those registries and use
:func:`check_component_args` against each component's declared ``Args``.
"""

from __future__ import annotations

from ._args import (
    ComponentArgs,
    Field,
    args_model,
    check_component_args,
    describe_args,
    is_open,
    model_validator,
)
from ._cluster import cluster_sizes_from_nodes
from ._core import (
    Config,
    attribute_overrides,
    load_config,
    locate_issues,
    parse_override,
    save_config,
)
from ._errors import ConfigError, ConfigIssue, did_you_mean
from ._ray_cluster import apply_cluster_sizes
from ._sections import (
    DEFAULT_EXPERIENCE_BUFFER_NAME,
    EXPLORER_NAME,
    MAX_CONTEXT_TOKENS,
    ROLLOUT_WEIGHT_SYNC_GROUP_NAME,
    TRAINER_NAME,
    AlgorithmConfig,
    BufferConfig,
    ClusterConfig,
    DataJuicerServiceConfig,
    DataProcessorConfig,
    DataSelectorConfig,
    DynamicTimeoutConfig,
    EngineType,
    ExperienceBufferConfig,
    ExperiencePipelineConfig,
    ExplorerConfig,
    ExplorerInput,
    ExternalModelConfig,
    FormatConfig,
    GenerationConfig,
    InferenceModelConfig,
    LogConfig,
    LogLevel,
    LoRAConfig,
    LossAggMode,
    MegatronParallelConfig,
    ModelConfig,
    MonitorConfig,
    MonitorType,
    OperatorConfig,
    OptimizerConfig,
    OverRolloutConfig,
    PromptTypeName,
    ReplayBufferConfig,
    RunMode,
    ServeConfig,
    ServiceConfig,
    StageConfig,
    StorageConfig,
    StorageTypeName,
    SynchronizerConfig,
    SyncMethodName,
    SyncStyleName,
    TaskPipelineConfig,
    TasksetConfig,
    TinkerConfig,
    TrainerConfig,
    TrainerInput,
)
from ._trainer_view import TRAINER_VIEWS, TrainerConfigDict, TrainerViewError
from ._utils import _set_derived as set_derived
from ._utils import cuda_is_available
from .modes import RUN_MODES, RunModeSpec, run_mode_spec
from .reward_shaping import RewardShapingConfig

__all__ = [
    # errors
    "ConfigError",
    "ConfigIssue",
    "did_you_mean",
    # component arguments
    "ComponentArgs",
    "Field",
    "model_validator",
    "args_model",
    "check_component_args",
    "describe_args",
    "is_open",
    # loading / saving
    "load_config",
    "locate_issues",
    "attribute_overrides",
    "parse_override",
    "save_config",
    "cuda_is_available",
    "apply_cluster_sizes",
    "cluster_sizes_from_nodes",
    # top level
    "Config",
    # run modes
    "RUN_MODES",
    "RunModeSpec",
    "run_mode_spec",
    "set_derived",
    "StageConfig",
    # sections
    "AlgorithmConfig",
    "OptimizerConfig",
    "ModelConfig",
    "LoRAConfig",
    "TinkerConfig",
    "ExternalModelConfig",
    "ClusterConfig",
    "BufferConfig",
    "ExplorerInput",
    "TrainerInput",
    "StorageConfig",
    "TasksetConfig",
    "ExperienceBufferConfig",
    "FormatConfig",
    "GenerationConfig",
    "DataSelectorConfig",
    "ReplayBufferConfig",
    "ExplorerConfig",
    "InferenceModelConfig",
    "OverRolloutConfig",
    "ServeConfig",
    "DynamicTimeoutConfig",
    "SynchronizerConfig",
    "TrainerConfig",
    "TrainerConfigDict",
    "TrainerViewError",
    "TRAINER_VIEWS",
    "MegatronParallelConfig",
    "DataProcessorConfig",
    "OperatorConfig",
    "RewardShapingConfig",
    "ExperiencePipelineConfig",
    "TaskPipelineConfig",
    "MonitorConfig",
    "LogConfig",
    "ServiceConfig",
    "DataJuicerServiceConfig",
    # value sets
    "RunMode",
    "StorageTypeName",
    "PromptTypeName",
    "SyncMethodName",
    "SyncStyleName",
    "EngineType",
    "MonitorType",
    "LogLevel",
    "LossAggMode",
    # constants
    "EXPLORER_NAME",
    "MAX_CONTEXT_TOKENS",
    "TRAINER_NAME",
    "DEFAULT_EXPERIENCE_BUFFER_NAME",
    "ROLLOUT_WEIGHT_SYNC_GROUP_NAME",
]
