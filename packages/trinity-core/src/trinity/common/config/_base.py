"""What every config section shares: run-wide constants, strict number types, the enum-like
value sets (matched case-insensitively, with Trinity-RFT's aliases) and the ``_Section`` base
that refuses unknown keys and non-finite floats."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Strict,
)

from trinity.common.constants import (  # noqa: F401 - re-exported by trinity.common.config
    EXPLORER_NAME,
    ROLLOUT_WEIGHT_SYNC_GROUP_NAME,
    SYNC_METHOD_ALIASES,
    TRAINER_NAME,
)

DEFAULT_EXPERIENCE_BUFFER_NAME = "experience_buffer"

# Environment variables shared with the launcher (same names as Trinity-RFT).
PLUGIN_DIRS_ENV_VAR = "TRINITY_PLUGIN_DIRS"
LOG_DIR_ENV_VAR = "TRINITY_LOG_DIR"
LOG_LEVEL_ENV_VAR = "TRINITY_LOG_LEVEL"
LOG_NODE_IP_ENV_VAR = "TRINITY_LOG_NODE_IP"


# --------------------------------------------------------------------------------------
# Strict numbers: YAML gives native ints, floats and booleans, so a boolean or a string where a
# number belongs is a mistake, never something to coerce (``true`` would be 1 step, ``"1e-3"``
# a string that a later ``float()`` may or may not accept). Floats must be finite (``_Section``
# sets ``allow_inf_nan=False``); ints are accepted where a float is expected.
# --------------------------------------------------------------------------------------

Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]


# --------------------------------------------------------------------------------------
# Value sets. Enum-like strings are matched case-insensitively and accept the aliases
# Trinity-RFT accepts (e.g. ``sync_style: explorer_driven``).
# --------------------------------------------------------------------------------------


def _normalized(aliases: Optional[dict[str, str]] = None, upper: bool = False) -> BeforeValidator:
    def _norm(value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            text = text.upper() if upper else text.lower()
            return (aliases or {}).get(text, text)
        return value

    return BeforeValidator(_norm)


RunMode = Annotated[
    Literal["both", "colocate", "explore", "train", "bench", "serve"], _normalized()
]
#: modes that run an explorer and a trainer together (``colocate``: on the same devices, in
#: turns; see ``trinity.launcher.colocate``)
BOTH_MODES = ("both", "colocate")
StorageTypeName = Annotated[Literal["file", "queue", "priority_queue", "sql"], _normalized()]
PromptTypeName = Annotated[Literal["messages", "plaintext"], _normalized()]
SyncMethodName = Annotated[
    Literal["nccl", "checkpoint", "memory"],
    _normalized(SYNC_METHOD_ALIASES),
]
SyncStyleName = Annotated[
    Literal["fixed", "dynamic_by_explorer", "dynamic_by_trainer"],
    _normalized({"explorer_driven": "dynamic_by_explorer", "trainer_driven": "dynamic_by_trainer"}),
]
EngineType = Annotated[
    Literal["vllm", "vllm_async", "transformers", "sglang", "tinker", "external"], _normalized()
]
MonitorType = Annotated[Literal["tensorboard", "wandb", "mlflow"], _normalized()]
LogLevel = Annotated[
    Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], _normalized(upper=True)
]
DType = Annotated[Literal["auto", "bfloat16", "float16", "half", "float32", "float"], _normalized()]
LossAggMode = Annotated[
    Literal[
        "token-mean",
        "token-sum",
        "seq-mean-token-sum",
        "seq-mean-token-mean",
        "seq-mean-token-sum-norm",
    ],
    _normalized(),
]
ConcurrentMode = Annotated[Literal["sequential", "asynchronous", "multi-threading"], _normalized()]
TrainerStrategy = Annotated[Literal["fsdp", "fsdp2", "megatron"], _normalized()]
SaveStrategy = Annotated[
    Literal["single_thread", "single_process", "single_node", "unrestricted"], _normalized()
]
LRSchedulerType = Annotated[Literal["constant", "cosine"], _normalized()]
SaveHFCheckpoint = Annotated[Literal["last", "always", "never"], _normalized()]

_SAVING_MODES = {"both", "colocate", "train", "explore", "bench"}
_SFT_LIKE = {"sft", "dpo"}
_NO_GPU_ENGINES = {"tinker", "external"}


def _stringify_values(value: Any) -> Any:
    """Environment variables are strings; accept ``FOO: 1`` from YAML as ``"1"``."""
    if isinstance(value, dict):
        return {k: v if isinstance(v, str) else str(v) for k, v in value.items()}
    return value


class _Section(BaseModel):
    """Base of every config section: unknown keys are errors, never silently dropped."""

    model_config = ConfigDict(
        extra="forbid", protected_namespaces=(), validate_default=False, allow_inf_nan=False
    )
