"""Rules for keys of Trinity-RFT configs that this release reads differently or cannot run.

Configs written for Trinity-RFT 0.6 (and the older examples still in its repository) must
either keep working -- a renamed key read under its new name, with a warning that names the new
key -- or be refused with a message that says the feature is "not supported yet" and names the
field. A key nothing in a run would read is never accepted silently.

* :func:`rule_trinity_rft_keys` runs on every validated config (schema level); so does
  :func:`rule_unread_fields`, which applies the three tables of fields no code of a run reads
  (:data:`UNSUPPORTED_FIELDS` refused, :data:`IGNORED_FIELDS` and :data:`COMPUTED_FIELDS`
  accepted with a warning). ``tests/test_config_field_coverage.py`` holds every field of the
  schema to one of: read (by code a named test checks), refused here, or ignored here.
* :func:`rule_unsupported_engines` runs with the run-level checks: the schema accepts every
  built-in ``engine_type`` (so a Trinity-RFT config loads anywhere), a run needs an engine that
  serves it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable, Union

from pydantic import BaseModel

from trinity.common.engines import ENGINES

from ._errors import _fmt_loc
from ._trainer import DEPRECATED_MAX_TOKEN_KEY
from ._utils import _Checker

if TYPE_CHECKING:
    from ._core import Config

__all__ = [
    "COMPUTED_FIELDS",
    "IGNORED_FIELDS",
    "UNSUPPORTED_FIELDS",
    "rule_trinity_rft_keys",
    "rule_unread_fields",
    "rule_unsupported_engines",
]

#: the training backends a run can use (``trainer.trainer_type``)
SUPPORTED_TRAINER_TYPES = ("verl",)
#: built-in engine types of Trinity-RFT that no engine of this release serves
UNSERVED_ENGINE_TYPES = ("tinker", "sglang")


def rule_trinity_rft_keys(c: _Checker, cfg: Config) -> None:
    """Deprecated trainer keys read under their new names; unsupported backends refused; keys
    no code reads refused or warned about (:func:`rule_unread_fields`)."""
    _rule_max_token_key(c, cfg)
    rule_unread_fields(c, cfg)
    trainer = cfg.trainer
    if trainer.trainer_type not in SUPPORTED_TRAINER_TYPES:
        c.error(
            ("trainer", "trainer_type"),
            trainer.trainer_type,
            f"trainer type {trainer.trainer_type!r} is not supported yet; allowed: "
            + ", ".join(repr(t) for t in SUPPORTED_TRAINER_TYPES),
        )
    if trainer.trainer_strategy == "megatron":
        c.error(
            ("trainer", "trainer_strategy"),
            trainer.trainer_strategy,
            "Megatron training is not supported yet; allowed: 'fsdp' or 'fsdp2'",
        )
    elif trainer.trainer_strategy == "fsdp" and "trainer_strategy" in trainer.model_fields_set:
        c.warn(
            "trainer.trainer_strategy 'fsdp' is read as 'fsdp2': the trainer always shards with "
            "FSDP2 (the same data-parallel sharding, verl's newer implementation)."
        )
    for part in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic"):
        strategy = _nested(trainer.trainer_config, part, "strategy")
        if isinstance(strategy, str) and strategy.strip().lower() == "megatron":
            c.error(
                ("trainer", "trainer_config", *part.split("."), "strategy"),
                strategy,
                "verl's Megatron strategy is not supported yet; allowed: 'fsdp' or 'fsdp2' "
                "(or leave it out)",
            )


def _rule_max_token_key(c: _Checker, cfg: Config) -> None:
    """``trainer.ppo_max_token_len_per_gpu`` is Trinity-RFT's older name of
    ``trainer.max_token_len_per_gpu``; the schema already copied a lone one across."""
    trainer = cfg.trainer
    old = trainer.ppo_max_token_len_per_gpu
    if old is None:
        return
    new = trainer.max_token_len_per_gpu
    if new != old:
        c.error(
            ("trainer", DEPRECATED_MAX_TOKEN_KEY),
            old,
            f"trainer.{DEPRECATED_MAX_TOKEN_KEY} ({old}) is the deprecated name of "
            f"trainer.max_token_len_per_gpu, which is set to {new}; allowed: only "
            "trainer.max_token_len_per_gpu, or both with the same value",
        )
        return
    c.warn(
        f"trainer.{DEPRECATED_MAX_TOKEN_KEY} is deprecated; it is read as "
        f"trainer.max_token_len_per_gpu ({new}): write that key instead."
    )


def _nested(data: Any, dotted: str, key: str) -> Any:
    """``data[a][b][key]`` for ``dotted == "a.b"``; ``None`` where any level is missing."""
    for part in (*dotted.split("."), key):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def rule_unsupported_engines(c: _Checker, cfg: Config) -> None:
    """Trinity-RFT's ``tinker`` / ``sglang`` engine types pass the schema (so its configs load
    anywhere), but no engine of this release serves them: a run naming one is refused before
    anything starts, naming the field -- unless a plugin registered an engine of that name."""
    if not cfg.run_mode.uses_rollout_engines:
        return
    explorer = cfg.explorer
    models = [(("explorer", "rollout_model"), explorer.rollout_model)]
    models += [
        (("explorer", "auxiliary_models", i), aux)
        for i, aux in enumerate(explorer.auxiliary_models)
    ]
    for loc, engine in models:
        if engine.engine_type not in UNSERVED_ENGINE_TYPES or engine.engine_type in ENGINES:
            continue
        served = [name for name in ENGINES.list() if name not in UNSERVED_ENGINE_TYPES]
        c.error(
            (*loc, "engine_type"),
            engine.engine_type,
            f"engine type {engine.engine_type!r} is not supported yet; allowed: "
            + (", ".join(repr(n) for n in served if n != "fake") or "none installed"),
        )


# --------------------------------------------------------------------------------------
# Fields no code of a run reads. Each is refused where the user wrote a value that would need
# such code ("not supported yet", naming the field), or, for keys Trinity-RFT configs carry
# and a run may safely drop, accepted with a warning naming the field. Only values the user
# wrote count: a section left out, a default, or a value a rule derived is never reported.
# --------------------------------------------------------------------------------------

#: ``accepted(value, config)``: whether a written value is fine (usually: the default)
_Check = Callable[[Any, "Config"], bool]


def _only(*allowed: Any) -> _Check:
    return lambda value, cfg: value in allowed


def _empty(value: Any, cfg: Config) -> bool:
    return not value


def _unless_different(derived: Callable[[Config], Any]) -> _Check:
    """Accepted when unset or equal to the value the rules derive (what a saved config holds)."""
    return lambda value, cfg: value is None or value == derived(cfg)


_LORA = (
    "setting Trinity-RFT's engine LoRA options directly is not supported yet: the rollout "
    "engines serve the run's adapter (model.lora_configs, explorer.rollout_model.enable_lora) "
    "with settings derived from it, so this option would have "
)
_LORA_NEEDS_ADAPTER = (
    "true needs the run's adapter: set model.lora_configs (the engines then serve base + "
    "adapter, with enable_lora true by default); allowed: false without model.lora_configs"
)
_ROPE = (
    "a RoPE override is not supported yet: the engines and the trainer load the model's own "
    "config.json, so an override here would change only the context checks; allowed: null "
    "(put rope_scaling / rope_theta in the model's config.json)"
)
_LAUNCHER = (
    "is what Trinity-RFT's launcher sets on each engine it starts; the engines here are "
    "started with their own settings, so a value written here is not supported yet; allowed: "
)
_SERVE = (
    "in mode 'serve': every engine is updated at once (in place, under the requests in "
    "flight), so a choice of engines kept running is not supported yet; allowed: "
)
_SERVE_DB = (
    "in mode 'serve': what waits for feedback is kept in memory (what is committed goes to "
    "the buffer), so a history database is not supported yet; allowed: "
)
_MEGATRON = "Megatron training is not supported yet (trainer.trainer_strategy); allowed: "

#: (section class, field) -> (accepted, message): refused where written with another value
UNSUPPORTED_FIELDS: dict[tuple[str, str], tuple[_Check, str]] = {
    ("ModelConfig", "fully_sharded_loras"): (_only(False), _LORA + "no effect; allowed: false"),
    ("ModelConfig", "max_cpu_loras"): (_only(None), _LORA + "no effect; allowed: null"),
    ("ModelConfig", "rope_scaling"): (_only(None), _ROPE),
    ("ModelConfig", "rope_theta"): (_only(None), _ROPE),
    ("InferenceModelConfig", "rope_scaling"): (_only(None), _ROPE),
    ("InferenceModelConfig", "rope_theta"): (_only(None), _ROPE),
    ("InferenceModelConfig", "logprobs"): (
        _unless_different(lambda cfg: cfg.model.logprobs),
        "an engine's own default logprobs is not supported yet; allowed: leave it out "
        "(model.logprobs is the default of every task set's rollout_args.logprobs)",
    ),
    ("InferenceModelConfig", "data_parallel_size"): (
        lambda value, cfg: value <= 1,
        "data parallelism inside one engine is not supported yet; allowed: 1 (use engine_num "
        "for more engines)",
    ),
    ("InferenceModelConfig", "pipeline_parallel_size"): (
        lambda value, cfg: value <= 1,
        "pipeline parallelism inside one engine is not supported yet; allowed: 1 "
        "(tensor_parallel_size splits a model over GPUs)",
    ),
    ("InferenceModelConfig", "enable_expert_parallel"): (
        _only(False),
        "expert parallelism is not supported yet; allowed: false",
    ),
    ("InferenceModelConfig", "use_v1"): (
        _only(True),
        "vLLM's v0 engine is not supported yet (vLLM has only v1 now); allowed: true",
    ),
    ("InferenceModelConfig", "enable_multimodal"): (
        _only(False),
        "multi-modal models are not supported yet; allowed: false",
    ),
    ("InferenceModelConfig", "weight_sync_buffer_size"): (
        _only(1024),
        "a weight-sync buffer size is not supported yet (weights are sent whole, as the "
        "synchronizer.sync_method says); allowed: 1024 (or leave it out)",
    ),
    ("InferenceModelConfig", "node_rank"): (_only(0), "node_rank " + _LAUNCHER + "0"),
    ("InferenceModelConfig", "bundle_indices"): (_only(""), "bundle_indices " + _LAUNCHER + "''"),
    ("InferenceModelConfig", "engine_id"): (_only(0), "engine_id " + _LAUNCHER + "0"),
    ("InferenceModelConfig", "ray_actor_name"): (
        _only(None),
        "ray_actor_name " + _LAUNCHER + "null",
    ),
    ("InferenceModelConfig", "cuda_visible_devices"): (
        _only(None),
        "cuda_visible_devices " + _LAUNCHER + "null (the placement gives each engine its GPUs)",
    ),
    ("InferenceModelConfig", "checkpoint_job_dir"): (
        _only(None),
        "checkpoint_job_dir " + _LAUNCHER + "null (the run's checkpoint_job_dir is used)",
    ),
    ("InferenceModelConfig", "enable_lora"): (
        lambda value, cfg: not value or bool(cfg.model.lora_configs),
        _LORA_NEEDS_ADAPTER,
    ),
    ("InferenceModelConfig", "enable_runtime_lora_updating"): (
        _only(False),
        _LORA + "no effect; allowed: false",
    ),
    ("InferenceModelConfig", "lora_modules"): (_only(None), _LORA + "no effect; allowed: null"),
    ("InferenceModelConfig", "lora_kwargs"): (_empty, _LORA + "no effect; allowed: {}"),
    ("AlgorithmConfig", "enable_router_replay"): (
        _only(False),
        "MoE router replay is not supported yet (the engines do not return routed experts); "
        "allowed: false",
    ),
    ("FormatConfig", "video_key"): (
        _only(None),
        "videos in task sets are not supported yet (simple_mm_workflow reads images only); "
        "allowed: null",
    ),
    ("StorageConfig", "enable_progress_bar"): (
        _only(False),
        "a progress bar while reading a data set is not supported yet (the run's console "
        "shows the steps); allowed: false",
    ),
    ("ExperiencePipelineConfig", "inputs"): (
        _empty,
        "extra input buffers of the experience pipeline are not supported yet (it reads what "
        "the explorer writes); allowed: {} (leave it out)",
    ),
    ("ExplorerConfig", "name"): (
        _only("explorer"),
        "a name of your own for the explorer's Ray actor is not supported yet (the run names "
        "its actors); allowed: 'explorer' (or leave it out)",
    ),
    ("ExplorerConfig", "max_inflight_batches"): (
        lambda value, cfg: value == 2 or cfg.synchronizer.sync_style == "fully_async",
        "a bound on batches in flight is read with synchronizer.sync_style 'fully_async' only; "
        "with other styles it is not supported yet (synchronizer.sync_offset bounds how far "
        "the explorer runs ahead); allowed: 2, or set sync_style: fully_async",
    ),
    ("ExplorerConfig", "min_running_model_num"): (
        _only(1),
        "min_running_model_num " + _SERVE + "1",
    ),
    ("ExplorerConfig", "db_url"): (_only(None), "db_url " + _SERVE_DB + "null"),
    ("OverRolloutConfig", "ratio"): (
        _only(0.0),
        "over-rollout (training before a step's slowest tasks finish) is not supported yet; "
        "allowed: 0",
    ),
    ("OverRolloutConfig", "wait_after_min"): (
        _only(30.0),
        "over-rollout is not supported yet; allowed: 30 (or leave explorer.over_rollout out)",
    ),
    ("OverRolloutConfig", "return_partial_tasks"): (
        _only(False),
        "over-rollout is not supported yet; allowed: false",
    ),
    ("DynamicTimeoutConfig", "enable"): (
        _only(False),
        "dynamic task timeouts are not supported yet (explorer.max_timeout bounds every task); "
        "allowed: false",
    ),
    ("DynamicTimeoutConfig", "warmup_min_steps"): (
        _only(1),
        "dynamic task timeouts are not supported yet; allowed: 1 (or leave it out)",
    ),
    ("DynamicTimeoutConfig", "ratio"): (
        _only(3.0),
        "dynamic task timeouts are not supported yet; allowed: 3 (or leave it out)",
    ),
    ("SynchronizerConfig", "explorer_sync_interval"): (
        lambda value, cfg: (
            value is None
            or value == cfg.synchronizer.sync_interval
            or cfg.synchronizer.sync_style == "fully_async"
        ),
        "an explorer sync interval other than synchronizer.sync_interval is read with "
        "sync_style 'fully_async' only (the engines take every push of the trainer, as in "
        "Trinity-RFT 0.6, and explorer.eval_interval is rounded to a multiple of it); with "
        "other styles it is not supported yet (both sides synchronise every sync_interval "
        "steps); allowed: leave it out, or set sync_style: fully_async",
    ),
    ("SynchronizerConfig", "trainer_sync_interval"): (
        lambda value, cfg: (
            value is None
            or value == cfg.synchronizer.sync_interval
            or cfg.synchronizer.sync_style == "fully_async"
        ),
        "a trainer sync interval other than synchronizer.sync_interval is read with sync_style "
        "'fully_async' only (the trainer pushes every trainer_sync_interval steps); with other "
        "styles it is not supported yet (both sides synchronise every sync_interval steps); "
        "allowed: leave it out, or set sync_style: fully_async",
    ),
    ("SynchronizerConfig", "group_name"): (
        _only("rollout_weight_sync"),
        "a name of your own for the weight-sync process group is not supported yet; allowed: "
        "'rollout_weight_sync' (or leave it out)",
    ),
    ("SynchronizerConfig", "wait_for_checkpoint"): (
        _only(False),
        "waiting for the latest checkpoint is not supported yet (the explorer loads the "
        "weights the synchronizer hands over); allowed: false",
    ),
    ("TrainerConfig", "name"): (
        _only("trainer"),
        "a name of your own for the trainer's Ray actor is not supported yet (the run names "
        "its actors); allowed: 'trainer' (or leave it out)",
    ),
    ("TrainerConfig", "fix_actor_microbatch_loss_scale"): (
        _only(False),
        "Trinity-RFT's experimental micro-batch loss scaling is not supported yet; allowed: false",
    ),
    ("TrainerConfig", "grad_offload"): (
        _only(False),
        "gradient offload is not supported yet; allowed: false (param_offload and "
        "optimizer_offload are)",
    ),
    ("TrainerConfig", "offload_policy"): (
        _only(False),
        "FSDP2's CPU offload policy is not supported yet; allowed: false (param_offload and "
        "optimizer_offload are)",
    ),
    ("TrainerConfig", "save_strategy"): (
        _only("unrestricted"),
        "serialising checkpoint saves is not supported yet (each rank saves its own shard); "
        "allowed: 'unrestricted'",
    ),
    ("MegatronParallelConfig", "tensor_model_parallel_size"): (_only(1), _MEGATRON + "1"),
    ("MegatronParallelConfig", "pipeline_model_parallel_size"): (_only(1), _MEGATRON + "1"),
    ("MegatronParallelConfig", "virtual_pipeline_model_parallel_size"): (
        _only(None),
        _MEGATRON + "null",
    ),
    ("MegatronParallelConfig", "expert_model_parallel_size"): (_only(1), _MEGATRON + "1"),
    ("MegatronParallelConfig", "expert_tensor_parallel_size"): (_only(None), _MEGATRON + "null"),
    ("MegatronParallelConfig", "context_parallel_size"): (_only(1), _MEGATRON + "1"),
    ("MegatronParallelConfig", "sequence_parallel"): (_only(True), _MEGATRON + "true"),
    ("MonitorConfig", "detailed_stats"): (
        _only(False),
        "mean/std/max/min of eval metrics are not supported yet (the mean and the pass@k "
        "metrics are logged); allowed: false",
    ),
    ("MonitorConfig", "enable_ray_timeline"): (
        _only(False),
        "a Ray timeline profile is not supported yet (ray timeline writes one from a running "
        "cluster); allowed: false",
    ),
    ("LogConfig", "group_by_node"): (
        _only(False),
        "log files grouped by node are not supported yet (every process logs to "
        "<job dir>/log/run.log); allowed: false",
    ),
}

_TINKER = "nothing here talks to Tinker (model.tinker.enable must stay false)"
_DATA_JUICER = (
    "Data-Juicer operators run in-process here, so no Data-Juicer server is started or used"
)

#: (section class, field) -> (warned(value, config), why): accepted with a warning naming the
#: field where written with a value ``warned`` flags -- keys Trinity-RFT configs carry that a
#: run can drop without changing what it does
IGNORED_FIELDS: dict[tuple[str, str], tuple[_Check, str]] = {
    ("Config", "ignore_validator_suggestions"): (
        _only(True),
        "nothing here makes GPU-memory suggestions, so there are none to skip",
    ),
    ("TinkerConfig", "rank"): (lambda value, cfg: value != 16, _TINKER),
    ("TinkerConfig", "seed"): (lambda value, cfg: value is not None, _TINKER),
    ("TinkerConfig", "train_mlp"): (_only(False), _TINKER),
    ("TinkerConfig", "train_attn"): (_only(False), _TINKER),
    ("TinkerConfig", "train_unembed"): (_only(False), _TINKER),
    ("TinkerConfig", "base_url"): (lambda value, cfg: value is not None, _TINKER),
    ("BufferConfig", "explorer_output"): (
        lambda value, cfg: value is not None,
        "Trinity-RFT's check fills it in; the explorer writes to "
        "buffer.trainer_input.experience_buffer (or the experience pipeline's output)",
    ),
    ("ExplorerConfig", "runner_state_report_interval"): (
        lambda value, cfg: value != 0,
        "runner states are not reported periodically; a task that runs past "
        "explorer.max_timeout is reported when it is stopped",
    ),
    ("TrainerConfig", "enable_preview"): (
        _only(True),
        "rollout previews are not logged; the monitor gets the rollout metrics",
    ),
    ("ServiceConfig", "data_juicer"): (lambda value, cfg: value is not None, _DATA_JUICER),
    ("DataJuicerServiceConfig", "server_url"): (lambda value, cfg: value is not None, _DATA_JUICER),
    ("DataJuicerServiceConfig", "auto_start"): (_only(True), _DATA_JUICER),
    ("DataJuicerServiceConfig", "port"): (lambda value, cfg: value is not None, _DATA_JUICER),
}

#: (section class, field) -> what computes it. Trinity-RFT writes these in the configs it
#: saves (``DO NOT SET`` / computed fields); here the rules compute them again and no code reads
#: them, so a value written that differs from the computed one is ignored with a warning.
COMPUTED_FIELDS: dict[tuple[str, str], str] = {
    ("ExplorerConfig", "mode"): "copied from the top-level mode",
    ("InferenceModelConfig", "gpu_per_engine"): (
        "tensor_parallel_size * data_parallel_size * pipeline_parallel_size"
    ),
    ("InferenceModelConfig", "nnodes"): "from the engine's GPUs and cluster.gpu_per_node",
    ("InferenceModelConfig", "enable_return_routed_experts"): (
        "copied from algorithm.enable_router_replay"
    ),
    ("InferenceModelConfig", "ray_namespace"): "copied from the top-level ray_namespace",
    ("InferenceModelConfig", "sync_method"): "copied from synchronizer.sync_method",
    ("ClusterConfig", "total_gpu_num"): "from cluster.node_num and gpu_per_node",
    ("ClusterConfig", "rollout_gpu_num"): "from the rollout engines' GPUs",
    ("ClusterConfig", "auxiliary_model_gpu_num"): "from the auxiliary engines' GPUs",
    ("ClusterConfig", "explorer_gpu_num"): "from the engines' GPUs",
    ("ClusterConfig", "trainer_node_num"): "from the GPUs the engines leave",
    ("SynchronizerConfig", "explorer_world_size"): "from cluster.rollout_gpu_num",
    ("BufferConfig", "tokenizer_path"): "copied from model.model_path",
    ("StorageConfig", "tokenizer_path"): "copied from model.model_path",
    ("SynchronizerConfig", "ray_namespace"): "copied from the top-level ray_namespace",
}

#: sections whose values are checked where they are merged (each stage's whole config)
_NOT_WALKED = {("Config", "stages")}


def rule_unread_fields(c: _Checker, cfg: Config) -> None:
    """Refuse or warn about every written value of :data:`UNSUPPORTED_FIELDS`,
    :data:`IGNORED_FIELDS` and :data:`COMPUTED_FIELDS`, wherever its section appears."""
    for section, loc in _written_sections(cfg, ()):
        owners = [cls.__name__ for cls in type(section).__mro__]
        written = section.model_fields_set
        for name in [n for n in type(section).model_fields if n in written]:  # in field order
            key = next(
                (
                    (owner, name)
                    for owner in owners
                    if (owner, name) in UNSUPPORTED_FIELDS
                    or (owner, name) in IGNORED_FIELDS
                    or (owner, name) in COMPUTED_FIELDS
                ),
                None,
            )
            if key is not None:
                _check_written(c, cfg, key, loc + (name,), getattr(section, name))


def _check_written(
    c: _Checker, cfg: Config, key: tuple[str, str], loc: tuple[Union[str, int], ...], value: Any
) -> None:
    """The refusal or warning of one written value (``key`` is in one of the three tables)."""
    if key in UNSUPPORTED_FIELDS:
        accepted, message = UNSUPPORTED_FIELDS[key]
        if not accepted(value, cfg):
            c.error(loc, value, message)
    elif key in IGNORED_FIELDS:
        warned, why = IGNORED_FIELDS[key]
        if warned(value, cfg):
            c.warn(f"{_fmt_loc(loc)} ({_brief(value)}) is ignored: {why}.")
    else:
        written = _written(cfg, loc)
        if written is not _MISSING and written != value:
            c.warn(
                f"{_fmt_loc(loc)} is computed ({COMPUTED_FIELDS[key]}); the value written "
                f"({_brief(written)}) is ignored, {_brief(value)} is used."
            )


def _written_sections(
    model: BaseModel, loc: tuple[Union[str, int], ...]
) -> Iterator[tuple[BaseModel, tuple[Union[str, int], ...]]]:
    """``model`` and every section below it that the user wrote (a section a rule derived, such
    as the task-set mirror or a pipeline's default output, is not the user's: not visited)."""
    yield model, loc
    for name in type(model).model_fields:
        if name not in model.model_fields_set or (type(model).__name__, name) in _NOT_WALKED:
            continue
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            children = [(loc + (name,), value)]
        elif isinstance(value, list):
            children = [(loc + (name, i), item) for i, item in enumerate(value)]
        elif isinstance(value, dict):
            children = [(loc + (name, key), item) for key, item in value.items()]
        else:
            continue
        for where, child in children:
            if isinstance(child, BaseModel):
                yield from _written_sections(child, where)


_MISSING = object()


def _written(cfg: Config, loc: tuple[Union[str, int], ...]) -> Any:
    """The value the user wrote at ``loc`` (before any rule), or ``_MISSING``."""
    node: Any = cfg._intent
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            return _MISSING
    return node


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
