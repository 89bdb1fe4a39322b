"""Rollout engines: vLLM (CUDA or CPU build), HF ``transformers``, external OpenAI servers.

* :func:`engine_settings` resolves ``explorer.rollout_model`` / ``auxiliary_models[i]`` against
  the ``model`` section into :class:`EngineSettings`;
* :func:`create_engine` builds an engine in this process, :func:`create_engine_actor` as a Ray
  actor (what the explorer does), :func:`create_rollout_engines` /
  :func:`create_auxiliary_engines` all engines of a config;
* :class:`EngineModelWrapper` is the :class:`~trinity.common.models.ModelWrapper` workflows get.

Engine classes are looked up by ``engine_type`` in core's registry
:data:`~trinity.common.engines.ENGINES` (re-exported here), which the built-ins reach through
this package's ``trinity.engines`` entry points: each is imported when an engine of its type is
built, so this package imports without vLLM. A plugin adds an engine type with
``@ENGINES.register_module("my_engine")`` on a :class:`BaseRolloutEngine` subclass (built as
``cls(settings)``); the config schema then accepts the name. :data:`ENGINE_TYPES` is a
read-only view of the registry (``engine_type -> "module:Class"``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any, Optional

from trinity.common.config.modes import run_mode_spec
from trinity.common.engines import ENGINES
from trinity.launcher.engines.base import BaseRolloutEngine, EngineSettings, Sample
from trinity.launcher.engines.wrapper import EngineModelWrapper, call_engine
from trinity.utils.plugin_loader import PLUGIN_DIRS_ENV, get_plugin_dirs
from trinity.utils.registry import UnknownModuleError, is_builtin_module

__all__ = [
    "ENGINES",
    "ENGINE_TYPES",
    "BaseRolloutEngine",
    "EngineModelWrapper",
    "EngineSettings",
    "Sample",
    "call_engine",
    "create_auxiliary_engines",
    "create_engine",
    "create_engine_actor",
    "create_rollout_engines",
    "engine_class",
    "engine_settings",
]


class _EngineTypes(Mapping[str, str]):
    """``engine_type -> "module:Class"`` of every engine :data:`ENGINES` knows (registered, or
    advertised by an installed package), read live: a plugin's engine is in it once its module
    is imported. Nothing is imported to list or test names."""

    def __getitem__(self, engine_type: str) -> str:
        try:
            return ENGINES.origin(engine_type)
        except UnknownModuleError:
            raise KeyError(engine_type) from None

    def __contains__(self, engine_type: object) -> bool:
        return engine_type in ENGINES

    def __iter__(self) -> Iterator[str]:
        return iter(ENGINES.list())

    def __len__(self) -> int:
        return len(ENGINES.list())

    def __repr__(self) -> str:
        return f"ENGINE_TYPES({dict(self)!r})"


#: engine_type -> "module:Class", a live view of :data:`ENGINES`
ENGINE_TYPES: Mapping[str, str] = _EngineTypes()


def engine_class(engine_type: str) -> type[BaseRolloutEngine]:
    """The engine class of ``engine_type`` (imports its backend)."""
    try:
        return ENGINES[engine_type]
    except UnknownModuleError:
        supported = ", ".join(t for t in ENGINES.list() if t != "fake")
        raise ValueError(
            f"explorer.rollout_model.engine_type: unknown engine {engine_type!r}; this release "
            f"supports {supported}"
        ) from None


def _first(*values: Any) -> Any:
    for v in values:
        if v is not None:
            return v
    return None


def engine_settings(
    model_cfg: Any, model: Any = None, *, engine_id: int = 0, name: Optional[str] = None
) -> EngineSettings:
    """Resolve an ``InferenceModelConfig`` (fields left ``None`` fall back to the ``model``
    section, as in Trinity-RFT) into :class:`EngineSettings`."""
    m = model
    ext = getattr(model_cfg, "external_model_config", None)
    engine_type = model_cfg.engine_type
    base_url = None
    served = None
    api_key = model_cfg.api_key
    if engine_type == "external" or (ext is not None and ext.enable):
        import os

        engine_type = "external"
        if ext is not None:  # URL and key come from the environment, never from the file
            base_url = os.environ.get(ext.base_url_env)
            api_key = os.environ.get(ext.api_key_env) or api_key
            served = ext.model_name
    model_path = _first(model_cfg.model_path, getattr(m, "model_path", None) or None)
    if not model_path and engine_type != "external":
        raise ValueError(
            "explorer.rollout_model.model_path: no model path (set model.model_path or "
            "the rollout model's model_path)"
        )
    return EngineSettings(
        model_path=str(model_path or served or "external"),
        engine_type=engine_type,
        name=name or model_cfg.name,
        engine_id=engine_id,
        trust_remote_code=bool(
            _first(model_cfg.trust_remote_code, getattr(m, "trust_remote_code", False))
        ),
        tensor_parallel_size=max(1, int(model_cfg.tensor_parallel_size or 1)),
        gpu_memory_utilization=float(model_cfg.gpu_memory_utilization),
        enable_prefix_caching=bool(model_cfg.enable_prefix_caching),
        enable_chunked_prefill=bool(model_cfg.enable_chunked_prefill),
        enforce_eager=bool(model_cfg.enforce_eager),
        dtype=str(model_cfg.dtype),
        seed=int(model_cfg.seed),
        max_model_len=_first(model_cfg.max_model_len, getattr(m, "max_model_len", None)),
        max_prompt_tokens=_first(
            model_cfg.max_prompt_tokens, getattr(m, "max_prompt_tokens", None)
        ),
        max_response_tokens=_first(
            model_cfg.max_response_tokens, getattr(m, "max_response_tokens", None)
        ),
        min_response_tokens=int(
            _first(model_cfg.min_response_tokens, getattr(m, "min_response_tokens", None), 0)
        ),
        enable_prompt_truncation=bool(
            _first(
                model_cfg.enable_prompt_truncation,
                getattr(m, "enable_prompt_truncation", None),
                True,
            )
        ),
        repetition_penalty=float(
            _first(model_cfg.repetition_penalty, getattr(m, "repetition_penalty", None), 1.0)
        ),
        temperature=float(_first(model_cfg.temperature, getattr(m, "temperature", None), 1.0)),
        top_p=float(_first(model_cfg.top_p, getattr(m, "top_p", None), 1.0)),
        top_k=int(_first(model_cfg.top_k, getattr(m, "top_k", None), -1)),
        ignore_eos=bool(model_cfg.ignore_eos),
        chat_template=_first(
            model_cfg.chat_template,
            getattr(m, "custom_chat_template", None),
            getattr(m, "chat_template_path", None),
        ),
        enable_thinking=_first(model_cfg.enable_thinking, getattr(m, "enable_thinking", None)),
        enable_openai_api=bool(model_cfg.enable_openai_api),
        enable_history=bool(model_cfg.enable_history),
        api_key=api_key,
        base_port=model_cfg.base_port,
        enable_auto_tool_choice=bool(model_cfg.enable_auto_tool_choice),
        tool_call_parser=model_cfg.tool_call_parser,
        reasoning_parser=model_cfg.reasoning_parser,
        enable_log_requests=bool(model_cfg.enable_log_requests),
        extra_engine_args=dict(model_cfg.extra_engine_args or {}),
        base_url=base_url,
        served_model_name=served,
        lora=_served_adapter(model_cfg, m, model_path),
    )


def _served_adapter(model_cfg: Any, model: Any, model_path: Any) -> Optional[dict[str, Any]]:
    """The adapter settings of a rollout model that serves the run's LoRA adapter
    (``enable_lora`` and ``model.lora_configs``), else ``None``."""
    if model is None or not getattr(model_cfg, "enable_lora", False):
        return None
    from trinity.launcher.lora_adapter import model_lora_settings

    settings = model_lora_settings(model)
    if not settings:
        return None
    return dict(
        settings,
        model_path=str(model_path),
        trust_remote_code=bool(getattr(model, "trust_remote_code", False)),
        # the adapter's name in the engines (vLLM: ``<name>-<N>`` per version)
        lora_name=model.lora_configs[0].name,
    )


def create_engine(settings: EngineSettings) -> BaseRolloutEngine:
    """An engine in this process (call ``await engine.start()`` before use)."""
    return engine_class(settings.engine_type)(settings)


#: environment every engine actor gets: vLLM's weight reload passes a function to its workers
ENGINE_ENV_VARS = {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}
#: the driver's choice of vLLM process layout on CPU, passed on to engines on every node
#: (``engines.inproc_core``, ``engines.core_forkserver``)
FORWARDED_ENV_VARS = ("TRINITY_VLLM_INPROC_CORE", "TRINITY_VLLM_SPAWN_CORE")


def create_engine_actor(
    settings: EngineSettings,
    *,
    name: Optional[str] = None,
    namespace: Optional[str] = None,
    num_cpus: float = 1,
    num_gpus: float = 0,
    env_vars: Optional[dict[str, str]] = None,
    options: Optional[dict[str, Any]] = None,
) -> Any:
    """Start ``settings``'s engine as a Ray actor and begin loading it.

    ``options`` (Ray actor options, e.g. :meth:`~trinity.launcher.placement.Placement.
    engine_options`: a placement-group bundle and its GPUs) override ``num_cpus`` /
    ``num_gpus``. Returns the actor handle at once; ``await handle.ready.remote()`` (or ``ray.get``) waits
    until the model is loaded and raises the engine's start-up error if it failed.
    """
    import ray

    cls = engine_class(settings.engine_type)
    _ship_plugin_class(cls)
    actor_options: dict[str, Any] = {
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "max_concurrency": 1000,
        # no GCS record of every generation call (see WorkflowRunner's options, runner.py)
        "enable_task_events": False,
        "runtime_env": {
            "env_vars": {
                **ENGINE_ENV_VARS,
                **_forwarded(),
                **_plugin_env(cls),
                **(env_vars or {}),
            }
        },
        **(options or {}),
    }
    if name:
        actor_options["name"] = name
    if namespace:
        actor_options["namespace"] = namespace
    actor = ray.remote(cls).options(**actor_options).remote(settings)
    actor.start.remote()
    return actor


def _forwarded() -> dict[str, str]:
    return {k: os.environ[k] for k in FORWARDED_ENV_VARS if k in os.environ}


def _ship_plugin_class(cls: type) -> None:
    """Let every Ray worker load a plugin's engine class, plugins loaded or not.

    Ray pickles an actor's class by reference to its module, and every process that receives
    the actor's handle loads that class to learn its methods' signatures -- a runner before its
    ``__init__`` loads the plugin directories. A ``--plugin-dir`` module is importable only
    where those directories are on the path, so its classes are pickled by value instead (what
    Ray advises for a driver's local modules). Built-in engines are left alone."""
    module_name = getattr(cls, "__module__", None)
    if is_builtin_module(module_name):
        return
    module = sys.modules.get(module_name or "")
    if module is None or module_name == "__main__":
        return  # __main__ is pickled by value anyway
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(module)


def _plugin_env(cls: type) -> dict[str, str]:
    """The environment a plugin's engine class needs in its Ray worker: the plugin
    directories on the path. The class itself comes by value (:func:`_ship_plugin_class`), but
    what its module imports from other plugin modules (``--plugin-dir`` modules are imported
    under their plain file names) is looked up by name. A built-in engine needs nothing."""
    if is_builtin_module(getattr(cls, "__module__", None)):
        return {}
    dirs = [str(p) for p in get_plugin_dirs(None)]
    if not dirs:
        return {}
    path = os.pathsep.join([*dirs, *filter(None, [os.environ.get("PYTHONPATH")])])
    return {"PYTHONPATH": path, PLUGIN_DIRS_ENV: os.pathsep.join(dirs)}


def _actor_resources(settings: EngineSettings) -> tuple[float, float]:
    """(num_cpus, num_gpus) of an engine actor: GPUs = TP size where CUDA is present."""
    import ray

    gpus = ray.cluster_resources().get("GPU", 0) if ray.is_initialized() else 0
    if gpus and settings.engine_type in ("vllm", "vllm_async", "transformers"):
        return 0, float(settings.tensor_parallel_size) * settings.gpu_share
    return 0, 0


def create_rollout_engines(
    config: Any, env_vars: Optional[dict[str, str]] = None, placement: Any = None
) -> list[Any]:
    """``explorer.rollout_model.engine_num`` engine actors of the policy model (engine ``i``
    in bundle ``i`` of ``placement``'s rollout group when given)."""
    rollout = config.explorer.rollout_model
    handles = []
    for i in range(rollout.engine_num):
        settings = engine_settings(rollout, config.model, engine_id=i)
        if run_mode_spec(config.mode).colocated:  # sleep mode, half a GPU each
            from trinity.launcher.colocate import colocated_engine

            settings = colocated_engine(settings)
        cpus, gpus = _actor_resources(settings)
        options = placement.engine_options(i) if placement is not None else None
        handles.append(
            create_engine_actor(
                settings, num_cpus=cpus, num_gpus=gpus, env_vars=env_vars, options=options
            )
        )
    return handles


def create_auxiliary_engines(
    config: Any, env_vars: Optional[dict[str, str]] = None, placement: Any = None
) -> list[list[Any]]:
    """For each ``explorer.auxiliary_models`` entry, its ``engine_num`` engine actors (in
    ``placement``'s group of that model when given)."""
    groups = []
    for k, aux in enumerate(config.explorer.auxiliary_models):
        group = []
        for i in range(aux.engine_num):
            settings = engine_settings(aux, None, engine_id=i, name=aux.name or f"auxiliary_{k}")
            cpus, gpus = _actor_resources(settings)
            options = placement.engine_options(i, model=k + 1) if placement is not None else None
            group.append(
                create_engine_actor(
                    settings, num_cpus=cpus, num_gpus=gpus, env_vars=env_vars, options=options
                )
            )
        groups.append(group)
    return groups
