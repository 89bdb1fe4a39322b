"""One validation path for every front end: the CLI (``trinity-launch``) and Trinity Studio.

:func:`validate_config` does what a run does before it starts -- load plugins, validate the
schema, fill the algorithm type's defaults, run the run-level checks, check workflow and
reward-function names against the registries, run the algorithm type's own checks -- and
:func:`config_issues` turns whatever it raised into located :class:`ConfigIssue` objects, so
the Studio can show each problem next to its field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Union

from trinity.algorithm import ALGORITHM_TYPE, apply_algorithm_defaults
from trinity.common.config import Config, ConfigError, ConfigIssue, load_config
from trinity.common.rewards import REWARD_FUNCTIONS
from trinity.common.workflows import WORKFLOWS
from trinity.utils.plugin_loader import load_plugins
from trinity.utils.registry import UnknownModuleError

ConfigSource = Union[str, "os.PathLike[str]", Mapping[str, Any]]

# "algorithm.algorithm_type 'sft' trains on ..." -> the dotted path a message starts with
_LEADING_PATH = re.compile(r"^([A-Za-z_][\w]*(?:(?:\.[A-Za-z_]\w*)|(?:\[\d+\]))+)\b[:\s]")


def validate_config(
    source: ConfigSource, plugin_dirs: Sequence[str] = ()
) -> tuple[Config, list[str]]:
    """Load plugins and the config, fill the algorithm type's defaults, run every check.

    Returns the ready config and the warnings of the algorithm type's own checks.

    Raises:
        ConfigError: schema, run-level and component-name problems (each located).
        trinity.utils.plugin_loader.PluginLoadError: a plugin directory failed to import.
        UnknownModuleError / ValueError: an unknown algorithm component, or the algorithm
            type refused the config.
    """
    load_plugins(plugin_dirs or None)
    config = load_config(source)
    try:
        if config.stages:
            # A staged config runs its stages, not its base: each stage is checked as a run
            # (the base alone may well lack what only a stage provides). The base keeps what
            # the user wrote: the algorithm defaults are each stage's own algorithm's.
            from trinity.launcher.stages import stage_configs

            runs = stage_configs(config)
        else:
            config = apply_algorithm_defaults(config)
            config.check_and_update()
            check_component_names(config)
            runs = [config]
        for index, run in enumerate(runs):
            try:
                _check_trainer_ranks(run)
            except ConfigError as exc:
                if config.stages:
                    for issue in exc.errors:
                        issue.path = f"stages[{index}].{issue.path}"
                raise
    except ConfigError as exc:
        if isinstance(source, Mapping):
            raise
        label = os.fspath(source)
        for issue in exc.errors:
            issue.file = issue.file or label
        raise ConfigError(exc.errors, label) from None
    warnings: list[str] = []
    for index, run in enumerate(runs):
        found = ALGORITHM_TYPE[run.algorithm.algorithm_type].check_config(run) or []
        warnings += [f"stages[{index}]: {w}" if config.stages else w for w in found]
    return config, warnings


def _check_trainer_ranks(config: Config) -> None:
    """The trainer's rank count must be readable (it decides Ray workers vs the driver)."""
    from trinity.launcher.trainer.workers import TrainerRanksError, trainer_world_size

    if config.mode not in ("train", "both"):
        return
    try:
        trainer_world_size(config, "cpu")
    except TrainerRanksError as exc:
        raise ConfigError(
            [ConfigIssue(path=exc.field, message=str(exc), value=exc.value, kind="invalid")]
        ) from None


def check_component_names(config: Config) -> None:
    """Refuse workflow / reward-function names nobody registered, before anything starts.

    A typo would otherwise surface as a failed task in every batch of a started run. Names
    are looked up in the registries, so built-ins (entry points of installed packages) and
    plugins loaded from ``--plugin-dir`` count. Per-row names (``format.workflow_key``) are
    checked when the rows are read.

    Raises:
        ConfigError: one issue per bad name, naming the field, the name and the closest
            known name.
    """
    explorer_input = config.buffer.explorer_input
    sets = [("taskset", explorer_input.taskset)] if explorer_input.taskset is not None else []
    sets += [(f"tasksets[{i}]", t) for i, t in enumerate(explorer_input.tasksets)]
    sets += [(f"eval_tasksets[{i}]", t) for i, t in enumerate(explorer_input.eval_tasksets)]
    issues = []
    for where, taskset in sets:
        for field, registry in (
            ("default_workflow_type", WORKFLOWS),
            ("default_reward_fn_type", REWARD_FUNCTIONS),
        ):
            name = getattr(taskset, field, None)
            if name is None:
                continue
            try:
                registry[name]
            except UnknownModuleError as exc:
                issues.append(
                    ConfigIssue(
                        path=f"buffer.explorer_input.{where}.{field}",
                        message=str(exc),
                        value=name,
                        kind="unknown_name",
                    )
                )
    if issues:
        raise ConfigError(issues)


def config_issues(exc: BaseException) -> list[ConfigIssue]:
    """The located problems behind an exception :func:`validate_config` raised."""
    if isinstance(exc, ConfigError):
        return list(exc.errors)
    field = getattr(exc, "field", None)  # UnknownComponentError: "algorithm.policy_loss_fn"
    if isinstance(field, str) and field:
        return [
            ConfigIssue(
                path=field,
                message=UnknownModuleError.__str__(exc),  # type: ignore[arg-type]
                value=getattr(exc, "name", None),
                kind="unknown_name",
            )
        ]
    message = str(exc)
    if isinstance(exc, KeyError) and exc.args and not isinstance(exc, UnknownModuleError):
        message = str(exc.args[0])
    match = _LEADING_PATH.match(message)
    return [ConfigIssue(path=match.group(1) if match else "", message=message, kind="invalid")]
