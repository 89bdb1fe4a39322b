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
    attribute_overrides,
    load_config,
    locate_issues,
    parse_override,
    run_mode_spec,
)
from trinity.launcher.component_checks import check_component_names, not_shipped_hint
from trinity.utils.log import get_logger
from trinity.utils.plugin_loader import load_plugins
from trinity.utils.registry import UnknownModuleError

logger = get_logger(__name__)

ConfigSource = Union[str, "os.PathLike[str]", Mapping[str, Any]]

# "algorithm.algorithm_type 'sft' trains on ..." -> the dotted path a message starts with
_LEADING_PATH = re.compile(r"^([A-Za-z_][\w]*(?:(?:\.[A-Za-z_]\w*)|(?:\[\d+\]))+)\b[:\s]")


def validate_config(
    source: ConfigSource, plugin_dirs: Sequence[str] = (), overrides: Sequence[str] = ()
) -> tuple[Config, list[str]]:
    """Load plugins and the config, fill the algorithm type's defaults, run every check.

    ``overrides`` are the command line's ``KEY=VALUE`` strings, applied on top of the file
    before anything is validated (:func:`trinity.common.config.load_config`); a problem with a
    value one of them set names that override instead of a line of the file.

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
    if not overrides:
        return _validate(source, ())
    try:
        return _validate(source, overrides)
    except ConfigError as exc:
        raise ConfigError(attribute_overrides(exc.errors, overrides), exc.source) from None


def _validate(source: ConfigSource, overrides: Sequence[str]) -> tuple[Config, list[str]]:
    try:
        config = load_config(source, overrides=overrides)
    except ConfigError as exc:
        extra = _raw_algorithm_args_issues(source, exc.errors, overrides)
        if not extra:
            raise
        issues = exc.errors + extra
        if not isinstance(source, Mapping):
            issues = locate_issues(issues, os.fspath(source))
        raise ConfigError(issues, exc.source) from None
    return _check_loaded(config, None if isinstance(source, Mapping) else os.fspath(source))


def check_loaded_config(config: Config, label: Optional[str] = None) -> list[str]:
    """:func:`validate_config`'s checks on a config the caller loaded itself, in place.

    Trinity-RFT's launcher loads the config (``load_config``) and then checks that same object
    (``trinity.cli.launcher``); this fills the algorithm type's defaults into
    ``config.algorithm`` and runs every check ``trinity run`` makes. ``label`` (the file the
    config came from) locates the problems in it. Plugins are the caller's to load.

    Returns the warnings of the algorithm type's own checks.

    Raises:
        ConfigError: as :func:`validate_config`.
    """
    return _check_loaded(config, label, in_place=True)[1]


def _check_loaded(
    config: Config, label: Optional[str], in_place: bool = False
) -> tuple[Config, list[str]]:
    """Every check after loading (see :func:`validate_config`); ``in_place``: the algorithm
    defaults go into ``config`` itself instead of a new config."""
    warnings: list[str] = []
    try:
        if config.stages:
            # A staged config runs its stages, not its base: each stage is checked as a run
            # (the base alone may well lack what only a stage provides). The base keeps what
            # the user wrote: the algorithm defaults are each stage's own algorithm's.
            from trinity.launcher.stages import stage_configs

            runs = stage_configs(config)
        else:
            config = _check_run(config, warnings, in_place)
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
        if label is None:
            raise
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
        raise ConfigError(locate_issues(issues, label) if label else issues, label)
    return config, warnings


def _check_run(config: Config, warnings: list[str], in_place: bool = False) -> Config:
    """Algorithm defaults and arguments, run-level checks, names: all problems in one error.
    ``in_place``: the defaults are assigned to ``config.algorithm`` (``check_and_update``
    then derives what follows from them, as a new config would)."""
    issues: list[ConfigIssue] = []
    try:
        resolved = apply_algorithm_defaults(config)
        if in_place:
            config.algorithm = resolved.algorithm
        else:
            config = resolved
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


def _raw_algorithm_args_issues(
    source: ConfigSource, known: list[ConfigIssue], overrides: Sequence[str] = ()
) -> list[ConfigIssue]:
    """Component-argument problems of a config whose schema failed (best effort).

    So that one run of the validator lists a bad ``optimizer.lr`` and a misspelt
    ``policy_loss_fn_args`` key together. Keys of ``algorithm`` that already have a schema
    problem are left out; anything unexpected in the raw file gives no extra issue.
    """
    from trinity.algorithm import resolve_algorithm
    from trinity.algorithm.algorithm import COMPONENT_FIELDS
    from trinity.common.config import AlgorithmConfig

    try:
        from omegaconf import OmegaConf

        if isinstance(source, Mapping):
            raw: Any = source
        else:
            with open(os.fspath(source), encoding="utf-8") as f:
                raw = OmegaConf.to_container(OmegaConf.create(f.read()), resolve=False)
        if overrides:
            conf = OmegaConf.create(dict(raw))
            for text in overrides:
                key, value = parse_override(text)
                OmegaConf.update(conf, key, value, merge=True)
            raw = OmegaConf.to_container(conf, resolve=False)
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

    if not run_mode_spec(config.mode).trains:
        return
    try:
        trainer_world_size(config, "cpu")
    except TrainerRanksError as exc:
        raise ConfigError(
            [ConfigIssue(path=exc.field, message=str(exc), value=exc.value, kind="invalid")]
        ) from None


def config_issues(exc: BaseException) -> list[ConfigIssue]:
    """The located problems behind an exception :func:`validate_config` raised."""
    if isinstance(exc, ConfigError):
        return list(exc.errors)
    field = getattr(exc, "field", None)  # UnknownComponentError: "algorithm.policy_loss_fn"
    if isinstance(field, str) and field:
        hint = not_shipped_hint(field, str(getattr(exc, "name", "")))
        return [
            ConfigIssue(
                path=field,
                message=hint + UnknownModuleError.__str__(exc),  # type: ignore[arg-type]
                value=getattr(exc, "name", None),
                kind="unknown_name",
            )
        ]
    message = str(exc)
    if isinstance(exc, KeyError) and exc.args and not isinstance(exc, UnknownModuleError):
        message = str(exc.args[0])
    match = _LEADING_PATH.match(message)
    return [ConfigIssue(path=match.group(1) if match else "", message=message, kind="invalid")]
