"""Every field of the config schema reaches code, is refused, or is a documented no-op.

The project's rule: a setting that reaches no code is a defect -- a user who writes it believes
the run does something it does not. So every field, walked recursively through the schema
(``trainer.grad_clip``, ``buffer.explorer_input.taskset.format.prompt_key``; items of a list
of sections as ``[]``, of a mapping of sections as ``.<name>``), is in exactly one class of
``config_field_coverage.yaml`` beside this file:

* ``read``: code outside the config package reads it (``reader``, a file under
  ``packages/*/src``; the field's name must be an identifier, attribute, keyword or string
  there, so a removed reader is caught) and the named ``tests`` (``file::function``, checked
  to exist, not run) check its effect. ``via`` names what the reader uses instead where the
  config derives it from the field (``checkpoint_root_dir`` -> ``checkpoint_job_dir``): then a
  function of the config package must mention both.
* ``refused``: a minimal config setting it to ``value`` (plus ``also``) fails validation with an
  issue at the field (or at ``at``, the list that holds it) saying "not supported yet".
* ``ignored``: accepted for Trinity-RFT configs, and ``value`` gives a load warning naming the
  field; the table in docs/compat.md lists it.

A model used at several places (task sets and buffers share ``StorageConfig``) is listed once,
under its first path; the docs table says where else it appears. Sections of a stage
(``stages[].trainer...``) are the top-level sections again. docs/compat.md holds the table
between ``<!-- fields:begin -->`` and ``<!-- fields:end -->``; regenerate it with::

    python tests/test_config_field_coverage.py --write-docs
"""

from __future__ import annotations

import ast
import copy
import functools
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import pytest
import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from trinity.common.config import Config, ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
TABLE_FILE = Path(__file__).with_name("config_field_coverage.yaml")
COMPAT_DOC = ROOT / "docs" / "compat.md"
CONFIG_PACKAGE = ROOT / "packages" / "trinity-core" / "src" / "trinity" / "common" / "config"
BEGIN, END = "<!-- fields:begin -->", "<!-- fields:end -->"
CLASSES = ("read", "refused", "ignored")
#: top-level sections walked last, so a shared model's first path is a buffer / explorer one
LATE = ("data_processor", "stages")


# ------------------------------------------------------------------ the schema's fields


@dataclass(frozen=True)
class SchemaField:
    """One field of one section model, and every path where that model puts it."""

    owner: type[BaseModel]
    attr: str
    paths: tuple[str, ...]

    @property
    def path(self) -> str:
        return self.paths[0]

    @property
    def default(self) -> Any:
        info = self.owner.model_fields[self.attr]
        if info.default_factory is not None:
            return info.default_factory()
        return None if info.default is PydanticUndefined else info.default


def _models_in(annotation: Any) -> list[tuple[type[BaseModel], str]]:
    """The section models inside ``annotation``, each with the path piece that reaches an item
    (``""`` a section, ``"[]"`` a list item, ``".<name>"`` a mapping value)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, "")]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, tuple, set):
        return [(m, "[]" + s) for a in args for m, s in _models_in(a)]
    if origin is dict and len(args) == 2:
        return [(m, ".<name>" + s) for m, s in _models_in(args[1])]
    return [found for a in args for found in _models_in(a)]


def _declaring(model: type[BaseModel], attr: str) -> type[BaseModel]:
    """The most basic model of ``model``'s bases that has ``attr`` (``TasksetConfig`` and
    ``ExperienceBufferConfig`` share ``StorageConfig``'s fields)."""
    found = model
    for base in model.__mro__:
        if isinstance(base, type) and issubclass(base, BaseModel) and attr in base.model_fields:
            found = base
    return found


def _is_container(model: type[BaseModel], attr: str) -> bool:
    """A field holding sections that may be absent (``None``, ``[]``, ``{}``): whether it is
    written at all is a setting. A stage's sections are the top level's, not settings."""
    info = model.model_fields[attr]
    if model.__name__ == "StageConfig":
        return False
    return info.default is None or info.default_factory in (list, dict)


@functools.cache
def schema_fields() -> dict[str, SchemaField]:
    """Every field of the schema by its first path, leaves and section containers alike."""
    found: dict[tuple[type[BaseModel], str], list[str]] = {}

    def walk(model: type[BaseModel], prefix: str) -> None:
        names = list(model.model_fields)
        if model is Config:
            names = [n for n in names if n not in LATE] + list(LATE)
        for attr in names:
            path = prefix + attr
            inner = _models_in(model.model_fields[attr].annotation)
            if not inner or _is_container(model, attr):
                found.setdefault((_declaring(model, attr), attr), []).append(path)
            for sub, piece in inner:
                walk(sub, path + piece + ".")

    walk(Config, "")
    return {
        paths[0]: SchemaField(owner, attr, tuple(paths)) for (owner, attr), paths in found.items()
    }


@functools.cache
def table() -> dict[str, dict[str, dict[str, Any]]]:
    data = yaml.safe_load(TABLE_FILE.read_text(encoding="utf-8"))
    return {cls: dict(data.get(cls) or {}) for cls in CLASSES}


def entries(cls: str) -> list[str]:
    return sorted(table()[cls])


# ------------------------------------------------------------------ configs setting a field


def concrete(path: str) -> str:
    """A path to one real place: the first list item, a mapping key ``x``."""
    return path.replace("[]", "[0]").replace(".<name>", ".x")


def _loc(path: str) -> list[Union[str, int]]:
    loc: list[Union[str, int]] = []
    for part in concrete(path).split("."):
        name, *indices = part.split("[")
        loc.append(name)
        loc += [int(i.rstrip("]")) for i in indices]
    return loc


def _put(data: dict[str, Any], path: str, value: Any) -> None:
    loc = _loc(path)
    node: Any = data
    for part, after in zip(loc, loc[1:], strict=False):
        empty: Any = [] if isinstance(after, int) else {}
        if isinstance(part, int):
            while len(node) <= part:
                node.append({})
            node = node[part]
        else:
            node = node.setdefault(part, empty)
    if isinstance(loc[-1], int):
        while len(node) <= loc[-1]:
            node.append({})
        node[loc[-1]] = value
    else:
        node[loc[-1]] = value


def config_setting(path: str, value: Any, also: dict[str, Any]) -> dict[str, Any]:
    """The smallest config setting ``path`` to ``value``, with ``also``'s paths set first (a
    list item's required keys, the section a field only matters in)."""
    data: dict[str, Any] = {}
    for other, other_value in also.items():
        _put(data, other, copy.deepcopy(other_value))
    _put(data, path, copy.deepcopy(value))
    return data


# ------------------------------------------------------------------ what source mentions


def _code_names(tree: ast.AST) -> set[str]:
    """Names, attributes, keywords, parameters and whole string constants under ``tree``
    (comments and docstrings mention names without reading them: left out)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, (ast.keyword, ast.arg)) and node.arg:
            found.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return found


@functools.cache
def identifiers(path: Path) -> frozenset[str]:
    """What a module's code mentions (:func:`_code_names`)."""
    return frozenset(_code_names(ast.parse(path.read_text(encoding="utf-8"))))


def config_functions_mentioning(*names: str) -> list[str]:
    """Functions of the config package whose code mentions every one of ``names``."""
    hits = []
    for module in sorted(CONFIG_PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if set(names) <= _code_names(node) | {node.name}:
                    hits.append(f"{module.name}::{node.name}")
    return hits


def node_exists(node_id: str) -> bool:
    """``file::function`` or ``file::Class::method`` names a test defined in that file."""
    file, *names = node_id.split("::")
    path = ROOT / file
    if not names or not path.is_file():
        return False
    body: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    for name in names:
        name = name.split("[")[0]  # a parametrized id
        match = [
            n
            for n in body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.name == name
        ]
        if not match:
            return False
        body = match[0].body if isinstance(match[0], ast.ClassDef) else []
    return True


# ------------------------------------------------------------------ the tests


def test_every_field_is_in_exactly_one_class() -> None:
    fields = set(schema_fields())
    listed = [path for cls in CLASSES for path in table()[cls]]
    twice = sorted({p for p in listed if listed.count(p) > 1})
    assert not twice, f"fields in more than one class: {twice}"
    missing = sorted(fields - set(listed))
    assert not missing, (
        f"{len(missing)} field(s) in no class of {TABLE_FILE.name}: {missing}. Each must be "
        "read by code a test checks, refused as 'not supported yet', or ignored with a warning"
    )
    stale = sorted(set(listed) - fields)
    assert not stale, f"{TABLE_FILE.name} lists paths the schema does not have: {stale}"


@pytest.mark.parametrize("path", entries("read"))
def test_a_read_field_has_a_reader_and_tests_that_check_it(path: str) -> None:
    field, entry = schema_fields().get(path), table()["read"][path]
    assert field is not None, f"{path} is not a field (see test_every_field_...)"
    reader = ROOT / entry["reader"]
    src_parts = reader.relative_to(ROOT).parts
    assert src_parts[0] == "packages" and src_parts[2] == "src", f"{reader} is not package source"
    assert CONFIG_PACKAGE not in reader.parents, f"{reader} is the config package itself"
    assert reader.is_file(), f"{path}: reader {entry['reader']} does not exist"
    name = entry.get("via", field.attr)
    assert name in identifiers(reader), (
        f"{path}: {entry['reader']} does not mention {name!r} in its code; find the code that "
        "reads it now, or refuse the field"
    )
    if "via" in entry:
        assert config_functions_mentioning(field.attr, name), (
            f"{path}: no function of the config package derives {name!r} from {field.attr!r}"
        )
    assert entry.get("tests"), f"{path}: name the test(s) that check its effect"
    for node in entry["tests"]:
        assert node_exists(node), f"{path}: test {node} does not exist"


@pytest.mark.parametrize("path", entries("refused"))
def test_a_refused_field_is_refused_as_not_supported_yet(path: str) -> None:
    field, entry = schema_fields()[path], table()["refused"][path]
    assert entry["value"] != field.default, f"{path}: refuse a value other than the default"
    data = config_setting(path, entry["value"], entry.get("also") or {})
    with pytest.raises(ConfigError) as info:
        load_config(data)
    where = entry.get("at", concrete(path))
    messages = [issue.message for issue in info.value.errors if issue.path == where]
    assert any("not supported yet" in m for m in messages), (
        f"{path}: no 'not supported yet' at {where}: {[str(i) for i in info.value.errors]}"
    )


@pytest.mark.parametrize("path", entries("ignored"))
def test_an_ignored_field_is_accepted_with_a_warning_naming_it(path: str) -> None:
    entry = table()["ignored"][path]
    config = load_config(config_setting(path, entry["value"], entry.get("also") or {}))
    assert any(concrete(path) in warning for warning in config.warnings), (
        f"{path}: no load warning names it; warnings: {config.warnings}"
    )


# ------------------------------------------------------------------ docs/compat.md


def _short(path: str) -> str:
    """``packages/trinity-x/src/trinity/y.py`` -> ``y.py``; test paths keep their package."""
    return path.replace("packages/", "").split("/src/trinity/")[-1]


def _where(cls: str, entry: dict[str, Any]) -> str:
    if cls == "read":
        via = f" (as `{entry['via']}`)" if "via" in entry else ""
        tests = ", ".join(f"`{_short(t)}`" for t in entry["tests"])
        return f"`{_short(entry['reader'])}`{via}; {tests}"
    return entry["why"]


def _elsewhere() -> list[str]:
    """Lines naming the other places of sections used at several places."""
    places: dict[str, set[str]] = {}
    for field in schema_fields().values():
        for path in field.paths[1:]:
            if not path.startswith("stages[]."):
                places.setdefault(field.owner.__name__, set()).add(path.rsplit(".", 1)[0])
    lines = []
    for owner, prefixes in sorted(places.items()):
        first = next(f.path for f in schema_fields().values() if f.owner.__name__ == owner)
        shown = ", ".join(f"`{p}`" for p in sorted(prefixes - {first.rsplit(".", 1)[0]}))
        if shown:
            lines.append(f"- `{owner}` (listed under `{first.rsplit('.', 1)[0]}`): also {shown}")
    return lines


def docs_table() -> str:
    """The section of docs/compat.md between the markers."""
    counts = {cls: len(table()[cls]) for cls in CLASSES}
    rows = [
        f"{len(schema_fields())} fields: {counts['read']} read, {counts['refused']} refused "
        f'("not supported yet"), {counts["ignored"]} ignored with a warning. Generated by '
        "`python tests/test_config_field_coverage.py --write-docs` from "
        "`tests/config_field_coverage.yaml`.",
        "",
        "| field | class | where checked |",
        "|---|---|---|",
    ]
    for path in schema_fields():
        cls = next(c for c in CLASSES if path in table()[c])
        cell = _where(cls, table()[cls][path]).replace("|", "\\|")
        rows.append(f"| `{path}` | {cls} | {cell} |")
    rows += ["", "Sections used at more than one place are listed once; the rows apply to:", ""]
    rows += _elsewhere()
    rows += ["- every section again under `stages[]`, a stage's partial override"]
    return "\n".join(rows)


def _replace_table(text: str, body: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{body}\n{END}{tail}"


def test_the_compat_doc_field_table_is_current() -> None:
    text = COMPAT_DOC.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"docs/compat.md lacks {BEGIN} ... {END}"
    assert _replace_table(text, docs_table()) == text, (
        "docs/compat.md's field table is out of date: run "
        "python tests/test_config_field_coverage.py --write-docs"
    )


if __name__ == "__main__":  # regenerate the docs table
    if sys.argv[1:] != ["--write-docs"]:
        sys.exit("usage: python tests/test_config_field_coverage.py --write-docs")
    COMPAT_DOC.write_text(
        _replace_table(COMPAT_DOC.read_text(encoding="utf-8"), docs_table()), encoding="utf-8"
    )
