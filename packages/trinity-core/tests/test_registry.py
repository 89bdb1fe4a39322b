"""Registry: decorator registration, duplicates, unknown names, entry points of installed dists."""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from trinity.utils.registry import (
    DuplicateModuleError,
    EntryPointLoadError,
    Registry,
    UnknownModuleError,
)


def _registry() -> Registry:
    # A group name nobody else uses, so only the dists a test installs are seen.
    name = f"test_{uuid.uuid4().hex[:8]}"
    return Registry(name)


def _install_dist(root: Path, dist: str, group: str, entries: dict[str, str]) -> None:
    """Write a real dist-info directory that importlib.metadata discovers on sys.path."""
    info = root / f"{dist}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    lines = [f"[{group}]"] + [f"{k} = {v}" for k, v in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


def test_register_get_list_and_decorator_returns_class():
    reg = _registry()

    @reg.register_module("b_thing")
    class B:
        pass

    class A:
        pass

    assert reg.register_module("a_thing", A) is A
    assert reg.get("b_thing") is B
    assert reg["a_thing"] is A
    assert reg.list() == ["a_thing", "b_thing"]
    assert "a_thing" in reg and "zzz" not in reg and 3 not in reg
    assert len(reg) == 2


def test_duplicate_names_are_refused_but_same_object_is_idempotent():
    reg = _registry()

    class First:
        pass

    class Second:
        pass

    reg.register_module("x", First)
    reg.register_module("x", First)  # same object again: fine
    with pytest.raises(DuplicateModuleError, match=r"already taken by .*First"):
        reg.register_module("x", Second)
    assert reg.get("x") is First
    reg.register_module("x", Second, force=True)
    assert reg.get("x") is Second


def test_unknown_name_lists_known_names_and_closest_match():
    reg = _registry()
    for name in ("math_workflow", "simple_workflow", "countdown_workflow"):
        reg.register_module(name, type(name, (), {}))
    with pytest.raises(UnknownModuleError) as info:
        reg.get("math_workflw")
    err = info.value
    assert isinstance(err, KeyError)
    assert err.suggestion == "math_workflow"
    text = str(err)
    assert "'math_workflw'" in text and "Did you mean 'math_workflow'?" in text
    assert "countdown_workflow, math_workflow, simple_workflow" in text


def test_unknown_name_in_empty_registry_says_nothing_is_registered():
    with pytest.raises(UnknownModuleError, match="Nothing is registered"):
        _registry().get("anything")


def test_name_must_be_a_string():
    with pytest.raises(TypeError, match="non-empty string"):
        _registry().register_module(lambda: None)  # type: ignore[arg-type]


def test_entry_point_of_an_installed_distribution_is_found_without_import(tmp_path, monkeypatch):
    reg = _registry()
    mod = f"plug_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{mod}.py").write_text(
        textwrap.dedent(
            """
            class Decorated: pass
            class Plain: pass
            """
        )
    )
    _install_dist(
        tmp_path,
        "trinity_fake_dist",
        reg.entry_point_group,
        {"decorated": f"{mod}:Decorated", "plain": f"{mod}:Plain"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg.refresh()

    assert mod not in sys.modules
    assert reg.list() == ["decorated", "plain"]  # advertised, not imported yet
    assert "plain" in reg
    assert mod not in sys.modules
    plain = reg.get("plain")
    assert plain.__name__ == "Plain" and plain.__module__ == mod
    assert reg.modules["plain"] is plain
    assert reg.find_by_attr("Decorated").__name__ == "Decorated"


def test_entry_point_whose_module_registers_itself(tmp_path, monkeypatch):
    reg = _registry()
    mod = f"selfreg_{uuid.uuid4().hex[:8]}"
    holder = f"holder_{uuid.uuid4().hex[:8]}"
    # The registry object must be importable by the plugin module, as WORKFLOWS is.
    sys.modules[holder] = type(sys)(holder)
    sys.modules[holder].REG = reg
    (tmp_path / f"{mod}.py").write_text(
        f"from {holder} import REG\n\n@REG.register_module('selfreg')\nclass SelfReg: pass\n"
    )
    _install_dist(tmp_path, "trinity_selfreg", reg.entry_point_group, {"selfreg": f"{mod}:SelfReg"})
    monkeypatch.syspath_prepend(str(tmp_path))
    reg.refresh()
    try:
        cls = reg.get("selfreg")
        assert cls.__name__ == "SelfReg"
        assert reg.get("selfreg") is cls
    finally:
        del sys.modules[holder]


def test_broken_entry_point_names_the_package(tmp_path, monkeypatch):
    reg = _registry()
    mod = f"broken_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{mod}.py").write_text("raise RuntimeError('boom at import')\n")
    _install_dist(tmp_path, "trinity_broken_dist", reg.entry_point_group, {"bad": f"{mod}:X"})
    monkeypatch.syspath_prepend(str(tmp_path))
    reg.refresh()
    with pytest.raises(EntryPointLoadError) as info:
        reg.get("bad")
    text = str(info.value)
    assert "trinity_broken_dist" in text and f"{mod}:X" in text and "boom at import" in text


def test_same_name_from_two_distributions_is_refused(tmp_path, monkeypatch):
    reg = _registry()
    mod = f"twice_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{mod}.py").write_text("class A: pass\nclass B: pass\n")
    _install_dist(tmp_path / "one", "dist_one", reg.entry_point_group, {"dup": f"{mod}:A"})
    _install_dist(tmp_path / "two", "dist_two", reg.entry_point_group, {"dup": f"{mod}:B"})
    for p in (tmp_path, tmp_path / "one", tmp_path / "two"):
        monkeypatch.syspath_prepend(str(p))
    reg.refresh()
    with pytest.raises(DuplicateModuleError, match=r"dist_one.*dist_two|dist_two.*dist_one"):
        reg.get("dup")


def test_trinity_rft_keyword_names_and_both_exception_families():
    reg = _registry()

    class A:
        pass

    reg.register_module(module_name="a", module_cls=A)
    assert reg.get("a") is A
    with pytest.raises(ValueError):
        reg.get("b")
    with pytest.raises(KeyError):
        reg.get("b")
    with pytest.raises(KeyError, match="already taken"):
        reg.register_module("a", int)
