"""A config stays a value: derived values go through one config API (``_set_derived``), never
through a pydantic model's ``__dict__``, and stay out of ``model_fields_set`` (what the user
wrote is what is saved and what stages and ``check_and_update`` start from)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any, Optional

import pytest
from pydantic import BaseModel

from trinity.common import config as config_module
from trinity.common.config import Config, load_config
from trinity.common.config._base import _Section
from trinity.common.config._utils import _intent_dump, _set_derived

PACKAGES = Path(__file__).resolve().parents[2]
DATA_DIR = str(Path(__file__).resolve().parent)
# a local "model": a directory holding config.json (run-level checks refuse a missing one)
MODEL_DIR = str(Path(__file__).resolve().parent / "data" / "model")

# Writes into ``__dict__`` are allowed only on objects that are not pydantic models. Each site
# below was read: the class whose ``__dict__`` it writes is a plain class. (path under
# packages/, enclosing class) -> (module, class) to double-check where it can be imported.
NOT_PYDANTIC: dict[tuple[str, Optional[str]], tuple[str, str]] = {
    # a Workflow (a plain class) keeps the rollout arguments a subclass's reset sets
    ("trinity-workflows/src/trinity/workflows/single_turn.py", "SimpleWorkflow"): (
        "trinity.workflows.single_turn",
        "SimpleWorkflow",
    ),
}
# Pydantic models still written through ``__dict__``: being converted (the launcher's
# ``with_queue_in_process`` is being removed); to be emptied, never to grow. None in core.
PENDING_CONVERSION: set[str] = set()

_MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


@pytest.fixture(autouse=True)
def _cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module._utils, "cuda_is_available", lambda: True)


def _is_dict_attr(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "__dict__"


def _dict_writes(source: str) -> list[tuple[int, Optional[str]]]:
    """(line, enclosing class) of every write into an object's ``__dict__``: an assignment
    or ``del`` of ``x.__dict__[...]`` and a mutating call (``x.__dict__.update(...)``, ...).
    Reads (``x.__dict__[k]``, ``x.__dict__.get(k)``) are not writes."""
    found: list[tuple[int, Optional[str]]] = []

    def visit(node: ast.AST, cls: Optional[str]) -> None:
        if isinstance(node, ast.ClassDef):
            cls = node.name
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Subscript) and _is_dict_attr(sub.value):
                    found.append((sub.lineno, cls))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MUTATORS
            and _is_dict_attr(node.func.value)
        ):
            found.append((node.lineno, cls))
        for child in ast.iter_child_nodes(node):
            visit(child, cls)

    visit(ast.parse(source), None)
    return sorted(found, key=lambda item: item[0])


def test_the_scan_finds_writes_only() -> None:
    source = (
        "class A:\n"
        "    def f(self, m):\n"
        "        m.__dict__['x'] = 1\n"
        "        self.__dict__.update(y=2)\n"
        "        del m.__dict__['x']\n"
        "        m.__dict__['n'] += 1\n"
        "v = k.__dict__['name']\n"
        "w = self.__dict__.get('_rollout_args')\n"
        "m.__dict__.setdefault('z', 3)\n"
    )
    assert _dict_writes(source) == [(3, "A"), (4, "A"), (5, "A"), (6, "A"), (9, None)]


def test_no_pydantic_model_is_written_through_its_dict() -> None:
    files = sorted(PACKAGES.glob("*/src/**/*.py"))
    assert len(files) > 50, f"no sources found under {PACKAGES}"
    offenders = []
    for path in files:
        rel = path.relative_to(PACKAGES).as_posix()
        if rel in PENDING_CONVERSION:
            continue
        for line, cls in _dict_writes(path.read_text(encoding="utf-8")):
            if (rel, cls) not in NOT_PYDANTIC:
                offenders.append(f"{rel}:{line} (in {cls or 'a function'})")
    assert not offenders, (
        "a write into __dict__: for a pydantic model (a config section) use "
        "trinity.common.config._utils._set_derived, or plain assignment for a user value; "
        "for a plain object, add the site to NOT_PYDANTIC after reading it:\n"
        + "\n".join(offenders)
    )


@pytest.mark.parametrize("site", sorted(NOT_PYDANTIC, key=str))
def test_allowed_dict_writes_are_not_on_pydantic_models(site: tuple[str, Optional[str]]) -> None:
    rel, cls = site
    source = (PACKAGES / rel).read_text(encoding="utf-8")
    assert any(found_cls == cls for _, found_cls in _dict_writes(source)), "stale entry"
    module_name, class_name = NOT_PYDANTIC[site]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        pytest.skip(f"{module_name} is not installed in this environment")
    assert not issubclass(getattr(module, class_name), BaseModel)


# ------------------------------------------------------------------------ the derived-value API


def _sections(model: type[BaseModel], seen: set[type]) -> None:
    if model in seen:
        return
    seen.add(model)
    for field in model.model_fields.values():
        stack: list[Any] = [field.annotation]
        while stack:
            ann = stack.pop()
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                _sections(ann, seen)
            stack.extend(getattr(ann, "__args__", ()) or ())


def test_sections_store_assigned_values_as_given() -> None:
    # what _set_derived relies on: assignment neither re-validates nor converts
    seen: set[type] = set()
    _sections(Config, seen)
    assert len(seen) > 10
    for model in seen:
        assert issubclass(model, _Section), model
        assert not model.model_config.get("validate_assignment"), model
        assert not model.model_config.get("frozen"), model


def test_model_fields_set_is_the_live_set() -> None:
    config = Config()
    assert config.model_fields_set is config.model_fields_set
    config.model_fields_set.add("name")
    assert "name" in config.model_fields_set


def test_derived_values_are_not_user_set() -> None:
    config = load_config({"name": "x", "model": {"model_path": "/m", "max_model_len": 1024}})
    assert config.ray_namespace == "Trinity-RFT/x"
    assert "ray_namespace" not in config.model_fields_set
    assert config.model.critic_model_path == "/m"
    assert config.model.max_prompt_tokens == 512
    assert {"model_path", "max_model_len"} == config.model.model_fields_set
    assert config.explorer.mode == "both"
    assert "mode" not in config.explorer.model_fields_set
    intent = _intent_dump(config)
    assert intent["name"] == "x" and "ray_namespace" not in intent
    assert intent["model"] == {"model_path": "/m", "max_model_len": 1024}


def test_a_rule_adjusting_a_user_value_keeps_it_user_set() -> None:
    config = load_config({"buffer": {"trainer_input": {"experience_buffer": {"name": "e"}}}})
    exp = config.buffer.trainer_input.experience_buffer
    assert exp.name == "e" and exp.batch_size == config.buffer.train_batch_size
    assert exp.model_fields_set == {"name"}
    config = load_config(
        {"buffer": {"trainer_input": {"experience_buffer": {"storage_type": "file"}}}}
    )
    exp = config.buffer.trainer_input.experience_buffer
    assert exp.storage_type == "queue"  # adjusted (both cannot share a file) ...
    assert "storage_type" in exp.model_fields_set  # ... and still what the user set


def test_set_derived_stores_the_value_as_is() -> None:
    config = Config()
    value = ["not", "a", "string"]  # no validation on the way in
    _set_derived(config, "ray_namespace", value)
    assert config.ray_namespace is value
    assert "ray_namespace" not in config.model_fields_set
    config.name = "y"  # a program's assignment is a user value
    _set_derived(config, "name", "z")
    assert config.name == "z" and "name" in config.model_fields_set
    with pytest.raises(ValueError):
        _set_derived(config, "no_such_field", 1)  # extra="forbid": only fields


def test_check_and_update_updates_in_place_and_keeps_the_intent(tmp_path: Path) -> None:
    data = {
        "checkpoint_root_dir": str(tmp_path),
        "model": {"model_path": MODEL_DIR, "max_model_len": 2048},
        "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": DATA_DIR}}},
    }
    config = load_config(data)
    buffer_before = config.buffer
    assert config.check_and_update() is config
    fresh = load_config(data, check=True)
    assert config == fresh
    assert config.model_fields_set == fresh.model_fields_set
    assert config.model_fields_set == {"checkpoint_root_dir", "model", "buffer"}
    assert config.buffer is not buffer_before  # the checked sections replace the old ones
    assert "checkpoint_job_dir" not in config.model_fields_set
    assert config.checkpoint_job_dir == str(tmp_path / "Trinity-RFT" / "rft")
    assert _intent_dump(config) == _intent_dump(fresh)
    # and again: the intent is unchanged, so is the result
    assert config.check_and_update() is config
    assert config == fresh and config.model_fields_set == fresh.model_fields_set
