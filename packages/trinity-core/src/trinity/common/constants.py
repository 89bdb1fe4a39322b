"""Names and enumerations shared across packages (Trinity-RFT's ``trinity.common.constants``).

Configs here take these values as plain strings (``storage_type: queue``), so the enums exist
for code written for Trinity-RFT, which compares and assigns them
(``config.buffer.trainer_input.experience_buffer.storage_type = StorageType.QUEUE``). Each
string-valued enum is a ``str`` enum, so a member and its value are interchangeable both ways:
``StorageType.QUEUE == "queue"``, and a config field given the member validates as its value.
As in Trinity-RFT, member names are case-insensitive (``StorageType.sql``, ``StorageType["sql"]``)
and so are values (``StorageType("SQL")``).
"""

from __future__ import annotations

from enum import Enum, EnumMeta
from typing import Any

__all__ = [
    "EXPLORER_NAME",
    "TRAINER_NAME",
    "ROLLOUT_WEIGHT_SYNC_GROUP_NAME",
    "SELECTOR_METRIC",
    "SYNC_METHOD_ALIASES",
    "CaseInsensitiveEnumMeta",
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
]

EXPLORER_NAME = "explorer"
TRAINER_NAME = "trainer"
ROLLOUT_WEIGHT_SYNC_GROUP_NAME = "rollout_weight_sync"

#: Trinity-RFT's deprecated ``sync_method`` names and what they mean now.
SYNC_METHOD_ALIASES = {"online": "nccl", "offline": "checkpoint"}

#: Key of the pipeline metric that carries task-selector feedback:
#: ``{SELECTOR_METRIC: {taskset_id: {"indices": [...], "values": [...]}}}`` (an operator
#: returns it; the task set reader passes it to its selector).
SELECTOR_METRIC = "selector_metric"


class CaseInsensitiveEnumMeta(EnumMeta):
    """Members by name in any case (``E.sql``, ``E["Sql"]``) and by value in any case
    (``E("SQL")``), as Trinity-RFT's enums of config values."""

    def __getitem__(cls, name: str) -> Any:
        return super().__getitem__(name.upper() if isinstance(name, str) else name)

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
            value = value.lower()  # look-up by value, not the functional API
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


class _SyncMethodMeta(CaseInsensitiveEnumMeta):
    """Also takes Trinity-RFT's deprecated ``online`` (``nccl``) and ``offline``
    (``checkpoint``), as ``synchronizer.sync_method`` does."""

    def __call__(cls, value: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs and isinstance(value, str):
            value = SYNC_METHOD_ALIASES.get(value.lower(), value)
        return super().__call__(value, *args, **kwargs)


class SyncMethod(CaseInsensitiveEnum, metaclass=_SyncMethodMeta):
    """``synchronizer.sync_method``: how weights reach the rollout engines."""

    NCCL = "nccl"
    CHECKPOINT = "checkpoint"
    MEMORY = "memory"


class SyncStyle(CaseInsensitiveEnum):
    """``synchronizer.sync_style``."""

    FIXED = "fixed"
    DYNAMIC_BY_TRAINER = "dynamic_by_trainer"
    DYNAMIC_BY_EXPLORER = "dynamic_by_explorer"


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
