"""Registry: decorator registration, duplicates, unknown names, entry points of installed dists."""

from __future__ import annotations

import collections
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
        reg.get("math_workflw")  # Trinity-RFT 0.6: a ValueError; ours names the closest match
    err = info.value
    assert isinstance(err, ValueError)
    assert isinstance(err, KeyError)
    assert err.suggestion == "math_workflow"
    text = str(err)
    assert "'math_workflw'" in text and "Did you mean 'math_workflow'?" in text
    assert "countdown_workflow, math_workflow, simple_workflow" in text


def test_unknown_name_in_empty_registry_says_nothing_is_registered():
    with pytest.raises(UnknownModuleError, match="Nothing is registered"):
        _registry()["anything"]


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
    with pytest.raises(ValueError):
        reg["b"]
    with pytest.raises(KeyError):
        reg["b"]
    with pytest.raises(KeyError, match="already taken"):
        reg.register_module("a", int)


def test_get_of_none_is_none():
    """Trinity-RFT 0.6: an optional component left unset (``None``) looks up as ``None``."""
    assert _registry().get(None) is None


def test_get_imports_a_dotted_path_and_registers_it_under_that_path():
    reg = _registry()
    path = "collections.OrderedDict"
    assert path not in reg
    assert reg.get(path) is collections.OrderedDict
    assert path in reg and reg.modules[path] is collections.OrderedDict
    assert reg.get(path) is collections.OrderedDict  # the second time from the registry


def test_get_of_a_dotted_path_that_does_not_import_is_an_import_error():
    reg = _registry()
    with pytest.raises(ImportError, match=r"no_such_module_xyz"):
        reg.get("no_such_module_xyz.Thing")
    with pytest.raises(ImportError, match=r"NoSuchClass"):
        reg.get("collections.NoSuchClass")
    # a name with a dot that is not a module path stays an unknown name
    with pytest.raises(UnknownModuleError, match=r"Unknown .* 'qwen2\.5 chat'"):
        reg.get("qwen2.5 chat")


def test_a_registered_name_with_dots_is_not_imported():
    reg = _registry()

    class Dotted:
        pass

    reg.register_module("my.dotted.name", Dotted)
    assert reg.get("my.dotted.name") is Dotted


# ---------------------------------------------------------------------- user code over built-ins
def _cls(name: str, module: str) -> type:
    """A class as if defined in ``module`` (the registry decides its tier by that)."""
    return type(name, (), {"__module__": module})


def _override_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "replaces the built-in" in r.getMessage()]


def test_tiers_follow_the_defining_module(tmp_path, monkeypatch):
    from trinity.utils.registry import is_builtin_module

    assert is_builtin_module("trinity.algorithm.advantage_fn.opmd")
    assert is_builtin_module("trinity.workflows")
    assert not is_builtin_module("trinity.plugins.my_algo")  # the guides' user directory
    assert not is_builtin_module("opmd_advantage")  # a --plugin-dir module
    assert not is_builtin_module("__main__")
    # a third-party package that advertises a Trinity entry point ships built-ins too
    root = f"acme_{uuid.uuid4().hex[:8]}"
    _install_dist(tmp_path, "acme_trinity", "trinity.workflows", {"acme": f"{root}.flows:Flow"})
    monkeypatch.syspath_prepend(str(tmp_path))
    _registry().refresh()
    assert is_builtin_module(f"{root}.flows") and is_builtin_module(f"{root}.other")
    assert not is_builtin_module(f"{root}x.flows")


def test_user_class_replaces_a_builtin_with_one_warning(caplog):
    reg = _registry()
    builtin = _cls("OPMD", "trinity.algorithm.fake_opmd")
    user = _cls("MyOPMD", "my_plugin")
    reg.register_module("opmd", builtin)

    reg.register_module("opmd", user)
    reg.register_module("opmd", user)  # a module imported twice: nothing new
    assert reg.get("opmd") is user and reg.modules["opmd"] is user
    assert reg.overridden == {"opmd": builtin}
    assert reg.list() == ["opmd"]
    (message,) = _override_warnings(caplog)
    assert "my_plugin.MyOPMD" in message and "trinity.algorithm.fake_opmd.OPMD" in message

    reg.unregister("opmd")  # the user's class goes; the built-in comes back
    assert reg.get("opmd") is builtin and reg.overridden == {}


def test_a_builtin_registered_after_the_user_class_does_not_win_back(caplog):
    reg = _registry()
    user = _cls("MyFilter", "my_plugin")
    builtin = _cls("RewardFilter", "trinity.buffer.fake_operators")
    reg.register_module("reward_filter", user)
    assert _override_warnings(caplog) == []  # nothing to replace yet
    reg.register_module("reward_filter", builtin)  # e.g. `import trinity.buffer` afterwards
    reg.register_module("reward_filter", builtin)
    assert reg.get("reward_filter") is user
    assert reg.overridden == {"reward_filter": builtin}
    (message,) = _override_warnings(caplog)
    assert "my_plugin.MyFilter" in message and "fake_operators.RewardFilter" in message


def test_two_user_classes_or_two_builtins_under_one_name_are_refused():
    reg = _registry()
    reg.register_module("x", _cls("A", "plugin_a"))
    with pytest.raises(DuplicateModuleError, match=r"plugin_b\.B.*taken by plugin_a\.A"):
        reg.register_module("x", _cls("B", "plugin_b"))
    reg.register_module("x", _cls("A", "plugin_a"))  # re-created by a reload: same class
    reg.register_module("y", _cls("A", "trinity.one"))
    with pytest.raises(DuplicateModuleError, match="two installed packages"):
        reg.register_module("y", _cls("B", "trinity.two"))
    # a user class over "y" does not make a second built-in acceptable
    reg.register_module("y", _cls("C", "plugin_c"))
    with pytest.raises(DuplicateModuleError, match=r"trinity\.two\.B.*taken by trinity\.one\.A"):
        reg.register_module("y", _cls("B", "trinity.two"))


def test_user_class_over_a_lazy_entry_point(tmp_path, monkeypatch, caplog):
    """The installed class is advertised but not imported: the user's takes the name, the
    warning names the entry point's class, and loading it later (by attribute) changes nothing."""
    reg = _registry()
    mod = f"shipped_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{mod}.py").write_text("class Shipped: pass\n")
    _install_dist(tmp_path, "trinity_shipped", reg.entry_point_group, {"thing": f"{mod}:Shipped"})
    monkeypatch.syspath_prepend(str(tmp_path))
    reg.refresh()

    user = _cls("Mine", "my_plugin")
    reg.register_module("thing", user)
    (message,) = _override_warnings(caplog)
    assert "my_plugin.Mine" in message and f"{mod}.Shipped" in message
    assert reg.get("thing") is user
    assert mod not in sys.modules  # the built-in was not needed

    shipped = reg.find_by_attr("Shipped")  # `from trinity.common.workflows import X` path
    assert shipped.__module__ == mod and shipped is not user
    assert reg.get("thing") is user and reg.overridden == {"thing": shipped}
    assert len(_override_warnings(caplog)) == 1
    reg.unregister("thing")
    assert reg.get("thing") is shipped


def test_force_takes_the_name_and_a_forced_user_class_can_be_undone():
    reg = _registry()
    builtin = _cls("B", "trinity.fake")
    reg.register_module("n", builtin)
    other = _cls("Other", "trinity.fake2")
    reg.register_module("n", other, force=True)
    assert reg.get("n") is other
    user = _cls("U", "user_mod")
    reg.register_module("n", user, force=True)
    assert reg.get("n") is user
    reg.unregister("n")
    assert reg.get("n") is other
