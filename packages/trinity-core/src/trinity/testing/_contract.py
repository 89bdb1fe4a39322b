"""The machinery every contract shares: rules, exemptions, building, registry look-ups.

A *rule* is one test method decorated with :func:`rule`. Its failure message always starts with
``rule '<what the framework relies on>' broke:`` so a plugin author sees which promise their
component did not keep, not just a bare ``assert``. A rule can be exempted per component with
``skip_rules = {"rule-id": "why it does not apply"}``; the reason is mandatory and shows up in the
pytest report.
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Optional, TypeVar

import pytest
import torch
from torch import Tensor

from trinity.utils.build import build_component

__all__ = [
    "ComponentContract",
    "RuleBroken",
    "build_like_the_framework",
    "check_metrics",
    "make_contract_tests",
    "rule",
]

F = TypeVar("F", bound=Callable[..., Any])


class RuleBroken(AssertionError):
    """A contract rule failed; the message names the rule (``rule '...' broke: ...``)."""


def _hide_for_rule_broken(excinfo: Any) -> bool:
    return bool(excinfo.errisinstance(RuleBroken))


def rule(rule_id: str, title: str) -> Callable[[F], F]:
    """Mark a test method as the check of one rule.

    ``rule_id`` is the short key users put in ``skip_rules``; ``title`` is the promise in plain
    words ("masked tokens do not change the loss"). Any exception raised by the check (an
    ``assert`` or an error inside the component) is re-raised as :class:`RuleBroken` with the
    title in front; pytest's skips pass through untouched.
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: ComponentContract, *args: Any, **kwargs: Any) -> Any:
            # on failure pytest shows the rule's own frames, not this wrapper (skips keep it,
            # so the skip report points at the kit)
            __tracebackhide__ = _hide_for_rule_broken  # noqa: F841
            cls = type(self)
            if cls.unavailable:
                pytest.skip(f"{self._component_name()} cannot run here: {cls.unavailable}")
            missing = [m for m in cls.requires if importlib.util.find_spec(m) is None]
            if missing:
                pytest.skip(f"{self._component_name()} needs {', '.join(missing)} (not installed)")
            reason = (cls.skip_rules or {}).get(rule_id)
            if reason is not None:
                pytest.skip(f"rule {rule_id!r} exempted for {self._component_name()}: {reason}")
            try:
                return fn(self, *args, **kwargs)
            except RuleBroken:
                raise
            except Exception as exc:  # noqa: BLE001 - re-raised with the rule's name
                if isinstance(exc, AssertionError):
                    # the kit's own message, without pytest's assertion introspection lines
                    detail = str(exc).split("\nassert ")[0]
                else:
                    detail = f"{type(exc).__name__}: {exc}"
                raise RuleBroken(
                    f"rule '{title}' broke for {self._component_name()}: {detail}"
                ) from exc

        wrapper.__trinity_rule__ = (rule_id, title)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


def is_number(value: Any) -> bool:
    """A real number (not bool-only special cases) or a one-element tensor."""
    if isinstance(value, Tensor):
        return value.numel() == 1 and not value.is_complex()
    return isinstance(value, numbers.Real)


def check_metrics(metrics: Any, what: str, allow: frozenset[str] = frozenset()) -> None:
    """Assert ``metrics`` is a ``dict[str, finite number]`` (keys in ``allow`` may hold anything).

    Monitors (tensorboard, wandb, mlflow) log floats; a string, a list or a NaN in the dict
    either crashes the logger mid-run or hides the metric.
    """
    assert isinstance(metrics, Mapping), f"{what} must be a dict, got {type(metrics).__name__}"
    for key, value in metrics.items():
        assert isinstance(key, str), f"{what} key {key!r} is not a string"
        if key in allow:
            continue
        assert is_number(value), (
            f"{what}[{key!r}] = {value!r} is a {type(value).__name__}, not a number "
            "(monitors log floats)"
        )
        assert math.isfinite(float(value)), f"{what}[{key!r}] is {float(value)} (not finite)"


def assert_finite(t: Tensor, what: str) -> None:
    """Assert a tensor holds no NaN or inf, naming where the first bad value sits."""
    bad = ~torch.isfinite(t.detach())
    if bool(bad.any()):
        where = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise AssertionError(
            f"{what} has a non-finite value {t.detach()[where].item()} at index {where} "
            f"(shape {tuple(t.shape)})"
        )


def import_object(path: str) -> Any:
    """``"package.module:NAME"`` -> the object; a missing package skips the test with why.

    Contracts of algorithm and buffer components look their registries up this way: trinity-core
    must not import its sibling packages, and a plugin tested with only core and its own
    dependencies installed should see a skip that says what is missing, not an ImportError.
    """
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        pytest.skip(f"{module_name} is not installed ({exc}); install the package that provides it")
    return getattr(module, attr) if attr else module


#: Instantiate a component as Trinity builds components from a config:
#: ``cls.default_args()`` (when the class has it) overridden by ``args``; arguments the class's
#: ``__init__`` does not accept (and no ``**kwargs`` takes) are set as attributes afterwards
#: (e.g. ``loss_agg_mode`` on the guide's OPMD loss, whose ``__init__`` only takes ``tau``).
#: The framework's own function (:func:`trinity.utils.build.build_component`, which
#: ``trinity.algorithm.utils.build_component`` re-exports), so a plugin is built here exactly as
#: in a run.
build_like_the_framework = build_component


class ComponentContract:
    """Base of every contract: subclass it, set ``component`` (and maybe ``component_args``).

    Class attributes:

    * ``component``: the class under test.
    * ``component_args``: arguments it is built with (on top of its ``default_args()``).
    * ``registered_name``: the name it is registered under; ``None`` finds it by value.
    * ``skip_rules``: ``{rule_id: reason}`` exemptions; unknown ids are refused.
    * ``seed``: the seed of the random inputs (every rule uses the same inputs).
    * ``requires``: modules the component needs; every rule skips (saying which) when one is
      not installed.
    * ``unavailable``: a reason the component cannot run in this environment (e.g. a missing
      system tool); set, every rule skips with it.

    Subclasses of a kind set ``registry_path`` (``"module:REGISTRY"``, imported lazily).
    """

    component: ClassVar[Optional[type]] = None
    component_args: ClassVar[Mapping[str, Any]] = {}
    registered_name: ClassVar[Optional[str]] = None
    skip_rules: ClassVar[Mapping[str, str]] = {}
    seed: ClassVar[int] = 0
    requires: ClassVar[tuple[str, ...]] = ()
    unavailable: ClassVar[Optional[str]] = None

    #: ``"module:NAME"`` of the registry this kind of component lives in.
    registry_path: ClassVar[str] = ""
    #: What the kind is called in messages ("policy loss").
    kind: ClassVar[str] = "component"

    # ------------------------------------------------------------------ helpers
    @classmethod
    def _component_name(cls) -> str:
        comp = cls.component
        if comp is None:
            return cls.__name__
        return getattr(comp, "__qualname__", None) or repr(comp)

    @classmethod
    def rule_ids(cls) -> dict[str, str]:
        """``{rule_id: title}`` of every rule this contract checks."""
        out: dict[str, str] = {}
        for name in dir(cls):
            marker = getattr(getattr(cls, name, None), "__trinity_rule__", None)
            if marker is not None:
                out[marker[0]] = marker[1]
        return out

    def build(self, **overrides: Any) -> Any:
        """A fresh instance built from ``default_args()`` + ``component_args`` + ``overrides``."""
        assert self.component is not None, f"{type(self).__name__} sets no `component`"
        args = {**dict(self.component_args), **overrides}
        return build_like_the_framework(self.component, args)

    def generator(self, offset: int = 0) -> torch.Generator:
        """A CPU generator seeded with ``seed + offset`` (inputs are the same on every run)."""
        return torch.Generator().manual_seed(int(self.seed) + offset)

    @staticmethod
    def clone(value: Any) -> Any:
        """A deep copy (inputs handed to a component must not be shared between runs)."""
        return copy.deepcopy(value)

    # ------------------------------------------------------------------ rules of every kind
    def test_contract_is_set_up(self) -> None:
        """Not a rule of the component: the test class itself is well formed."""
        assert self.component is not None, (
            f"{type(self).__name__}: set `component = YourClass` (the class under test)"
        )
        assert inspect.isclass(self.component), (
            f"{type(self).__name__}.component must be a class, got {self.component!r}"
        )
        known = self.rule_ids()
        unknown = sorted(set(self.skip_rules or {}) - set(known))
        assert not unknown, (
            f"{type(self).__name__}.skip_rules names unknown rules {unknown}; known rules: "
            f"{', '.join(sorted(known))}"
        )
        for rule_id, reason in (self.skip_rules or {}).items():
            assert isinstance(reason, str) and reason.strip(), (
                f"{type(self).__name__}.skip_rules[{rule_id!r}] needs a reason (a non-empty string)"
            )

    @rule("builds", "it builds from default_args() plus component_args")
    def test_builds_from_default_args(self) -> None:
        default_args = getattr(self.component, "default_args", None)
        if callable(default_args):
            args = default_args()
            assert isinstance(args, Mapping), (
                f"default_args() must return a dict, got {type(args).__name__}"
            )
        self.build()

    @rule("registered", "the registry resolves its name back to the class")
    def test_registry_round_trip(self) -> None:
        registry = import_object(self.registry_path)
        name = self.registered_name
        if name is None:
            found = [n for n, obj in registry.modules.items() if obj is self.component]
            assert found, (
                f"{self.component!r} is not registered in {registry.name!r}: decorate it with "
                f"@{registry.name.upper()}.register_module('your_name') (or set "
                "registered_name if it is registered through an entry point)"
            )
            name = found[0]
        assert name in registry, f"{name!r} is not in registry {registry.name!r}"
        assert name in registry.list(), f"{registry.name}.list() does not list {name!r}"
        got = registry[name]
        assert got is self.component, (
            f"{registry.name}.get({name!r}) returned {got!r}, not {self.component!r} (another "
            "class holds the name)"
        )


def make_contract_tests(
    contract: type[ComponentContract],
    registry: Any,
    *,
    prefix: str,
    args: Optional[Mapping[str, Mapping[str, Any]]] = None,
    attrs: Optional[Mapping[str, Mapping[str, Any]]] = None,
    names: Optional[list[str]] = None,
) -> dict[str, type]:
    """One ``Test<prefix>_<name>`` subclass of ``contract`` per registered name.

    Put the result in your test module's globals (``globals().update(...)``) so pytest collects
    every class. ``args[name]`` becomes ``component_args``, ``attrs[name]`` other class
    attributes (``skip_rules``, inputs ...). Names in ``args``/``attrs`` that the registry does
    not know raise, so a renamed component cannot silently lose its settings.
    """
    args, attrs = dict(args or {}), dict(attrs or {})
    all_names = list(names) if names is not None else registry.list()
    unknown = sorted((set(args) | set(attrs)) - set(all_names))
    if unknown:
        raise ValueError(f"settings given for names {registry.name!r} does not have: {unknown}")
    classes: dict[str, type] = {}
    for name in all_names:
        body: dict[str, Any] = {
            "component": registry[name],
            "registered_name": name,
            "component_args": dict(args.get(name, {})),
            "__module__": contract.__module__,
        }
        body.update(attrs.get(name, {}))
        safe = "".join(c if c.isalnum() else "_" for c in name)
        cls_name = f"Test{prefix}_{safe}"
        classes[cls_name] = type(cls_name, (contract,), body)
    return classes
