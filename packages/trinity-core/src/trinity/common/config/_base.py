"""What every config section shares: run-wide constants, strict number types, the enum-like
value sets (matched case-insensitively, with Trinity-RFT's aliases) and the ``_Section`` base
that refuses unknown keys and non-finite floats."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Annotated, Any, Literal, Optional

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Strict,
    WithJsonSchema,
    WrapValidator,
)
from pydantic_core import PydanticCustomError

from trinity.common.constants import (  # noqa: F401 - re-exported by trinity.common.config
    EXPLORER_NAME,
    LOG_DIR_ENV_VAR,
    LOG_LEVEL_ENV_VAR,
    LOG_NODE_IP_ENV_VAR,
    PLUGIN_DIRS_ENV_VAR,
    ROLLOUT_WEIGHT_SYNC_GROUP_NAME,
    SYNC_METHOD_ALIASES,
    SYNC_STYLE_ALIASES,
    TRAINER_NAME,
)
from trinity.common.engines import BUILTIN_ENGINE_TYPES, ENGINES
from trinity.common.storage import BUILTIN_STORAGE_TYPES, storage_type_names
from trinity.utils.monitor import BUILTIN_MONITOR_TYPES, MONITOR

from .modes import RUN_MODES

DEFAULT_EXPERIENCE_BUFFER_NAME = "experience_buffer"


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


#: the ``mode:`` values: the names of the run-mode table (:mod:`.modes`), whose columns say
#: what each mode does (``Config.run_mode``)
RunMode = Annotated[Literal[tuple(RUN_MODES)], _normalized()]  # type: ignore[valid-type]


def _registered(
    names: Callable[[], list[str]],
    builtins: tuple[str, ...],
    aliases: Optional[dict[str, str]] = None,
) -> WrapValidator:
    """Accept a built-in name or any name a registry holds now (``names()``, built-ins first).

    For the value sets that registries own (``monitor_type``, ``storage_type``,
    ``engine_type``): the type is ``Literal[<built-ins>]`` (what Trinity-RFT's configs name,
    what forms offer) and this validator widens it to the names plugins registered — looked up
    at validation time, so a ``--plugin-dir`` loaded before the config counts. Matched
    case-insensitively (a registered ``"MyMonitor"`` is returned in its registered spelling),
    after ``aliases``. Anything else is refused as a ``literal_error`` listing every known name,
    which the config errors render as ``invalid value ...; allowed values: ...; did you mean``.
    """

    def _check(value: Any, handler: Any) -> Any:
        known = list(dict.fromkeys([*builtins, *names()]))
        if isinstance(value, str):
            text = value.strip().lower()
            text = (aliases or {}).get(text, text)
            canonical: dict[str, str] = {}
            for name in known:
                canonical.setdefault(name.lower(), name)
            if text in canonical:
                return canonical[text]
        quoted = [repr(name) for name in known]
        expected = ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]
        if isinstance(value, str):
            # The config errors suggest the closest *built-in* (the Literal's values) themselves;
            # a name close only to a registered one is suggested here.
            text = value.strip().lower()
            if not difflib.get_close_matches(text, list(builtins), n=1, cutoff=0.5):
                lowered = {name.lower(): name for name in reversed(known)}
                match = difflib.get_close_matches(text, list(lowered), n=1, cutoff=0.5)
                if match:
                    expected += f"; did you mean {lowered[match[0]]!r}?"
        raise PydanticCustomError(
            "literal_error", "Input should be {expected}", {"expected": expected}
        )

    return WrapValidator(_check)


def _registry_names(*builtins: str) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "examples": list(builtins)})


#: ``storage_type``: a built-in storage or any name a reader or writer is registered under
#: (``trinity.common.storage.READER`` / ``WRITER``).
StorageTypeName = Annotated[
    Literal["file", "queue", "priority_queue", "sql"],
    _registered(storage_type_names, BUILTIN_STORAGE_TYPES),
    _registry_names(*BUILTIN_STORAGE_TYPES),
]
PromptTypeName = Annotated[Literal["messages", "plaintext"], _normalized()]
SyncMethodName = Annotated[
    Literal["nccl", "checkpoint", "memory"],
    _normalized(SYNC_METHOD_ALIASES),
]
SyncStyleName = Annotated[
    Literal["fixed", "dynamic_by_explorer", "dynamic_by_trainer", "fully_async"],
    _normalized(SYNC_STYLE_ALIASES),
]
#: ``engine_type``: a built-in engine type or any name in ``trinity.common.engines.ENGINES``.
EngineType = Annotated[
    Literal["vllm", "vllm_async", "transformers", "sglang", "tinker", "external"],
    _registered(ENGINES.list, BUILTIN_ENGINE_TYPES),
    _registry_names(*BUILTIN_ENGINE_TYPES),
]
#: ``monitor_type``: a built-in sink or any name in ``trinity.utils.monitor.MONITOR``.
MonitorType = Annotated[
    Literal["tensorboard", "wandb", "mlflow", "swanlab"],
    _registered(MONITOR.list, BUILTIN_MONITOR_TYPES),
    _registry_names(*BUILTIN_MONITOR_TYPES),
]
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

#: the algorithm types that train on a fixed data set of rows (train mode)
_SFT_LIKE = {"sft", "dpo", "cpt"}
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
