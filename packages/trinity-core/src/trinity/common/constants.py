"""Names and enumerations shared across packages (Trinity-RFT's ``trinity.common.constants``).

Configs here take these values as plain strings (``storage_type: queue``), so the enums exist
for code written for Trinity-RFT, which compares and assigns them
(``config.buffer.trainer_input.experience_buffer.storage_type = StorageType.QUEUE``). Each
string-valued enum is a ``str`` enum, so a member and its value are interchangeable both ways:
``StorageType.QUEUE == "queue"``, and a config field given the member validates as its value.
As in Trinity-RFT, member names are case-insensitive (``StorageType.sql``, ``StorageType["sql"]``)
and so are values (``StorageType("SQL")``).

The ``*_ENV_VAR`` names are the environment variables Trinity-RFT 0.6 defines, with its values;
this module is their one definition (the config, the logger and the plugin loader import them
from here), so a run started by code written for Trinity-RFT sets the variables ours read.
"""

from __future__ import annotations

from enum import Enum, EnumMeta
from typing import Any

__all__ = [
    "EXPLORER_NAME",
    "TRAINER_NAME",
    "ROLLOUT_WEIGHT_SYNC_GROUP_NAME",
    "SELECTOR_METRIC",
    "DEBUG_NAMESPACE",
    "CHECKPOINT_ROOT_DIR_ENV_VAR",
    "PREVIOUS_STAGE_CHECKPOINT_DIR_ENV_VAR",
    "MODEL_PATH_ENV_VAR",
    "TASKSET_PATH_ENV_VAR",
    "BUFFER_PATH_ENV_VAR",
    "PLUGIN_DIRS_ENV_VAR",
    "LOG_DIR_ENV_VAR",
    "LOG_LEVEL_ENV_VAR",
    "LOG_NODE_IP_ENV_VAR",
    "MAX_EXP_BYTES_ENV_VAR",
    "MAX_MODEL_LEN",
    "SYNC_METHOD_ALIASES",
    "SYNC_STYLE_ALIASES",
    "CaseInsensitiveEnumMeta",
    "SyncMethodEnumMeta",
    "SyncStyleEnumMeta",
    "CaseInsensitiveEnum",
    "PromptType",
    "TaskType",
    "ReadStrategy",
    "StorageType",
    "MonitorType",
    "SyncMethod",
    "SyncStyle",
    "RunningStatus",
    "DataProcessorPipelineType",
    "OpType",
    "SaveStrategy",
]

EXPLORER_NAME = "explorer"
TRAINER_NAME = "trainer"
ROLLOUT_WEIGHT_SYNC_GROUP_NAME = "rollout_weight_sync"
#: Trinity-RFT's name of the Ray namespace its debug tools share (an environment variable name).
DEBUG_NAMESPACE = "TRINITY_DEBUG_NAMESPACE"

# Environment variables (Trinity-RFT's names and values). Configs reach the first five through
# ``${oc.env:...}`` interpolation; the run sets the plugin and log ones for its Ray workers.
CHECKPOINT_ROOT_DIR_ENV_VAR = "TRINITY_CHECKPOINT_ROOT_DIR"
PREVIOUS_STAGE_CHECKPOINT_DIR_ENV_VAR = "TRINITY_PREV_STAGE_CKPT_DIR"
MODEL_PATH_ENV_VAR = "TRINITY_MODEL_PATH"
TASKSET_PATH_ENV_VAR = "TRINITY_TASKSET_PATH"
BUFFER_PATH_ENV_VAR = "TRINITY_BUFFER_PATH"
#: ``os.pathsep``-separated plugin directories (:mod:`trinity.utils.plugin_loader`)
PLUGIN_DIRS_ENV_VAR = "TRINITY_PLUGIN_DIRS"
#: the directory of the run's log files
LOG_DIR_ENV_VAR = "TRINITY_LOG_DIR"
#: the level of the ``trinity`` loggers (:mod:`trinity.utils.log`)
LOG_LEVEL_ENV_VAR = "TRINITY_LOG_LEVEL"
#: ``"1"``: group log files by node IP (``log.group_by_node``)
LOG_NODE_IP_ENV_VAR = "TRINITY_LOG_NODE_IP"
#: Trinity-RFT's cap on one serialized experience, in bytes
MAX_EXP_BYTES_ENV_VAR = "TRINITY_MAX_EXP_SIZE"

#: Trinity-RFT's fallback ``max_model_len`` where nothing else gives one
MAX_MODEL_LEN = 4096

#: Trinity-RFT's deprecated ``sync_method`` names and what they mean now.
SYNC_METHOD_ALIASES = {"online": "nccl", "offline": "checkpoint"}
#: Trinity-RFT 0.6's ``sync_style`` names and the values our configs use for them.
SYNC_STYLE_ALIASES = {
    "explorer_driven": "dynamic_by_explorer",
    "trainer_driven": "dynamic_by_trainer",
}

#: Key of the pipeline metric that carries task-selector feedback:
#: ``{SELECTOR_METRIC: {taskset_id: {"indices": [...], "values": [...]}}}`` (an operator
#: returns it; the task set reader passes it to its selector).
SELECTOR_METRIC = "selector_metric"


class CaseInsensitiveEnumMeta(EnumMeta):
    """Members by name in any case (``E.sql``, ``E["Sql"]``) and by value in any case
    (``E("SQL")``), as Trinity-RFT's enums of config values.

    ``name_aliases`` (lower-case alias -> lower-case value, Trinity-RFT's hook) lets a subclass
    accept older spellings both as names and as values.
    """

    name_aliases: dict[str, str] = {}

    def __getitem__(cls, name: str) -> Any:
        if isinstance(name, str):
            name = cls.name_aliases.get(name.lower(), name).upper()
        return super().__getitem__(name)

    def __getattr__(cls, name: str) -> Any:
        # called only when the ordinary lookup failed
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return cls[name]
        except KeyError:
            members = ", ".join(m.name for m in cls)  # type: ignore[attr-defined]
            raise AttributeError(
                f"{cls.__name__} has no member {name!r}; members: {members}"
            ) from None

    def __call__(cls, value: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs and isinstance(value, str):
            # look-up by value, not the functional API
            value = cls.name_aliases.get(value.lower(), value.lower())
        return super().__call__(value, *args, **kwargs)


class CaseInsensitiveEnum(str, Enum, metaclass=CaseInsensitiveEnumMeta):
    """A ``str`` enum of lower-case config values, looked up in any case."""

    def __str__(self) -> str:
        return str(self.value)


class PromptType(CaseInsensitiveEnum):
    """How a data set row holds its prompt (``format.prompt_type``)."""

    MESSAGES = "messages"  # a list of chat messages
    # prompt and response message lists (Trinity-RFT's; not a config value here)
    CHATPAIR = "chatpair"
    PLAINTEXT = "plaintext"  # plain text


class TaskType(Enum):
    """Whether a task is explored (trained on) or evaluated."""

    EXPLORE = 0
    EVAL = 1


class ReadStrategy(CaseInsensitiveEnum):
    """Order in which a buffer reader takes rows (Trinity-RFT's names)."""

    FIFO = "fifo"
    RANDOM = "random"
    LRU = "lru"
    LFU = "lfu"
    PRIORITY = "priority"


class StorageType(CaseInsensitiveEnum):
    """``storage_type`` of a buffer (``priority_queue`` is a config value here too)."""

    SQL = "sql"
    QUEUE = "queue"
    FILE = "file"
    PRIORITY_QUEUE = "priority_queue"


class MonitorType(CaseInsensitiveEnum):
    """``monitor.monitor_type``."""

    WANDB = "wandb"
    TENSORBOARD = "tensorboard"
    MLFLOW = "mlflow"


class SyncMethodEnumMeta(CaseInsensitiveEnumMeta):
    """Also takes Trinity-RFT's deprecated ``online`` (``nccl``) and ``offline``
    (``checkpoint``), as ``synchronizer.sync_method`` does."""

    name_aliases = SYNC_METHOD_ALIASES


class SyncMethod(CaseInsensitiveEnum, metaclass=SyncMethodEnumMeta):
    """``synchronizer.sync_method``: how weights reach the rollout engines."""

    NCCL = "nccl"
    CHECKPOINT = "checkpoint"
    MEMORY = "memory"


class SyncStyleEnumMeta(CaseInsensitiveEnumMeta):
    """Also takes Trinity-RFT 0.6's ``trainer_driven`` / ``explorer_driven``."""

    name_aliases = SYNC_STYLE_ALIASES


class SyncStyle(CaseInsensitiveEnum, metaclass=SyncStyleEnumMeta):
    """``synchronizer.sync_style``.

    ``TRAINER_DRIVEN`` / ``EXPLORER_DRIVEN`` are Trinity-RFT 0.6's names of the two dynamic
    styles (aliases of the same members). ``FULLY_ASYNC``: generation never waits for a weight
    push, and pushes reach the engines while requests are in flight.
    """

    FIXED = "fixed"
    DYNAMIC_BY_TRAINER = "dynamic_by_trainer"
    DYNAMIC_BY_EXPLORER = "dynamic_by_explorer"
    FULLY_ASYNC = "fully_async"
    TRAINER_DRIVEN = "dynamic_by_trainer"
    EXPLORER_DRIVEN = "dynamic_by_explorer"


class RunningStatus(Enum):
    """Running status of an explorer or a trainer."""

    RUNNING = "running"
    REQUIRE_SYNC = "require_sync"
    WAITING_SYNC = "waiting_sync"
    STOPPED = "stopped"


class DataProcessorPipelineType(Enum):
    """The two pipelines of ``data_processor``."""

    EXPERIENCE = "experience_pipeline"
    TASK = "task_pipeline"


class OpType(str, Enum):
    """How ``reward_shaping_mapper`` folds a statistic into the reward:
    ``reward = reward <op> weight * info[stats_key]``.

    A ``str`` enum, so ``OpType.ADD == "ADD"`` and YAML configs may write the plain name.
    """

    ADD = "ADD"
    SUB = "SUB"
    MUL = "MUL"
    DIV = "DIV"


class SaveStrategy(CaseInsensitiveEnum):
    """``trainer.save_strategy``: how many checkpoint saves may run at once."""

    SINGLE_THREAD = "single_thread"
    SINGLE_PROCESS = "single_process"
    SINGLE_NODE = "single_node"
    UNRESTRICTED = "unrestricted"
