"""The run-level rules: what an actual run of the config needs on this machine
(``Config.check_and_update``), and the values it derives for the run (the run directory,
buffer paths, the sync method a machine without CUDA can use).

Split from :mod:`._rules` (the cross-field rules every validated config passes): these run
only with ``run_checks`` and each part answers one question of the run-mode table.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Callable, Union

from . import _utils
from ._sections import _SFT_LIKE
from ._utils import _Checker, _set_derived
from .modes import RUN_MODES, RunModeSpec

if TYPE_CHECKING:
    from ._core import Config

__all__ = ["mode_names", "rule_run", "train_batch_size_required"]


def mode_names(question: Callable[[RunModeSpec], bool]) -> str:
    """The modes whose row answers yes, for messages: ``'bench'``, ``'both' or 'colocate'``."""
    return " or ".join(repr(spec.name) for spec in RUN_MODES.values() if question(spec))


def train_batch_size_required(cfg: Config) -> bool:
    return cfg.run_mode.trains_on_dataset or cfg.algorithm.algorithm_type in _SFT_LIKE


def rule_run(c: _Checker, cfg: Config) -> None:
    """Requirements of an actual run on this machine (``check_and_update``)."""
    _run_model_and_directory(c, cfg)
    _run_algorithm_defaults(cfg)
    _run_inputs(c, cfg)
    _run_derived_paths(c, cfg)
    _run_sync_method(c, cfg)


def _run_model_and_directory(c: _Checker, cfg: Config) -> None:
    """A model to load, a context length, and the run directory (derived from the root)."""
    mode = cfg.run_mode
    model = cfg.model
    external = model.external_model.enable
    if not model.model_path and not external:
        c.error(("model", "model_path"), model.model_path, "a model path is required to run")
    if model.max_model_len is None and not external and not model.tinker.enable:
        c.error(
            ("model", "max_model_len"),
            None,
            "cannot determine the context length: set model.max_model_len, or both "
            "model.max_prompt_tokens and model.max_response_tokens",
        )
    # checkpoint directory: Trinity-RFT 0.6 reads an empty root as the current directory
    if mode.saves and not cfg.checkpoint_root_dir:
        cwd = os.getcwd()
        c.warn(
            f"checkpoint_root_dir is not set: mode '{mode.name}' writes its checkpoints, logs "
            f"and buffers under the current directory {cwd} (Trinity-RFT's default); set "
            "checkpoint_root_dir to choose where"
        )
        _set_derived(cfg, "checkpoint_root_dir", cwd)
    if cfg.checkpoint_root_dir:
        root = os.path.abspath(cfg.checkpoint_root_dir)
        _set_derived(cfg, "checkpoint_root_dir", root)
        _rename_over_earlier_run(c, cfg)
        job_dir = cfg.get_checkpoint_job_dir()
        _set_derived(cfg, "checkpoint_job_dir", job_dir)
        _set_derived(cfg.log, "save_dir", os.path.join(job_dir, "log"))
        _set_derived(cfg.monitor, "cache_dir", os.path.join(job_dir, "monitor"))
        _set_derived(cfg.buffer, "cache_dir", os.path.join(job_dir, "buffer"))


#: what ``algorithm.sample_strategy`` reads after the run checks when the config names none
DEFAULT_SAMPLE_STRATEGY = "default"


def _run_algorithm_defaults(cfg: Config) -> None:
    """``algorithm.sample_strategy`` left unset reads ``"default"`` once checked, as in
    Trinity-RFT (code written for it reads the name), and unset ``sample_strategy_args``
    read ``{}``. Derived, not the user's: resolving the
    algorithm (``trinity.algorithm.resolve_algorithm``, what the trainer builds from) still
    gives the algorithm type its own default (``mix`` for MIX), exactly as with ``None``."""
    if cfg.algorithm.sample_strategy is None:
        _set_derived(cfg.algorithm, "sample_strategy", DEFAULT_SAMPLE_STRATEGY)
    if cfg.algorithm.sample_strategy_args is None:
        # read as ``SAMPLE_STRATEGY.get(name)(**sample_strategy_args)``, as in Trinity-RFT
        _set_derived(cfg.algorithm, "sample_strategy_args", {})


def _run_inputs(c: _Checker, cfg: Config) -> None:
    """What the mode reads: train and eval task sets, the trainer's data set, batch sizes."""
    mode = cfg.run_mode
    # task sets
    explorer_input = cfg.buffer.explorer_input
    tasksets = explorer_input.get_tasksets()
    train_loc: tuple[Union[str, int], ...] = (
        ("buffer", "explorer_input", "taskset")
        if explorer_input.taskset is not None or not explorer_input.tasksets
        else ("buffer", "explorer_input", "tasksets")
    )
    if mode.needs_taskset:
        if not tasksets:
            c.error(
                train_loc,
                None,
                f"mode '{mode.name}' needs a train task set: set "
                "buffer.explorer_input.taskset.path",
            )
        for i, taskset in enumerate(tasksets):
            if not taskset.path:
                loc = train_loc if explorer_input.taskset is not None else train_loc + (i,)
                c.error(
                    loc + ("path",), taskset.path, f"mode '{mode.name}' needs the task set's path"
                )
    if mode.uses_eval_tasksets:
        for i, taskset in enumerate(explorer_input.eval_tasksets):
            if not taskset.path:
                c.error(
                    ("buffer", "explorer_input", "eval_tasksets", i, "path"),
                    taskset.path,
                    "every eval task set needs a path",
                )
    if mode.evaluates_checkpoints:
        if not explorer_input.eval_tasksets:
            c.error(
                ("buffer", "explorer_input", "eval_tasksets"),
                [],
                f"mode '{mode.name}' needs at least one eval task set to evaluate on",
            )
    # trainer input
    exp = cfg.buffer.trainer_input.experience_buffer
    if mode.trains_on_dataset:
        if exp is None:
            c.error(
                ("buffer", "trainer_input", "experience_buffer"),
                None,
                f"mode '{mode.name}' needs a data set or buffer to train on: set "
                "buffer.trainer_input.experience_buffer (storage_type and path)",
            )
        elif exp.storage_type == "file" and not exp.path:
            c.error(
                ("buffer", "trainer_input", "experience_buffer", "path"),
                exp.path,
                "a 'file' experience buffer needs a path",
            )
    if (
        train_batch_size_required(cfg)
        and not cfg.buffer.train_batch_size
        and not mode.evaluates_checkpoints
    ):
        c.error(
            ("buffer", "train_batch_size"),
            cfg.buffer.train_batch_size,
            f"must be set explicitly when mode is {mode_names(lambda s: s.trains_on_dataset)} "
            "or algorithm_type is 'sft'/'dpo'/'cpt'",
        )


def _run_derived_paths(c: _Checker, cfg: Config) -> None:
    """Paths of what the run writes, in its cache directory, where the config names none."""
    mode = cfg.run_mode
    exp = cfg.buffer.trainer_input.experience_buffer
    # A buffer the run writes gets a path in the cache directory; an SFT/DPO data set is read,
    # never written, so it keeps no path and the algorithm type's check asks for one.
    sft_like = cfg.algorithm.algorithm_type in _SFT_LIKE
    if exp is not None and not exp.path and cfg.buffer.cache_dir and not sft_like:
        if exp.storage_type == "sql":
            path = "sqlite:///" + os.path.join(cfg.buffer.cache_dir, f"{exp.name}.db")
        else:
            path = os.path.join(cfg.buffer.cache_dir, f"{exp.name}.jsonl")
        _set_derived(exp, "path", path)
    pipeline = cfg.data_processor.experience_pipeline
    if (
        mode.writes_experiences
        and pipeline.save_input
        and pipeline.input_save_path is None
        and cfg.buffer.cache_dir
    ):
        _set_derived(
            pipeline,
            "input_save_path",
            "sqlite:///" + os.path.join(cfg.buffer.cache_dir, "explorer_output.db"),
        )
    task_pipeline = cfg.data_processor.task_pipeline
    if (
        task_pipeline is not None
        and task_pipeline.output is None
        and not mode.evaluates_checkpoints
    ):
        c.error(
            ("data_processor", "task_pipeline", "output"),
            None,
            "the task pipeline needs an output: set it, or a train task set (its default), "
            "or in mode 'train' with algorithm_type 'sft'/'dpo'/'cpt' "
            "buffer.trainer_input.experience_buffer (its default there)",
        )


def _run_sync_method(c: _Checker, cfg: Config) -> None:
    """NCCL needs CUDA: without it, runs that move weights between devices use checkpoints."""
    mode = cfg.run_mode
    # NCCL needs CUDA
    # (colocate has turned nccl into memory already: one device holds both sides)
    both_apart = mode.explores_and_trains and not mode.colocated
    if cfg.synchronizer.sync_method == "nccl" and both_apart and not _cuda_available():
        c.warn(
            "CUDA is not available, so weights cannot be synchronised over NCCL; "
            "synchronizer.sync_method set to 'checkpoint'."
        )
        _set_derived(cfg.synchronizer, "sync_method", "checkpoint")
        for engine in (cfg.explorer.rollout_model, *cfg.explorer.auxiliary_models):
            _set_derived(engine, "sync_method", "checkpoint")


def _rename_over_earlier_run(c: _Checker, cfg: Config) -> None:
    """Trinity-RFT's rule: with ``continue_from_checkpoint: false``, a run whose directory
    already holds an earlier run's output is renamed ``<name>_<timestamp>``, so it neither
    resumes nor appends to (or overwrites) what is there. Bench reads the checkpoints of its
    directory and is never renamed; a ``stages:`` config decides per stage."""
    if cfg.continue_from_checkpoint or not cfg.run_mode.resumable:
        return
    if cfg.stages:
        return
    job_dir = cfg.get_checkpoint_job_dir()
    if not os.path.isdir(job_dir) or not os.listdir(job_dir):
        return
    old_namespace = "/".join(p for p in (cfg.project, cfg.group, cfg.name) if p)
    cfg.name = f"{cfg.name}_{time.strftime('%Y%m%d%H%M%S')}"
    if cfg.ray_namespace == old_namespace:
        _set_derived(
            cfg, "ray_namespace", "/".join(p for p in (cfg.project, cfg.group, cfg.name) if p)
        )
    c.warn(
        f"continue_from_checkpoint is false and {job_dir} holds an earlier run's output: "
        f"this run is renamed {cfg.name!r} and writes to {cfg.get_checkpoint_job_dir()} "
        "(the earlier run is left untouched; set continue_from_checkpoint: true to resume it)"
    )


def _cuda_available() -> bool:
    # looked up on the module at call time, so tests can patch
    # ``trinity.common.config._utils.cuda_is_available``
    return bool(_utils.cuda_is_available())
