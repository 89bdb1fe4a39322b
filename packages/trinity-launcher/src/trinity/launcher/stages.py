"""``stages:``: run several stages of one config in order (e.g. SFT, then GRPO).

Each stage is the base config with the stage's overrides (``Config.iter_stages``), its own run
directory ``<job dir>/<stage_name>`` and, from the second stage on, the previous training
stage's final Hugging Face weights as ``model.model_path`` -- what Trinity-RFT does. A stage
that does not train (``explore``, ``bench``) passes the model it was given on.

Progress is recorded in ``<job dir>/stages.json`` after each finished stage (written to a
temporary file and renamed, so a kill never leaves half a record). A killed run restarted with
the same command (``continue_from_checkpoint: true``, the default) skips the finished stages
and resumes the current one from its own checkpoints; ``continue_from_checkpoint: false``
runs every stage again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, Optional

from trinity.common.config import Config, ConfigError, ConfigIssue, run_mode_spec
from trinity.utils.log import get_logger

__all__ = [
    "STAGE_STATE_FILE",
    "final_hf_weights",
    "prepare_stage",
    "run_stages",
    "stage_configs",
]

logger = get_logger(__name__)

#: Finished stages, in ``<job dir>`` of the base config.
STAGE_STATE_FILE = "stages.json"


def stage_configs(config: Config) -> list[Config]:
    """Each stage's config, checked as its run would check it (with the model path the stage
    itself names; the run replaces it with the previous stage's weights).

    Raises:
        ConfigError: every stage's problems, each located as ``stages[i].<field>`` (the field
            of the stage's merged config).
    """
    checked: list[Config] = []
    issues: list[ConfigIssue] = []
    for index, stage in enumerate(config.iter_stages()):
        try:
            checked.append(prepare_stage(stage))
        except ConfigError as exc:
            for issue in exc.errors:
                where = f"stages[{index}]"
                issue.path = f"{where}.{issue.path}" if issue.path else where
                issues.append(issue)
    if issues:
        raise ConfigError(issues)
    return checked


def prepare_stage(stage: Config, model_path: Optional[str] = None) -> Config:
    """Fill the stage's algorithm defaults and run the run-level and component checks."""
    from trinity.algorithm import apply_algorithm_defaults
    from trinity.launcher.component_checks import check_component_names

    if model_path is not None:
        stage.model.model_path = model_path
    stage = apply_algorithm_defaults(stage)
    stage.check_and_update()
    check_component_names(stage)
    return stage


def _state_path(config: Config) -> str:
    return os.path.join(config.get_checkpoint_job_dir(), STAGE_STATE_FILE)


def _load_state(config: Config) -> list[dict[str, Any]]:
    from trinity.launcher.modes import LaunchInputError

    path = _state_path(config)
    if not config.continue_from_checkpoint or not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        done = json.load(f).get("completed", [])
    names = [s.stage_name for s in config.stages]
    for index, entry in enumerate(done):
        if index >= len(names) or entry.get("stage_name") != names[index]:
            raise LaunchInputError(
                f"{path}: finished stages {[e.get('stage_name') for e in done]} do not match "
                f"the config's stages {names}; use another name, delete the file, or set "
                "continue_from_checkpoint: false to run every stage again"
            )
    return done


def _save_state(config: Config, done: list[dict[str, Any]]) -> None:
    path = _state_path(config)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"completed": done}, f, indent=2)
    os.replace(tmp, path)


def final_hf_weights(stage: Config) -> Optional[str]:
    """The HF model directory a finished training stage left (its last checkpoint's
    ``actor/huggingface``), or ``None``."""
    from trinity.launcher.checkpoint import latest_checkpoint

    job_dir = stage.checkpoint_job_dir or stage.get_checkpoint_job_dir()
    step = latest_checkpoint(job_dir)
    if step is None:
        return None
    target = os.path.join(job_dir, f"global_step_{step}", "actor", "huggingface")
    if os.path.isdir(target) and any(f.endswith(".safetensors") for f in os.listdir(target)):
        return target
    return None


def run_stages(
    config: Config,
    run_stage: Callable[[Config], None],
    final_weights: Optional[Callable[[Config], Optional[str]]] = None,
) -> list[Config]:
    """Run every stage of ``config`` in order with ``run_stage`` (which raises on failure).

    ``final_weights`` finds the Hugging Face weights a finished training stage left (default
    :func:`final_hf_weights`; Trinity-RFT's launcher asks
    ``trinity.trainer.verl.utils.get_latest_hf_checkpoint_path``). Returns the configs of the
    stages run by this call.

    Raises:
        LaunchInputError: ``stages.json`` does not match the config's stages.
        ValueError: a training stage left no Hugging Face weights for the next stage.
    """
    done = _load_state(config)
    model_path: Optional[str] = done[-1]["model_path"] if done else None
    ran: list[Config] = []
    for index, stage in enumerate(config.iter_stages()):
        name = config.stages[index].stage_name
        if index < len(done):
            logger.info("Stage %d (%s) finished in an earlier run; skipped", index, name)
            continue
        stage = prepare_stage(stage, model_path)
        logger.info(
            "Stage %d/%d (%s): mode %s, model %s",
            index + 1,
            len(config.stages),
            name,
            stage.mode,
            stage.model.model_path,
        )
        run_stage(stage)
        ran.append(stage)
        if run_mode_spec(stage.mode).trains:  # hands its final weights to the next stage
            weights = (final_weights or final_hf_weights)(stage)
            if weights is None:
                raise ValueError(
                    f"stages[{index}] ({name}) trained but left no Hugging Face weights under "
                    f"{stage.checkpoint_job_dir}; the next stage would have no model"
                )
            model_path = weights
        else:
            model_path = stage.model.model_path
        done.append({"stage_name": name, "mode": stage.mode, "model_path": model_path})
        _save_state(config, done)
    return ran
