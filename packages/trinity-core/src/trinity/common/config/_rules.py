"""The cross-field rules run on every validated Config (and the run-level ones)."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, Union

from ._compat import rule_trinity_rft_keys, rule_unsupported_engines
from ._errors import _fmt_loc
from ._lora_rules import rule_lora
from ._run_rules import mode_names, rule_run, train_batch_size_required
from ._sections import (
    _NO_GPU_ENGINES,
    _SFT_LIKE,
    DEFAULT_EXPERIENCE_BUFFER_NAME,
    ExperienceBufferConfig,
    InferenceModelConfig,
    TasksetConfig,
)
from ._usable import rule_model_context, rule_no_nul, rule_paths
from ._utils import _Checker, _set_derived

if TYPE_CHECKING:
    from ._core import Config


# --------------------------------------------------------------------------------------
# The cross-field rules
# --------------------------------------------------------------------------------------


def _apply_rules(c: _Checker) -> None:
    cfg = c.config
    rule_no_nul(c, cfg)
    _rule_global(c, cfg)
    _rule_model(c, cfg)
    _rule_algorithm(c, cfg)
    _rule_explorer(c, cfg)
    _rule_cluster(c, cfg)
    _rule_synchronizer(c, cfg)
    _rule_buffer(c, cfg)
    _rule_trainer(c, cfg)
    _rule_data_processor(c, cfg)
    rule_trinity_rft_keys(c, cfg)
    rule_model_context(c, cfg)
    if c.run_checks:
        rule_run(c, cfg)
        rule_unsupported_engines(c, cfg)
        rule_paths(c, cfg)


def _rule_global(c: _Checker, cfg: Config) -> None:
    if not cfg.ray_namespace:
        _set_derived(
            cfg, "ray_namespace", "/".join(p for p in (cfg.project, cfg.group, cfg.name) if p)
        )
    if cfg.checkpoint_root_dir:
        _set_derived(cfg, "checkpoint_job_dir", cfg.get_checkpoint_job_dir())
    _set_derived(cfg.explorer, "mode", cfg.mode)


def _rule_model(c: _Checker, cfg: Config) -> None:
    model = cfg.model
    if not model.critic_model_path:
        _set_derived(model, "critic_model_path", model.model_path)
    if model.chat_template_path and model.custom_chat_template is None:
        # Trinity-RFT reads the file into custom_chat_template, which the task sets and the
        # rollout model then take (an unreadable file is reported by the run's path checks)
        try:
            with open(os.path.expanduser(model.chat_template_path), encoding="utf-8") as f:
                _set_derived(model, "custom_chat_template", f.read())
        except OSError:
            pass
    rule_lora(c, cfg)
    if model.external_model.enable:
        if not cfg.run_mode.evaluates_checkpoints:
            allowed = mode_names(lambda spec: spec.evaluates_checkpoints)
            c.error(
                ("model", "external_model", "enable"),
                True,
                f"an external model can only be used in mode {allowed} (mode is '{cfg.mode}')",
            )
        if not model.external_model.model_name:
            c.error(
                ("model", "external_model", "model_name"),
                None,
                "required when model.external_model.enable is true",
            )
    # lengths
    mml, mpt, mrt = model.max_model_len, model.max_prompt_tokens, model.max_response_tokens
    if mml is not None and mpt is not None and mrt is not None:
        if mpt + mrt > mml:
            c.error(
                ("model", "max_prompt_tokens"),
                mpt,
                f"max_prompt_tokens + max_response_tokens ({mpt} + {mrt}) exceeds "
                f"max_model_len ({mml})",
            )
            return
    if mml is None and mpt is not None and mrt is not None:
        mml = mpt + mrt
        _set_derived(model, "max_model_len", mml)
    if mml is not None:
        if mpt is None and mrt is None:
            mpt = mml // 2
            mrt = mml - mpt
        elif mpt is None:
            mrt = min(mrt, mml - 1) if mml > 1 else mrt
            mpt = max(mml - mrt, 1)
        elif mrt is None:
            mpt = min(mpt, mml - 1) if mml > 1 else mpt
            mrt = max(mml - mpt, 1)
        _set_derived(model, "max_prompt_tokens", mpt)
        _set_derived(model, "max_response_tokens", mrt)
    if (
        model.max_response_tokens is not None
        and model.min_response_tokens >= model.max_response_tokens
    ):
        new = max(model.max_response_tokens - 1, 0)
        if "min_response_tokens" in model.model_fields_set:
            c.warn(
                f"model.min_response_tokens ({model.min_response_tokens}) must be smaller than "
                f"model.max_response_tokens ({model.max_response_tokens}); set to {new}."
            )
        _set_derived(model, "min_response_tokens", new)


def _rule_algorithm(c: _Checker, cfg: Config) -> None:
    optim = cfg.algorithm.optimizer
    if optim.warmup_style is not None and optim.lr_scheduler_type != optim.warmup_style:
        c.warn(
            "algorithm.optimizer.warmup_style is deprecated; use lr_scheduler_type "
            f"(set to '{optim.warmup_style}')."
        )
        _set_derived(optim, "lr_scheduler_type", optim.warmup_style)


_MODEL_INHERITED = (
    "temperature",
    "top_p",
    "top_k",
    "logprobs",
    "repetition_penalty",
    "max_model_len",
    "max_prompt_tokens",
    "max_response_tokens",
    "min_response_tokens",
    "enable_prompt_truncation",
    "rope_scaling",
    "rope_theta",
    "enable_thinking",
)


def _fill_inference_model(
    c: _Checker, cfg: Config, engine: InferenceModelConfig, loc: tuple[Union[str, int], ...]
) -> None:
    model = cfg.model
    for attr in _MODEL_INHERITED:
        if getattr(engine, attr) is None:
            _set_derived(engine, attr, getattr(model, attr))
    if engine.trust_remote_code is None:
        _set_derived(engine, "trust_remote_code", model.trust_remote_code)
    _set_derived(engine, "ray_namespace", cfg.ray_namespace)
    if engine.engine_type in _NO_GPU_ENGINES:
        for attr in ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size"):
            _set_derived(engine, attr, 0)
        _set_derived(engine, "gpu_per_engine", 0)
        _set_derived(engine, "nnodes", 1)
        return
    for attr in ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size"):
        value = getattr(engine, attr)
        if value < 1:
            c.error(loc + (attr,), value, f"must be >= 1 for engine_type '{engine.engine_type}'")
    _set_derived(
        engine,
        "gpu_per_engine",
        engine.tensor_parallel_size * engine.data_parallel_size * engine.pipeline_parallel_size,
    )


def _rule_serve(c: _Checker, cfg: Config) -> None:
    """Mode serve forwards to the engines' OpenAI servers and writes what is committed."""
    rollout = cfg.explorer.rollout_model
    if rollout.engine_type not in ("vllm", "vllm_async"):
        c.error(
            ("explorer", "rollout_model", "engine_type"),
            rollout.engine_type,
            "mode 'serve' forwards requests to each engine's OpenAI server, which only the "
            "vLLM engine runs here; other engine types are not supported yet in mode 'serve'; "
            "allowed: 'vllm'",
        )
    output = cfg.data_processor.experience_pipeline.output
    where = ("data_processor", "experience_pipeline", "output")
    if output is None:  # the trainer input's buffer (an SQLite table by default, see below)
        output = cfg.buffer.trainer_input.experience_buffer
        where = ("buffer", "trainer_input", "experience_buffer")
    if output is not None and output.storage_type != "sql":
        c.error(
            where + ("storage_type",),
            output.storage_type,
            "mode 'serve' commits to a SQL table that a trainer in another process reads as it "
            "grows; other storage types are not supported yet in mode 'serve'; allowed: 'sql'",
        )


def _rule_explorer(c: _Checker, cfg: Config) -> None:
    explorer = cfg.explorer
    rollout = explorer.rollout_model
    if not rollout.model_path:
        _set_derived(rollout, "model_path", cfg.model.model_path)
    if rollout.chat_template is None:
        _set_derived(rollout, "chat_template", cfg.model.custom_chat_template)
    if cfg.model.external_model.enable:
        _set_derived(rollout, "engine_type", "external")
        _set_derived(rollout, "external_model_config", cfg.model.external_model.model_copy())
    _set_derived(rollout, "enable_return_routed_experts", cfg.algorithm.enable_router_replay)
    if cfg.run_mode.serves_api:
        _set_derived(rollout, "enable_openai_api", True)
        _rule_serve(c, cfg)
    _fill_inference_model(c, cfg, rollout, ("explorer", "rollout_model"))
    for i, aux in enumerate(explorer.auxiliary_models):
        loc = ("explorer", "auxiliary_models", i)
        if not aux.model_path:
            c.error(
                loc + ("model_path",), aux.model_path, "every auxiliary model needs a model_path"
            )
        _set_derived(aux, "enable_history", False)
        _set_derived(aux, "enable_openai_api", True)
        _fill_inference_model(c, cfg, aux, loc)

    if explorer.runner_num is not None:
        c.warn("explorer.runner_num is deprecated; use explorer.runner_per_model instead.")
    over = explorer.over_rollout
    if (over.ratio > 0.0 or over.return_partial_tasks) and cfg.synchronizer.sync_style == "fixed":
        c.error(
            ("explorer", "over_rollout", "ratio"),
            over.ratio,
            "over_rollout needs a dynamic synchronizer.sync_style "
            "(dynamic_by_explorer or dynamic_by_trainer), not 'fixed'",
        )
    if explorer.concurrent_mode in ("asynchronous", "multi-threading"):
        limit = max(math.ceil(cfg.buffer.batch_size / rollout.engine_num), 1)
        if explorer.runner_per_model > limit:
            c.warn(
                f"explorer.runner_per_model ({explorer.runner_per_model}) is too large for "
                f"concurrent_mode '{explorer.concurrent_mode}' with buffer.batch_size "
                f"({cfg.buffer.batch_size}) and {rollout.engine_num} engine(s); set to {limit}."
            )
            _set_derived(explorer, "runner_per_model", limit)


def _rule_cluster(c: _Checker, cfg: Config) -> None:
    """GPU allocation and trainer world size; only when the cluster size is known."""
    cluster = cfg.cluster
    models = [cfg.explorer.rollout_model, *cfg.explorer.auxiliary_models]
    if not cluster.node_num or not cluster.gpu_per_node or cfg.model.tinker.enable:
        return
    gpn = cluster.gpu_per_node
    for i, engine in enumerate(models):
        loc = ("explorer", "rollout_model") if i == 0 else ("explorer", "auxiliary_models", i - 1)
        if engine.gpu_per_engine > gpn:
            if engine.gpu_per_engine % gpn:
                c.error(
                    loc + ("tensor_parallel_size",),
                    engine.tensor_parallel_size,
                    f"an engine spanning nodes needs TP*DP*PP ({engine.gpu_per_engine}) to be a "
                    f"multiple of cluster.gpu_per_node ({gpn})",
                )
                continue
            _set_derived(engine, "nnodes", engine.gpu_per_engine // gpn)
        else:
            _set_derived(engine, "nnodes", 1)
    total = cluster.node_num * gpn
    rollout = cfg.explorer.rollout_model
    rollout_gpus = aux_gpus = 0
    mode = cfg.run_mode
    if mode.uses_rollout_engines and rollout.engine_type != "external":
        rollout_gpus = rollout.gpu_per_engine * rollout.engine_num
        aux_gpus = sum(m.gpu_per_engine * m.engine_num for m in cfg.explorer.auxiliary_models)
    explorer_gpus = rollout_gpus + aux_gpus
    trainer_gpus = trainer_nodes = trainer_per_node = 0
    if not mode.trains or mode.colocated:  # the explorer may use every GPU
        if explorer_gpus > total:
            c.error(
                ("explorer", "rollout_model", "engine_num"),
                rollout.engine_num,
                f"the explorer needs {explorer_gpus} GPUs but the cluster has {total}",
            )
        if mode.colocated:  # the trainer takes turns with the engines on every GPU
            trainer_gpus, trainer_nodes = total, cluster.node_num
            trainer_per_node = gpn
    else:  # a trainer on the GPUs the engines leave
        if explorer_gpus >= total:
            c.error(
                ("explorer", "rollout_model", "engine_num"),
                rollout.engine_num,
                f"no GPU left for the trainer: the explorer needs {explorer_gpus} of the "
                f"cluster's {total} GPUs",
            )
            return
        trainer_gpus = total - explorer_gpus
        if trainer_gpus <= gpn:
            trainer_nodes, trainer_per_node = 1, trainer_gpus
        elif trainer_gpus % gpn:
            c.error(
                ("explorer", "rollout_model", "engine_num"),
                rollout.engine_num,
                f"the trainer must use whole nodes, but gets {trainer_gpus} GPUs with "
                f"{gpn} GPUs per node; change engine_num or the engines' parallel sizes",
            )
            return
        else:
            trainer_nodes, trainer_per_node = trainer_gpus // gpn, gpn
    for name, value in (
        ("total_gpu_num", total),
        ("rollout_gpu_num", rollout_gpus),
        ("auxiliary_model_gpu_num", aux_gpus),
        ("explorer_gpu_num", explorer_gpus),
        ("trainer_gpu_num", trainer_gpus),
        ("trainer_node_num", trainer_nodes),
        ("trainer_gpu_num_per_node", trainer_per_node),
    ):
        _set_derived(cluster, name, value)


def _rule_synchronizer(c: _Checker, cfg: Config) -> None:
    sync = cfg.synchronizer
    _set_derived(sync, "ray_namespace", cfg.ray_namespace)
    _set_derived(sync, "explorer_world_size", cfg.cluster.rollout_gpu_num or None)
    if sync.sync_method == "nccl":
        if not cfg.run_mode.explores_and_trains:
            c.warn(
                f"mode '{cfg.mode}' cannot synchronise weights over NCCL (explorer and trainer "
                "are not both running); synchronizer.sync_method set to 'checkpoint'."
            )
            _set_derived(sync, "sync_method", "checkpoint")
        elif cfg.model.lora_configs is not None:
            c.warn(
                "LoRA weights cannot be synchronised over NCCL; "
                "synchronizer.sync_method set to 'checkpoint'."
            )
            _set_derived(sync, "sync_method", "checkpoint")
    if cfg.run_mode.colocated:
        _rule_colocate(c, cfg)
    elif sync.sync_style == "fully_async" and sync.sync_offset > 0:
        c.error(
            ("synchronizer", "sync_offset"),
            sync.sync_offset,
            "sync_style 'fully_async' bounds how far the explorer runs ahead with "
            "explorer.max_inflight_batches (batches generated and not yet trained); an offset "
            "on top of it is not supported yet; allowed: 0",
        )
    if sync.explorer_sync_interval is None:
        _set_derived(sync, "explorer_sync_interval", sync.sync_interval)
    if sync.trainer_sync_interval is None:
        _set_derived(sync, "trainer_sync_interval", sync.sync_interval)
    for engine in (cfg.explorer.rollout_model, *cfg.explorer.auxiliary_models):
        _set_derived(engine, "sync_method", sync.sync_method)
    # eval_interval must be a multiple of the explorer's sync interval
    interval = sync.explorer_sync_interval or sync.sync_interval
    if (
        not cfg.run_mode.evaluates_checkpoints
        and cfg.algorithm.algorithm_type not in _SFT_LIKE
        and cfg.explorer.eval_interval % interval
    ):
        new = max(cfg.explorer.eval_interval // interval, 1) * interval
        c.warn(
            f"explorer.eval_interval ({cfg.explorer.eval_interval}) is not a multiple of the "
            f"explorer sync interval ({interval}); set to {new}."
        )
        _set_derived(cfg.explorer, "eval_interval", new)


def _fill_taskset(
    c: _Checker,
    cfg: Config,
    taskset: TasksetConfig,
    index: int,
    loc: tuple[Union[str, int], ...],
    is_eval: bool,
) -> None:
    explorer_input = cfg.buffer.explorer_input
    model = cfg.model
    if not taskset.name:
        _set_derived(taskset, "name", f"{'eval_' if is_eval else ''}taskset_{index}")
    _set_derived(taskset, "is_eval", is_eval)
    _set_derived(taskset, "batch_size", cfg.buffer.batch_size)
    _set_derived(taskset, "ray_namespace", taskset.ray_namespace or cfg.ray_namespace)
    _set_derived(taskset, "tokenizer_path", model.model_path or None)
    if is_eval:
        if taskset.repeat_times is None:
            _set_derived(taskset, "repeat_times", 1)
        if taskset.default_workflow_type is None:
            _set_derived(
                taskset, "default_workflow_type", explorer_input.default_eval_workflow_type
            )
    else:
        _set_derived(taskset, "total_epochs", cfg.buffer.total_epochs)
        _set_derived(taskset, "total_steps", cfg.buffer.total_steps)
        repeat = cfg.algorithm.repeat_times
        if taskset.repeat_times is not None and taskset.repeat_times != repeat:
            c.warn(
                f"{_fmt_loc(loc)}.repeat_times ({taskset.repeat_times}) is replaced by "
                f"algorithm.repeat_times ({repeat}) for train task sets."
            )
        _set_derived(taskset, "repeat_times", repeat)
    if taskset.default_workflow_type is None:
        _set_derived(taskset, "default_workflow_type", explorer_input.default_workflow_type)
    if taskset.default_reward_fn_type is None:
        _set_derived(taskset, "default_reward_fn_type", explorer_input.default_reward_fn_type)
    args = taskset.rollout_args
    for attr in ("temperature", "top_p", "top_k", "logprobs"):
        if attr not in args.model_fields_set:
            _set_derived(args, attr, getattr(model, attr))
    if args.max_tokens is None and model.max_response_tokens is not None:
        _set_derived(args, "max_tokens", model.max_response_tokens)
    if taskset.format.chat_template is None:
        _set_derived(taskset.format, "chat_template", model.custom_chat_template)
    if taskset.task_selector is not None:
        c.warn(f"{_fmt_loc(loc)}.task_selector is deprecated; use data_selector instead.")
        _set_derived(taskset, "data_selector", taskset.task_selector)


def _rule_trainer_world(c: _Checker, cfg: Config) -> None:
    """Batch and sequence-parallel sizes against the trainer's GPUs (when the cluster is known)."""
    tbs = cfg.buffer.train_batch_size
    world = cfg.cluster.trainer_gpu_num
    if tbs and world and tbs % world:
        c.error(
            ("buffer", "train_batch_size"),
            tbs,
            f"must be divisible by the trainer's world size ({world} GPUs)",
        )
    sp = cfg.trainer.ulysses_sequence_parallel_size
    if world and world % sp:
        c.error(
            ("trainer", "ulysses_sequence_parallel_size"),
            sp,
            f"must divide the trainer's world size ({world} GPUs)",
        )


def rule_cluster_sizes(c: _Checker, cfg: Config) -> None:
    """What depends on ``cluster.node_num`` / ``gpu_per_node``: the GPU allocation and the checks
    against it. Part of every validation; run again once a run has read unset sizes from Ray
    (:func:`trinity.common.config.apply_cluster_sizes`), so nothing is checked against sizes
    nobody knew yet, and nothing is skipped either."""
    _rule_cluster(c, cfg)
    _set_derived(cfg.synchronizer, "explorer_world_size", cfg.cluster.rollout_gpu_num or None)
    _rule_trainer_world(c, cfg)
    if cfg.run_mode.colocated:
        _rule_colocate_gpus(c, cfg)


def _mirror_taskset(c: _Checker, cfg: Config) -> None:
    """``taskset`` (one train task set) also reads as ``tasksets[0]``, the same object: code
    written for Trinity-RFT reads ``tasksets`` after the check (its check moves ``taskset``
    there), ours reads either (``get_tasksets()``). Both written refuses; a dump writes the
    mirror as ``tasksets: []`` (:func:`dump_without_mirror`), so a saved config loads back.
    A ``taskset`` assigned after an earlier check replaces the mirror of the one before (the
    mirror is derived, not written)."""
    explorer_input = cfg.buffer.explorer_input
    taskset, tasksets = explorer_input.taskset, explorer_input.tasksets
    if taskset is None or (len(tasksets) == 1 and tasksets[0] is taskset):
        return
    if tasksets and "tasksets" in explorer_input.model_fields_set:
        c.error(
            ("buffer", "explorer_input", "tasksets"),
            f"{len(tasksets)} task set(s)",
            "buffer.explorer_input.taskset and buffer.explorer_input.tasksets are both set; "
            "allowed: one of them (taskset is the one-task-set spelling of tasksets)",
        )
        return
    _set_derived(explorer_input, "tasksets", [taskset])


def dump_without_mirror(cfg: Config, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a dump of ``cfg``) with ``buffer.explorer_input.tasksets`` written as ``[]``
    where it only mirrors ``taskset``: what the user wrote, and what loads back unrefused."""
    explorer_input = cfg.buffer.explorer_input
    tasksets = explorer_input.tasksets
    if explorer_input.taskset is not None and len(tasksets) == 1:
        # the mirror, also of a taskset assigned since (then tasksets is still derived)
        if (
            tasksets[0] is explorer_input.taskset
            or "tasksets" not in explorer_input.model_fields_set
        ):
            data["buffer"]["explorer_input"]["tasksets"] = []
    return data


def _rule_buffer(c: _Checker, cfg: Config) -> None:
    buffer = cfg.buffer
    algo = cfg.algorithm
    # train_batch_size
    if not buffer.train_batch_size and not train_batch_size_required(cfg):
        _set_derived(buffer, "train_batch_size", buffer.batch_size * algo.repeat_times)
    tbs = buffer.train_batch_size
    _rule_trainer_world(c, cfg)
    _set_derived(buffer, "tokenizer_path", cfg.model.model_path or None)

    # explorer input
    explorer_input = buffer.explorer_input
    _mirror_taskset(c, cfg)
    if explorer_input.taskset is not None:
        _fill_taskset(
            c, cfg, explorer_input.taskset, 0, ("buffer", "explorer_input", "taskset"), False
        )
    for i, taskset in enumerate(explorer_input.tasksets):
        if taskset is not explorer_input.taskset:  # the mirror is filled above
            _fill_taskset(c, cfg, taskset, i, ("buffer", "explorer_input", "tasksets", i), False)
    for i, taskset in enumerate(explorer_input.eval_tasksets):
        _fill_taskset(c, cfg, taskset, i, ("buffer", "explorer_input", "eval_tasksets", i), True)

    # trainer input
    trainer_input = buffer.trainer_input
    exp = trainer_input.experience_buffer
    mode = cfg.run_mode
    if exp is None and mode.writes_experiences:
        # an explorer's queue; mode serve's SQL table, which a trainer job reads as it grows
        kind = "queue" if mode.explores else "sql"
        exp = ExperienceBufferConfig(name=DEFAULT_EXPERIENCE_BUFFER_NAME, storage_type=kind)
        _set_derived(trainer_input, "experience_buffer", exp)
    if exp is not None:
        loc = ("buffer", "trainer_input", "experience_buffer")
        if exp.storage_type == "file" and mode.explores_and_trains:
            c.warn(
                "a 'file' experience buffer cannot be written and read at once in mode 'both'; "
                f"{_fmt_loc(loc)}.storage_type set to 'queue'."
            )
            _set_derived(exp, "storage_type", "queue")
        if not exp.name:
            _set_derived(exp, "name", DEFAULT_EXPERIENCE_BUFFER_NAME)
        _set_derived(exp, "batch_size", tbs)
        least = 0  # a read stops at explore steps' ends only where an explorer writes them
        if mode.explores and tbs:
            least = max(1, min(math.ceil(cfg.explorer.min_batch_fraction * tbs), tbs))
        _set_derived(exp, "min_batch_size", least)
        _set_derived(exp, "tokenizer_path", cfg.model.model_path or None)
        _set_derived(exp, "ray_namespace", exp.ray_namespace or cfg.ray_namespace)
        if exp.format.chat_template is None:
            _set_derived(exp.format, "chat_template", cfg.model.custom_chat_template)
        if exp.format.enable_thinking is None:
            _set_derived(exp.format, "enable_thinking", cfg.model.enable_thinking)
        if mode.trains_on_dataset:
            _set_derived(exp, "total_epochs", buffer.total_epochs)
            _set_derived(exp, "total_steps", buffer.total_steps)
    for name, aux in trainer_input.auxiliary_buffers.items():
        loc = ("buffer", "trainer_input", "auxiliary_buffers", name)
        if not aux.path:
            c.error(loc + ("path",), aux.path, "every auxiliary buffer needs a path")
        if not aux.name:
            _set_derived(aux, "name", name)
        _set_derived(aux, "batch_size", tbs)
        if "total_epochs" not in aux.model_fields_set:
            _set_derived(aux, "total_epochs", buffer.total_epochs)
        _set_derived(aux, "tokenizer_path", cfg.model.model_path or None)
        _set_derived(aux, "ray_namespace", aux.ray_namespace or cfg.ray_namespace)


def _rule_trainer(c: _Checker, cfg: Config) -> None:
    trainer = cfg.trainer
    _set_derived(trainer, "trust_remote_code", cfg.model.trust_remote_code)
    if trainer.trainer_config_path:
        c.error(
            ("trainer", "trainer_config_path"),
            trainer.trainer_config_path,
            "a separate verl config file is not supported yet (Trinity-RFT 0.6 ignores it with "
            "verl >= 0.8 and refuses it with older verl); allowed: put its settings under "
            "trainer.trainer_config",
        )
    if trainer.max_token_len_per_gpu is None and cfg.model.max_model_len is not None:
        if trainer.trainer_strategy.startswith("fsdp"):
            parallel = trainer.ulysses_sequence_parallel_size
        else:
            parallel = trainer.megatron.context_parallel_size
        _set_derived(
            trainer, "max_token_len_per_gpu", math.ceil(2 * cfg.model.max_model_len / parallel)
        )


def _rule_data_processor(c: _Checker, cfg: Config) -> None:
    """A task pipeline without an output writes what the run reads: the first train task set
    where the run explores; in mode train with SFT / DPO, the trainer's data set (Trinity-RFT's
    rule: the pipeline prepares the offline data there)."""
    task_pipeline = cfg.data_processor.task_pipeline
    if task_pipeline is None or task_pipeline.output is not None:
        return
    mode = cfg.run_mode
    if mode.uses_rollout_engines:
        tasksets = cfg.buffer.explorer_input.get_tasksets()
        if tasksets:
            _set_derived(task_pipeline, "output", tasksets[0])
        return
    exp = cfg.buffer.trainer_input.experience_buffer
    if mode.trains_on_dataset and cfg.algorithm.algorithm_type in _SFT_LIKE and exp is not None:
        # the same storage, as the task set the pipeline's output is typed as
        _set_derived(task_pipeline, "output", TasksetConfig.model_validate(exp.model_dump()))


def _rule_colocate(c: _Checker, cfg: Config) -> None:
    """``mode: colocate``: the rollout engine and the trainer share the devices and take turns
    (generate, engine sleeps, train, weights in memory, engine wakes), so the explorer can
    never run ahead of the trainer: only the synchronous schedule exists."""
    sync = cfg.synchronizer
    if sync.sync_offset > 0:
        c.error(
            ("synchronizer", "sync_offset"),
            sync.sync_offset,
            "mode 'colocate' is synchronous by construction (the rollout engine sleeps while "
            "the trainer trains on the same device, so the explorer cannot run ahead of it); "
            "allowed: 0. Use mode 'both' on separate devices to overlap generation and training",
        )
    if sync.sync_style != "fixed":
        c.error(
            ("synchronizer", "sync_style"),
            sync.sync_style,
            "mode 'colocate' synchronises after every train step in turn with generation; "
            "allowed: 'fixed'",
        )
    _rule_colocate_gpus(c, cfg)
    if sync.sync_method == "nccl":
        # nccl is the default; silently memory: the engine and the trainer share a device
        # (NCCL cannot connect two ranks on one GPU) and the weights never leave the machine
        _set_derived(sync, "sync_method", "memory")


def _rule_colocate_gpus(c: _Checker, cfg: Config) -> None:
    """``mode: colocate`` on GPUs: one engine shares one GPU with the trainer."""
    rollout = cfg.explorer.rollout_model
    if cfg.cluster.gpu_per_node and rollout.tensor_parallel_size > 1:
        c.error(
            ("explorer", "rollout_model", "tensor_parallel_size"),
            rollout.tensor_parallel_size,
            "mode 'colocate' gives each engine half of one GPU (the trainer has the other "
            "half), and Ray cannot give an actor half of several GPUs; allowed: 1",
        )
