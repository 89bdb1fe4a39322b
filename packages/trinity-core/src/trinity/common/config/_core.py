"""The top-level Config model, load_config and save_config."""

from __future__ import annotations

import copy
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, Union

import yaml
from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from ._errors import (
    ConfigError,
    ConfigIssue,
    _annotation_at,
    _CrossFieldErrors,
    _fmt_loc,
    _issues_from_validation_error,
    _unwrap,
)
from ._rules import _apply_rules, dump_without_mirror
from ._sections import (
    LOG_DIR_ENV_VAR,
    LOG_LEVEL_ENV_VAR,
    LOG_NODE_IP_ENV_VAR,
    PLUGIN_DIRS_ENV_VAR,
    AlgorithmConfig,
    BufferConfig,
    ClusterConfig,
    DataProcessorConfig,
    ExplorerConfig,
    LogConfig,
    ModelConfig,
    MonitorConfig,
    RunMode,
    ServiceConfig,
    StageConfig,
    SynchronizerConfig,
    TrainerConfig,
    _Section,
)
from ._trainer_view import bind_trainer_view
from ._utils import _changes, _Checker, _deep_merge, _drop_values, _intent_dump, _set_derived
from .modes import RUN_MODES, RunModeSpec, run_mode_spec

logger = logging.getLogger("trinity.common.config")

_MODES = tuple(RUN_MODES)

# --------------------------------------------------------------------------------------
# Top-level config
# --------------------------------------------------------------------------------------


class Config(_Section):
    """A whole Trinity run."""

    mode: RunMode = Field("both", description=f"{', '.join(_MODES[:-1])} or {_MODES[-1]}.")
    project: str = Field("Trinity-RFT", description="Project name (monitor, checkpoint dirs).")
    group: str = Field("", description="Experiment group.")
    name: str = Field("rft", description="Experiment name.")
    checkpoint_root_dir: str = Field(
        "", description="Root of checkpoints; the run writes to <root>/<project>/<group>/<name>."
    )
    checkpoint_job_dir: str = Field("", description="Computed; do not set.")
    ray_namespace: str = Field("", description="Defaults to project/group/name.")
    continue_from_checkpoint: bool = Field(
        True, description="Resume from the latest checkpoint in checkpoint_job_dir."
    )
    ignore_validator_suggestions: bool = Field(
        False, description="Skip the trainer's GPU-memory suggestions."
    )
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    data_processor: DataProcessorConfig = Field(default_factory=DataProcessorConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    buffer: BufferConfig = Field(default_factory=BufferConfig)
    explorer: ExplorerConfig = Field(default_factory=ExplorerConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    synchronizer: SynchronizerConfig = Field(default_factory=SynchronizerConfig)
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    stages: list[StageConfig] = Field(
        default_factory=list, description="Stages run in order, each overriding the base config."
    )

    _warnings: list[str] = PrivateAttr(default_factory=list)
    # What the user wrote (before derived values were filled in) ...
    _intent: Optional[dict[str, Any]] = PrivateAttr(default=None)
    # ... and the full config right after validation, to spot later assignments.
    _snapshot: Optional[dict[str, Any]] = PrivateAttr(default=None)

    # ---------------------------------------------------------------- validation
    @model_validator(mode="wrap")
    @classmethod
    def _cross_field(cls, data: Any, handler: Any, info: ValidationInfo) -> Config:
        self = handler(data)
        context = dict(info.context or {})
        self._intent = _intent_dump(self)
        checker = _Checker(self, bool(context.get("run_checks")), bool(context.get("quiet")))
        _apply_rules(checker)
        issues = list(checker.issues)
        warnings = list(checker.warnings)
        if not issues:
            for index, stage in enumerate(self.stages):
                merged = self._stage_dict(stage)
                try:
                    stage_config = Config.model_validate(merged, context={**context, "quiet": True})
                except ValidationError as exc:
                    issues.extend(_issues_from_validation_error(exc, Config, ("stages", index)))
                    continue
                for warning in stage_config.warnings:
                    checker.warn(f"stages[{index}]: {warning}")
                    warnings.append(f"stages[{index}]: {warning}")
        if issues:
            raise _CrossFieldErrors(issues)
        self._warnings = warnings
        self._snapshot = self.to_dict()
        return self

    def _current_intent(self) -> dict[str, Any]:
        """The user's values plus whatever a program assigned after validation."""
        if self._intent is None or self._snapshot is None:  # built with model_construct
            return _intent_dump(self)
        return _deep_merge(self._intent, _changes(self.to_dict(), self._snapshot))

    def _stage_dict(self, stage: StageConfig) -> dict[str, Any]:
        if self._snapshot is None:  # being validated: what the user wrote
            base = self._intent if self._intent is not None else _intent_dump(self)
        else:  # ... and what a program assigned since (a checkpoint root set after loading)
            base = self._current_intent()
        base = copy.deepcopy(base)
        base.pop("stages", None)
        # Run identity derived from the base name (possibly written out by save_config) is
        # re-derived from the stage's name instead.
        derived_namespace = "/".join(p for p in (self.project, self.group, self.name) if p)
        if self.ray_namespace == derived_namespace:
            _drop_values(base, {"ray_namespace": self.ray_namespace})
        _drop_values(base, {"checkpoint_job_dir": self.checkpoint_job_dir})
        merged = _deep_merge(base, stage.overrides())
        merged["name"] = f"{self.name}/{stage.stage_name}"
        # later stages start from this stage's HF checkpoint
        merged.setdefault("trainer", {})["save_hf_checkpoint"] = "last"
        return merged

    # ---------------------------------------------------------------- public API
    @property
    def run_mode(self) -> RunModeSpec:
        """The row of the run-mode table for ``mode`` (what the run does: explores, trains,
        colocated, ...); ask it rather than compare ``mode`` with a mode's name."""
        return run_mode_spec(self.mode)

    @property
    def warnings(self) -> list[str]:
        """Adjustments made while validating (downgrades, deprecated keys, ...)."""
        return list(self._warnings)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: Optional[str] = None) -> Config:
        """Validate a plain dict (no interpolation); raise ``ConfigError`` if invalid."""
        return _validate(dict(data), source=source, yaml_root=None, run_checks=False)

    def to_dict(self) -> dict[str, Any]:
        """Every field, with stages kept as the partial overrides they are."""
        data = dump_without_mirror(self, self.model_dump(exclude={"stages"}))
        data["stages"] = [{"stage_name": s.stage_name, **s.overrides()} for s in self.stages]
        return data

    def save(self, config_path: Union[str, os.PathLike[str]]) -> None:
        """Write this config as YAML (``load_config`` reads it back to an equal config)."""
        save_config(self, config_path)

    def check_and_update(self) -> Config:
        """Run the run-level checks and fill run-time values, in place; return ``self``.

        ``trainer.trainer_config`` keeps the keys the config names; its attributes then read
        the settings the trainer derives from this checked config, as Trinity-RFT's veRL
        config object did (:class:`~trinity.common.config.TrainerConfigDict`, compat D11).

        Raises ``ConfigError`` listing every problem.
        """
        before = set(self._warnings)
        checked = _validate(
            self._current_intent(), source=None, yaml_root=None, run_checks=True, quiet=True
        )
        # copied through the config API for derived values, then marked set as ``checked``
        # marks them: what the user wrote stays what it was
        fields_set = self.model_fields_set
        fields_set.clear()
        for name in type(self).model_fields:
            _set_derived(self, name, getattr(checked, name))
        fields_set.update(checked.model_fields_set)
        self._warnings = checked.warnings
        self._intent = checked._intent
        self._snapshot = checked._snapshot
        bind_trainer_view(self)
        for warning in self._warnings:
            if warning not in before:
                logger.warning(warning)
        return self

    def iter_stages(self) -> Iterator[Config]:
        """Yield the validated config of each stage (nothing when there are no stages)."""
        for index, stage in enumerate(self.stages):
            try:
                yield Config.model_validate(self._stage_dict(stage), context={"quiet": True})
            except ValidationError as exc:  # pragma: no cover - validated at load time
                issues = _issues_from_validation_error(exc, Config, ("stages", index))
                raise ConfigError(issues) from None

    def get_checkpoint_job_dir(self) -> str:
        """``<checkpoint_root_dir>/<project>/<group>/<name>``."""
        return os.path.join(self.checkpoint_root_dir, self.project, self.group, self.name)

    def flatten(self) -> dict[str, Any]:
        """The config as a single-level dict with dotted keys (for monitors)."""
        out: dict[str, Any] = {}

        def walk(value: Any, key: str) -> None:
            if isinstance(value, dict):
                for k, v in value.items():
                    walk(v, f"{key}.{k}" if key else str(k))
            elif isinstance(value, list):
                for i, v in enumerate(value):
                    walk(v, f"{key}.{i}" if key else str(i))
            else:
                out[key] = value

        walk(self.to_dict(), "")
        return out

    def get_envs(self) -> dict[str, str]:
        """Environment variables every Trinity process of this run needs."""
        envs = {
            PLUGIN_DIRS_ENV_VAR: os.getenv(PLUGIN_DIRS_ENV_VAR, ""),
            LOG_LEVEL_ENV_VAR: self.log.level,
            LOG_DIR_ENV_VAR: self.log.save_dir,
            LOG_NODE_IP_ENV_VAR: "1" if self.log.group_by_node else "0",
        }
        if self.model.tinker.base_url:
            envs["TINKER_BASE_URL"] = self.model.tinker.base_url
        external = self.model.external_model
        if external.enable:
            for var in (external.base_url_env, external.api_key_env):
                if var:
                    envs[var] = os.getenv(var, "")
        return envs

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]


# --------------------------------------------------------------------------------------
# Loading and saving
# --------------------------------------------------------------------------------------


def _yaml_line(root: Any, loc: tuple[Union[str, int], ...]) -> Optional[int]:
    """The 1-based line of the deepest key of ``loc`` present in the YAML node tree."""
    line: Optional[int] = None
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
                    line = key_node.start_mark.line + 1
                    node = value_node
                    break
            else:
                break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _locate(issues: list[ConfigIssue], source: Optional[str], yaml_root: Any) -> list[ConfigIssue]:
    for issue in issues:
        issue.file = issue.file or source
        if issue.line is None and yaml_root is not None and issue.file == source:
            issue.line = _yaml_line(yaml_root, issue.loc)
    return sorted(issues, key=lambda i: (i.line is None, i.line or 0))


def locate_issues(
    issues: list[ConfigIssue], path: Union[str, os.PathLike[str]]
) -> list[ConfigIssue]:
    """Fill the file and line of issues found after loading (component arguments, registry
    names), from the YAML file at ``path``; sorted by line. Best effort: unreadable -> as is."""
    label = os.fspath(path)
    try:
        root = yaml.compose(Path(label).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except Exception:
        root = None
    for issue in issues:
        if issue.line is None and issue.path:
            # the path is the truth: callers re-root it (``stages[0].``) without touching loc
            issue.loc = _parse_path(issue.path)
    return _locate(issues, label, root)


def _parse_path(path: str) -> tuple[Union[str, int], ...]:
    """``"a.b[2].c"`` -> ``("a", "b", 2, "c")``."""
    loc: list[Union[str, int]] = []
    for part in path.split("."):
        name, *indices = part.split("[")
        if name:
            loc.append(name)
        loc += [int(i.rstrip("]")) for i in indices if i.rstrip("]").isdigit()]
    return tuple(loc)


def _validate(
    data: Any,
    source: Optional[str],
    yaml_root: Any,
    run_checks: bool,
    quiet: bool = False,
) -> Config:
    if not isinstance(data, Mapping):
        raise ConfigError(
            [
                ConfigIssue(
                    path="",
                    message=f"the top level of a config must be a mapping, got "
                    f"{type(data).__name__}",
                    value=data,
                    file=source,
                    kind="type_error",
                )
            ],
            source,
        )
    try:
        config = Config.model_validate(
            dict(data), context={"run_checks": run_checks, "quiet": quiet}
        )
    except ValidationError as exc:
        issues = _issues_from_validation_error(exc, Config)
        raise ConfigError(_locate(issues, source, yaml_root), source) from None
    return config


def _resolve_omegaconf(
    node: Any, loc: tuple[Union[str, int], ...], issues: list[ConfigIssue]
) -> Any:
    from omegaconf import DictConfig, ListConfig

    if isinstance(node, DictConfig):
        out: dict[Any, Any] = {}
        for key in node.keys():
            try:
                value = node[key]
            except Exception as exc:  # interpolation / missing-value errors
                issues.append(_interpolation_issue(node, key, loc + (key,), exc))
                continue
            value = _decode_interpolated(node, key, value, loc + (key,))
            out[key] = _resolve_omegaconf(value, loc + (key,), issues)
        return out
    if isinstance(node, ListConfig):
        items: list[Any] = []
        for index in range(len(node)):
            try:
                value = node[index]
            except Exception as exc:
                issues.append(_interpolation_issue(node, index, loc + (index,), exc))
                continue
            value = _decode_interpolated(node, index, value, loc + (index,))
            items.append(_resolve_omegaconf(value, loc + (index,), issues))
        return items
    return node


def _decode_interpolated(
    container: Any, key: Any, value: Any, loc: tuple[Union[str, int], ...]
) -> Any:
    """``${oc.env:LEN,4096}`` resolves to the string ``"4096"``: where the schema expects a
    number, read it as the YAML scalar it stands for (numbers are strict otherwise)."""
    if not isinstance(value, str):
        return value
    try:
        if not container._get_node(key)._is_interpolation():
            return value
    except Exception:  # pragma: no cover - best effort
        return value
    ann = _annotation_at(Config, loc)
    if _unwrap(ann) not in (int, float):
        return value
    text = value.strip()
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            continue
    return value


def _interpolation_issue(
    container: Any, key: Any, loc: tuple[Union[str, int], ...], exc: Exception
) -> ConfigIssue:
    try:
        raw = container._get_node(key)._value()
    except Exception:  # pragma: no cover - best effort
        raw = None
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if type(exc).__name__ == "MissingMandatoryValue":
        message = "value is marked mandatory ('???') but was not given"
    else:
        message = f"cannot resolve {raw!r}: {text}"
    return ConfigIssue(
        path=_fmt_loc(loc), message=message, value=raw, kind="interpolation", loc=loc
    )


def load_config(
    source: Union[str, os.PathLike[str], Mapping[str, Any]],
    *,
    check: bool = False,
    overrides: Sequence[str] = (),
) -> Config:
    """Load and validate a run config.

    ``source`` is a YAML file path or an already-parsed mapping. ``overrides`` are
    ``KEY=VALUE`` strings as on the command line (OmegaConf's dotlist, as verl / Hydra users
    write them: ``buffer.total_steps=3``, ``trainer.trainer_config.x=[1,2]``,
    ``model.max_model_len=null``, ``a.list[0].key=v``), applied in order on top of the file
    before anything is resolved or validated; a problem with a value an override set names the
    override (:func:`attribute_overrides`) instead of a line of the file. OmegaConf
    interpolations (``${oc.env:VAR,default}``, ``${model.model_path}``, ...) are resolved
    next. With ``check=True`` the run-level checks of :meth:`Config.check_and_update` run as
    well.

    Raises :class:`ConfigError` (a ``ValueError``) listing every problem.
    """
    from omegaconf import OmegaConf

    yaml_root = None
    if isinstance(source, Mapping):
        label = "<dict>"
        try:
            conf: Any = OmegaConf.create(dict(source))
        except Exception:
            # values OmegaConf cannot hold: validate the mapping as it is
            conf = copy.deepcopy(dict(source))
    else:
        path = Path(source)
        label = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(
                [ConfigIssue(path="", message="config file not found", file=label, kind="io")],
                label,
            ) from None
        except OSError as exc:
            raise ConfigError(
                [ConfigIssue(path="", message=f"cannot read file: {exc}", file=label, kind="io")],
                label,
            ) from None
        try:
            conf = OmegaConf.create(text) if text.strip() else OmegaConf.create({})
        except yaml.YAMLError as exc:
            raise ConfigError([_yaml_syntax_issue(exc, label)], label) from None
        except Exception as exc:
            raise ConfigError(
                [ConfigIssue(path="", message=f"cannot parse: {exc}", file=label, kind="syntax")],
                label,
            ) from None
        try:
            yaml_root = yaml.compose(text, Loader=yaml.SafeLoader)
        except Exception:  # pragma: no cover - OmegaConf accepted it, so this is rare
            yaml_root = None
    issues: list[ConfigIssue] = []
    bad_overrides: list[ConfigIssue] = []  # reported with the file's problems
    if overrides:
        conf = _apply_overrides(conf, overrides, bad_overrides)
    data = _resolve_omegaconf(conf, (), issues)
    try:
        if issues:
            raise ConfigError(_locate(issues, label, yaml_root), label)
        config = _validate(data, label, yaml_root, run_checks=check)
    except ConfigError as exc:
        if not overrides:
            raise
        found = attribute_overrides(exc.errors, overrides)
        raise ConfigError(found + bad_overrides, label) from None
    if bad_overrides:
        raise ConfigError(bad_overrides, label)
    return config


# --------------------------------------------------------------------------------------
# Command-line overrides (KEY=VALUE)
# --------------------------------------------------------------------------------------


def override_label(text: str) -> str:
    """Where an issue caused by the override ``text`` comes from, in its messages."""
    return f"override {text!r}"


def parse_override(text: str) -> tuple[str, Any]:
    """``"buffer.total_steps=3"`` -> ``("buffer.total_steps", 3)``: the value read as YAML by
    OmegaConf (``3`` an int, ``1e-5`` a float, ``[1,2]`` a list, ``null`` None, ``'3'`` a
    string; ``${...}`` kept as an interpolation). A leading ``+`` / ``++`` (Hydra's "add" /
    "force add") is accepted and ignored: the schema decides which keys exist.

    Raises ``ValueError`` for text that is not ``KEY=VALUE``.
    """
    from omegaconf import OmegaConf

    key, sep, value = text.partition("=")
    key = key.strip().lstrip("+")
    if not sep or not key or not _OVERRIDE_KEY.match(key):
        raise ValueError(
            f"not a KEY=VALUE override (e.g. buffer.total_steps=3, "
            f"trainer.trainer_config.x=[1,2], model.max_model_len=null): {text!r}"
        )
    try:
        parsed = OmegaConf.from_dotlist([f"value={value}"])
        return key, OmegaConf.to_container(parsed, resolve=False)["value"]
    except Exception as exc:
        raise ValueError(f"cannot read the value of {text!r}: {str(exc).splitlines()[0]}") from None


_OVERRIDE_KEY = re.compile(r"^[A-Za-z_][\w-]*(\[\d+\]|\.[\w-]+)*$")


def _override_loc(key: str) -> tuple[str, ...]:
    """The key's path as strings (``a.b[0].c`` and ``a.b.0.c`` alike), to match issues."""
    return tuple(str(part) for part in _parse_path(key))


def _apply_overrides(conf: Any, overrides: Sequence[str], issues: list[ConfigIssue]) -> Any:
    """``conf`` (an OmegaConf DictConfig, or a plain mapping OmegaConf could not hold) with
    every override applied in order; a malformed override becomes an issue."""
    from omegaconf import DictConfig, OmegaConf

    for text in overrides:
        try:
            key, value = parse_override(text)
            if isinstance(conf, DictConfig):
                _check_indices(conf, _parse_path(key))
                OmegaConf.update(conf, key, value, merge=True)
            else:
                _set_by_path(conf, _parse_path(key), value)
        except Exception as exc:
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            issues.append(
                ConfigIssue(
                    path=text.partition("=")[0].strip().lstrip("+"),
                    message=message,
                    value=text,
                    file=override_label(text),
                    kind="override",
                )
            )
    return conf


def _check_indices(conf: Any, loc: tuple[Union[str, int], ...]) -> None:
    """An index (``[2]``) of an override's key must name an item of an existing list
    (OmegaConf would make a mapping with key ``"2"`` where there is no list)."""
    from omegaconf import DictConfig, ListConfig

    node: Any = conf
    for depth, part in enumerate(loc):
        if isinstance(part, int):
            where = _fmt_loc(loc[:depth])
            if not isinstance(node, ListConfig):
                raise ValueError(f"{where} is not a list in the config, so [{part}] names nothing")
            if part >= len(node):
                raise ValueError(
                    f"{where} has {len(node)} item(s), so [{part}] names nothing "
                    "(an override changes an item; it cannot add one)"
                )
        elif not isinstance(node, (DictConfig, ListConfig)):
            node = None  # a new or scalar node: keys below it are created ...
        if node is not None:
            try:
                node = node._get_node(part)
            except Exception:
                return
        if node is None and any(isinstance(p, int) for p in loc[depth + 1 :]):
            # ... but an index below it names nothing
            index = next(i for i, p in enumerate(loc) if i > depth and isinstance(p, int))
            raise ValueError(
                f"{_fmt_loc(loc[:index])} is not a list in the config, so "
                f"[{loc[index]}] names nothing"
            )
        if node is None:
            return


def _set_by_path(data: Any, loc: tuple[Union[str, int], ...], value: Any) -> None:
    node = data
    for part in loc[:-1]:
        if isinstance(node, list):
            node = node[int(part)]
        else:
            if not isinstance(node.get(part), (dict, list)):
                node[part] = {}
            node = node[part]
    if isinstance(node, list):
        node[int(loc[-1])] = value
    else:
        node[loc[-1]] = value


def attribute_overrides(issues: list[ConfigIssue], overrides: Sequence[str]) -> list[ConfigIssue]:
    """Name the override as the source of each issue about a value it set (its key or a key
    below it; the last such override wins), instead of a line of the file. In place; returns
    ``issues``."""
    keyed: list[tuple[tuple[str, ...], str]] = []
    for text in overrides:
        try:
            key, _ = parse_override(text)
        except ValueError:
            continue
        keyed.append((_override_loc(key), text))
    for issue in issues:
        if issue.kind == "override":
            continue
        loc = tuple(str(part) for part in (issue.loc or _parse_path(issue.path)))
        for key_loc, text in reversed(keyed):
            if key_loc and loc[: len(key_loc)] == key_loc:
                issue.file, issue.line = override_label(text), None
                break
    return issues


def _yaml_syntax_issue(exc: yaml.YAMLError, label: str) -> ConfigIssue:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    message = f"YAML syntax error: {problem}"
    if context:
        message += f" ({context})"
    line = None
    if mark is not None:
        line = mark.line + 1
        message += f" at line {line}, column {mark.column + 1}"
    return ConfigIssue(path="", message=message, file=label, line=line, kind="syntax")


def _escape_interpolations(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("${", "\\${")
    if isinstance(value, list):
        return [_escape_interpolations(v) for v in value]
    if isinstance(value, dict):
        return {k: _escape_interpolations(v) for k, v in value.items()}
    return value


def save_config(config: Config, path: Union[str, os.PathLike[str]]) -> None:
    """Write ``config`` as YAML; ``load_config(path)`` returns an equal config.

    Literal ``${`` in strings is escaped so it is not read back as an interpolation.
    """
    data = _escape_interpolations(config.to_dict())
    target = Path(path)
    if target.parent and not target.parent.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8") as f:
        yaml.safe_dump(data, f, sort_keys=False, allow_unicode=True)
