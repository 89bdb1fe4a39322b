"""The Studio's plumbing that needs no Streamlit: dotted paths, validation, YAML, metrics.

Kept apart from the page so it is tested directly and reused by ``trinity studio``'s helpers.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import yaml

from trinity.common.config import Config, ConfigIssue

#: Top-level sections in the order a generated YAML lists them (others follow, sorted).
TOP_LEVEL_ORDER = (
    "mode",
    "project",
    "group",
    "name",
    "checkpoint_root_dir",
    "continue_from_checkpoint",
    "algorithm",
    "model",
    "cluster",
    "buffer",
    "explorer",
    "synchronizer",
    "trainer",
    "data_processor",
    "monitor",
    "log",
    "service",
    "stages",
)

_MISSING = object()


# ---------------------------------------------------------------------- dotted paths
def normalize_path(path: str) -> str:
    """``buffer.eval_tasksets[0].path`` -> ``buffer.eval_tasksets.0.path``."""
    return re.sub(r"\[(\d+)\]", r".\1", path)


def _parts(path: str) -> list[str]:
    return [p for p in normalize_path(path).split(".") if p]


def get_path(data: Mapping[str, Any], path: str, default: Any = None) -> Any:
    node: Any = data
    for part in _parts(path):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return default
    return node


def has_path(data: Mapping[str, Any], path: str) -> bool:
    return get_path(data, path, _MISSING) is not _MISSING


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    parts = _parts(path)
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def pop_path(data: dict[str, Any], path: str) -> Any:
    """Remove ``path`` (and the mappings it leaves empty); return the removed value or None."""
    parts = _parts(path)
    chain = [data]
    node: Any = data
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return None
        chain.append(node)
    value = node.pop(parts[-1], None)
    for parent, part in zip(reversed(chain[:-1]), reversed(parts[:-1]), strict=False):
        if parent.get(part) == {}:
            del parent[part]
        else:
            break
    return value


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` on top of ``base``, recursing into mappings (lists are replaced)."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def ordered(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with top-level keys in :data:`TOP_LEVEL_ORDER`."""
    keys = [k for k in TOP_LEVEL_ORDER if k in data]
    keys += sorted(k for k in data if k not in TOP_LEVEL_ORDER)
    return {k: data[k] for k in keys}


def to_yaml(data: Mapping[str, Any]) -> str:
    return yaml.safe_dump(ordered(data), sort_keys=False, allow_unicode=True)


def schema_defaults() -> dict[str, Any]:
    """The schema's own default of every field (for keys a loaded YAML leaves out).

    Built without the cross-field rules, so derived values (an experience buffer the
    launcher would create, ...) are not written into a config that did not ask for them.
    """
    return Config.model_construct().model_dump(mode="json")


# ---------------------------------------------------------------------- loading
class YAMLLoadError(ValueError):
    """A YAML text given to the page is not a config mapping."""


def parse_yaml(text: str, source: str = "the YAML") -> dict[str, Any]:
    """Parse a config YAML as written (interpolations such as ``${oc.env:X}`` stay as text)."""
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise YAMLLoadError(f"{source}: YAML syntax error{where}: {problem}") from None
    if not isinstance(data, dict):
        raise YAMLLoadError(
            f"{source}: the top level of a config must be a mapping, got {type(data).__name__}"
        )
    return data


# ---------------------------------------------------------------------- validation
@dataclass
class ValidationReport:
    """The outcome of validating a generated config."""

    issues: list[ConfigIssue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    config: Optional[Config] = None

    @property
    def ok(self) -> bool:
        return not self.issues


def validate(data: Mapping[str, Any]) -> ValidationReport:
    """Validate ``data`` exactly as ``trinity-launch`` validates a file (no run is started).

    One rule more, the Studio's own (as Trinity-RFT's Studio asks too): a config written here
    names its ``checkpoint_root_dir``. A run reads an empty one as the directory it is started
    in, which a page that writes a config for later cannot know.
    """
    from trinity.launcher.validation import config_issues, validate_config

    studio: list[ConfigIssue] = []
    root = data.get("checkpoint_root_dir")
    if not str(root or "").strip():
        studio.append(
            ConfigIssue(
                path="checkpoint_root_dir",
                message="checkpoint_root_dir: required here (checkpoints, logs and buffers are "
                "written under it; empty, a run writes under the directory it is started in)",
                value=root,
                kind="missing",
                loc=("checkpoint_root_dir",),
            )
        )
    try:
        config, warnings = validate_config(copy.deepcopy(dict(data)))
    except Exception as exc:  # every failure becomes located issues
        return ValidationReport(issues=studio + config_issues(exc))
    if studio:
        return ValidationReport(issues=studio)
    return ValidationReport(warnings=list(config.warnings) + list(warnings), config=config)


def key_for_path(path: str, paths: Mapping[str, str], keys: Iterable[str]) -> Optional[str]:
    """The page key whose YAML path best matches an issue's ``path``.

    ``paths`` maps keys to dotted paths; only ``keys`` (those drawn on the page) are
    candidates. An exact match wins; else the key whose path is the longest prefix of the
    issue's path (an error deep inside a field), else a key whose path lies under the issue's
    path (an error about a whole section, e.g. a missing task set).
    """
    path = normalize_path(path)
    if not path:
        return None
    candidates = {k: normalize_path(paths[k]) for k in keys if k in paths}
    for key, p in candidates.items():
        if p == path:
            return key
    prefix = [(len(p), k) for k, p in candidates.items() if path.startswith(p + ".")]
    if prefix:
        return max(prefix)[1]
    under = sorted((len(p), k) for k, p in candidates.items() if p.startswith(path + "."))
    return under[0][1] if under else None


# ---------------------------------------------------------------------- metrics
# (shared with ``trinity plot``)
from trinity.launcher.plot import METRICS_FILE, read_metrics, reward_curve  # noqa: E402

__all__ = [
    "METRICS_FILE",
    "ValidationReport",
    "YAMLLoadError",
    "deep_merge",
    "get_path",
    "has_path",
    "key_for_path",
    "normalize_path",
    "ordered",
    "parse_yaml",
    "pop_path",
    "read_metrics",
    "reward_curve",
    "schema_defaults",
    "set_path",
    "to_yaml",
    "validate",
]
