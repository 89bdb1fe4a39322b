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
from typing import Any, Optional, Union

from trinity.algorithm import ALGORITHM_TYPE, apply_algorithm_defaults
from trinity.common.config import (
    Config,
    ConfigError,
    ConfigIssue,
    check_component_args,
    load_config,
    locate_issues,
)
from trinity.common.rewards import REWARD_FUNCTIONS
from trinity.common.workflows import WORKFLOWS
from trinity.utils.log import get_logger
from trinity.utils.plugin_loader import load_plugins
from trinity.utils.registry import UnknownModuleError

logger = get_logger(__name__)

ConfigSource = Union[str, "os.PathLike[str]", Mapping[str, Any]]

# "algorithm.algorithm_type 'sft' trains on ..." -> the dotted path a message starts with
_LEADING_PATH = re.compile(r"^([A-Za-z_][\w]*(?:(?:\.[A-Za-z_]\w*)|(?:\[\d+\]))+)\b[:\s]")


def validate_config(
    source: ConfigSource, plugin_dirs: Sequence[str] = ()
) -> tuple[Config, list[str]]:
    """Load plugins and the config, fill the algorithm type's defaults, run every check.

    Every problem found is reported at once: schema problems together with the component
    arguments that can be checked from the raw file; once the schema passes, the algorithm
    components' arguments, the run-level checks (paths, lengths, task sets) and the registry
    names and arguments of workflows, reward functions and experience operators.

    Nothing heavy happens here: no Ray, no engine, no model weights (a local model's
    ``config.json`` is read for its context length). ``trinity-launch --dry-run`` is this.

    Returns the ready config and the warnings of the algorithm type's own checks (plus one
    per undeclared component given arguments).

    Raises:
        ConfigError: schema, run-level, component-name and component-argument problems
            (each located).
        trinity.utils.plugin_loader.PluginLoadError: a plugin directory failed to import.
        UnknownModuleError: an unknown component name in a stage (a staged config's stages
            are resolved by :func:`trinity.launcher.stages.stage_configs`).
    """
    load_plugins(plugin_dirs or None)
    try:
        config = load_config(source)
    except ConfigError as exc:
        extra = _raw_algorithm_args_issues(source, exc.errors)
        if not extra:
            raise
        issues = exc.errors + extra
        if not isinstance(source, Mapping):
            issues = locate_issues(issues, os.fspath(source))
        raise ConfigError(issues, exc.source) from None
    warnings: list[str] = []
    try:
        if config.stages:
            # A staged config runs its stages, not its base: each stage is checked as a run
            # (the base alone may well lack what only a stage provides). The base keeps what
            # the user wrote: the algorithm defaults are each stage's own algorithm's.
            from trinity.launcher.stages import stage_configs

            runs = stage_configs(config)
        else:
            config = _check_run(config, warnings)
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
        raise ConfigError(locate_issues(exc.errors, label), label) from None
    issues: list[ConfigIssue] = []
    for index, run in enumerate(runs):
        try:
            found = ALGORITHM_TYPE[run.algorithm.algorithm_type].check_config(run) or []
        except ConfigError as exc:
            issues += exc.errors
            continue
        except ValueError as exc:  # the algorithm type refused the config: name the field
            for issue in config_issues(exc):
                if config.stages:
                    issue.path = (
                        f"stages[{index}].{issue.path}" if issue.path else f"stages[{index}]"
                    )
                issues.append(issue)
            continue
        warnings += [f"stages[{index}]: {w}" if config.stages else w for w in found]
    if issues:
        label = None if isinstance(source, Mapping) else os.fspath(source)
        raise ConfigError(locate_issues(issues, label) if label else issues, label)
    return config, warnings


def _check_run(config: Config, warnings: list[str]) -> Config:
    """Algorithm defaults and arguments, run-level checks, names: all problems in one error."""
    issues: list[ConfigIssue] = []
    try:
        config = apply_algorithm_defaults(config)
    except ConfigError as exc:  # component arguments: go on with the other checks
        issues += exc.errors
    except UnknownModuleError as exc:  # an unknown algorithm type / component name
        issues += config_issues(exc)
    try:
        config.check_and_update()
    except ConfigError as exc:
        issues += exc.errors
    try:
        check_component_names(config, warnings)
    except ConfigError as exc:
        issues += exc.errors
    if issues:
        raise ConfigError(issues)
    return config


def _raw_algorithm_args_issues(source: ConfigSource, known: list[ConfigIssue]) -> list[ConfigIssue]:
    """Component-argument problems of a config whose schema failed (best effort).

    So that one run of the validator lists a bad ``optimizer.lr`` and a misspelt
    ``policy_loss_fn_args`` key together. Keys of ``algorithm`` that already have a schema
    problem are left out; anything unexpected in the raw file gives no extra issue.
    """
    from trinity.algorithm import resolve_algorithm
    from trinity.algorithm.algorithm import COMPONENT_FIELDS
    from trinity.common.config import AlgorithmConfig

    try:
        if isinstance(source, Mapping):
            raw: Any = source
        else:
            from omegaconf import OmegaConf

            with open(os.fspath(source), encoding="utf-8") as f:
                raw = OmegaConf.to_container(OmegaConf.create(f.read()), resolve=False)
        section = raw.get("algorithm") if isinstance(raw, Mapping) else None
        if not isinstance(section, Mapping):
            return []
        bad = {i.loc[1] for i in known if len(i.loc) > 1 and i.loc[0] == "algorithm"}
        bad |= {i.path.split(".")[1] for i in known if i.path.startswith("algorithm.")}
        wanted = {"algorithm_type", "repeat_times", "loss_agg_mode", *COMPONENT_FIELDS}
        wanted |= {f"{f}_args" for f in COMPONENT_FIELDS}
        kept = {k: v for k, v in section.items() if k in wanted and k not in bad}
        resolve_algorithm(AlgorithmConfig.model_validate(kept))
    except ConfigError as exc:
        reported = {i.path for i in known}
        return [i for i in exc.errors if i.path not in reported]
    except Exception:
        return []
    return []


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


def check_component_names(config: Config, warnings: Optional[list[str]] = None) -> None:
    """Refuse workflow / reward-function / operator names nobody registered, and arguments
    those components do not declare, before anything starts.

    A typo would otherwise surface as a failed task in every batch of a started run. Names
    are looked up in the registries, so built-ins (entry points of installed packages) and
    plugins loaded from ``--plugin-dir`` count. Per-row names (``format.workflow_key``) are
    checked when the rows are read. Arguments: ``reward_fn_args`` and experience operators'
    ``args`` against the component's declaration (``Args`` or typed ``__init__``);
    ``workflow_args`` only where the workflow declares an ``Args`` model (they are free-form
    otherwise). ``warnings`` collects one line per undeclared component given arguments.

    Raises:
        ConfigError: one issue per bad name (naming the field, the name and the closest known
            name) or bad argument.
    """
    explorer_input = config.buffer.explorer_input
    sets = [("taskset", explorer_input.taskset)] if explorer_input.taskset is not None else []
    sets += [(f"tasksets[{i}]", t) for i, t in enumerate(explorer_input.tasksets)]
    sets += [(f"eval_tasksets[{i}]", t) for i, t in enumerate(explorer_input.eval_tasksets)]
    issues: list[ConfigIssue] = []
    found_warnings: list[str] = []
    for where, taskset in sets:
        for field, args_field, registry, derive in (
            ("default_workflow_type", "workflow_args", WORKFLOWS, False),
            ("default_reward_fn_type", "reward_fn_args", REWARD_FUNCTIONS, True),
        ):
            name = getattr(taskset, field, None)
            if name is None:
                continue
            try:
                cls = registry[name]
            except UnknownModuleError as exc:
                issues.append(
                    ConfigIssue(
                        path=f"buffer.explorer_input.{where}.{field}",
                        message=str(exc),
                        value=name,
                        kind="unknown_name",
                    )
                )
                continue
            if isinstance(cls, type):
                loc = ("buffer", "explorer_input", *_where_loc(where), args_field)
                found, warned = check_component_args(
                    cls, getattr(taskset, args_field), loc, label=f"{field} {name!r}", derive=derive
                )
                issues += found
                found_warnings += warned
    issues += _operator_issues(config, found_warnings)
    issues += _buffer_name_issues(config, sets)
    if warnings is not None:
        warnings += found_warnings
    for line in found_warnings:
        logger.warning(line)
    if issues:
        raise ConfigError(issues)


def _where_loc(where: str) -> tuple[Union[str, int], ...]:
    """``"tasksets[2]"`` -> ``("tasksets", 2)``."""
    match = re.fullmatch(r"(\w+)\[(\d+)\]", where)
    return (match.group(1), int(match.group(2))) if match else (where,)


def _operator_issues(config: Config, warnings: list[str]) -> list[ConfigIssue]:
    """Experience operators: registered names and declared arguments."""
    operators = config.data_processor.experience_pipeline.operators
    if not operators:
        return []
    from trinity.buffer.operators import EXPERIENCE_OPERATORS

    issues: list[ConfigIssue] = []
    for index, op in enumerate(operators):
        loc = ("data_processor", "experience_pipeline", "operators", index)
        try:
            cls = EXPERIENCE_OPERATORS[op.name]
        except UnknownModuleError as exc:
            issues.append(
                ConfigIssue(
                    path=_fmt(loc + ("name",)), message=str(exc), value=op.name, kind="unknown_name"
                )
            )
            continue
        if isinstance(cls, type):
            found, warned = check_component_args(
                cls, op.args, loc + ("args",), label=f"operator {op.name!r}"
            )
            issues += found
            warnings += warned
    return issues


def _buffer_name_issues(config: Config, sets: list[tuple[str, Any]]) -> list[ConfigIssue]:
    """Task selectors of task sets and priority functions of replay queues: registered names."""
    from trinity.buffer.storage.queue import PRIORITY_FN
    from trinity.buffer.taskset import TASK_SELECTORS

    checks: list[tuple[str, Any, Any]] = []
    for where, taskset in sets:
        selector = taskset.data_selector.selector_type
        if selector is not None:
            prefix = f"buffer.explorer_input.{where}.data_selector.selector_type"
            checks.append((prefix, selector, TASK_SELECTORS))
    trainer_input = config.buffer.trainer_input
    buffers = [("experience_buffer", trainer_input.experience_buffer)]
    buffers += [(f"auxiliary_buffers.{n}", b) for n, b in trainer_input.auxiliary_buffers.items()]
    for where, buffer in buffers:
        replay = getattr(buffer, "replay_buffer", None)
        if replay is not None and replay.enable:
            path = f"buffer.trainer_input.{where}.replay_buffer.priority_fn"
            checks.append((path, replay.priority_fn, PRIORITY_FN))
    issues: list[ConfigIssue] = []
    for path, name, registry in checks:
        try:
            registry[name]
        except UnknownModuleError as exc:
            issues.append(ConfigIssue(path=path, message=str(exc), value=name, kind="unknown_name"))
    return issues


def _fmt(loc: tuple[Union[str, int], ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


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
