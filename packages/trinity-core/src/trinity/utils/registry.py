"""Name → class registries, filled by decorators and by installed packages' entry points.

Every pluggable component family (workflows, reward functions, advantage functions, ...) has one
:class:`Registry`. Two ways put a module in it:

* ``@REGISTRY.register_module("name")`` on a class, run when its module is imported — the way the
  Trinity-RFT guides show, and the way plugin directories work;
* an entry point in the registry's group (``trinity.<registry name>`` by default), declared in an
  installed distribution's metadata. :meth:`Registry.get` loads it on first use, so
  ``WORKFLOWS.get("math_workflow")`` works with only ``trinity-workflows`` installed and nothing
  imported by hand, and ``trinity-core`` never imports a sibling package.

Names are unique: registering a second, different object under a taken name is refused (silently
shadowing a built-in is a bug users only find after a training run). An unknown name raises an
error listing the known names and the closest match.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any, Generic, TypeVar, overload

__all__ = [
    "Registry",
    "RegistryError",
    "UnknownModuleError",
    "DuplicateModuleError",
    "EntryPointLoadError",
]

T = TypeVar("T")


class RegistryError(Exception):
    """Base class of registry errors."""


class UnknownModuleError(RegistryError, KeyError, ValueError):
    """Raised by :meth:`Registry.get` for a name nobody registered.

    A ``KeyError`` (a failed lookup) and a ``ValueError`` (a bad name in a config) alike, so
    either ``except`` works; prints as a sentence rather than a quoted key.
    """

    def __init__(self, registry: str, name: str, known: list[str]):
        self.registry = registry
        self.name = name
        self.known = known
        self.suggestion = _closest(name, known)
        super().__init__(name)

    def __str__(self) -> str:
        msg = f"Unknown {self.registry} name {self.name!r}."
        if self.suggestion:
            msg += f" Did you mean {self.suggestion!r}?"
        if self.known:
            msg += f" Known names: {', '.join(self.known)}."
        else:
            msg += " Nothing is registered yet (is the package that provides it installed?)."
        return msg


class DuplicateModuleError(RegistryError, ValueError, KeyError):
    """Raised when a name is registered twice with different objects."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


class EntryPointLoadError(RegistryError, ImportError):
    """Raised when an installed package's entry point cannot be imported."""


def _closest(name: str, known: list[str]) -> str | None:
    matches = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    return matches[0] if matches else None


def _qualname(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or "?"
    qual = getattr(obj, "__qualname__", None) or repr(obj)
    return f"{module}.{qual}"


class Registry(Generic[T]):
    """A named registry of modules (usually classes).

    Args:
        name: the registry's name, used in messages (e.g. ``"workflows"``).
        entry_point_group: the entry-point group installed distributions use to advertise
            modules; defaults to ``"trinity.<name>"``. A distribution declares, e.g.::

                [project.entry-points."trinity.workflows"]
                math_workflow = "trinity.workflows.math:MathWorkflow"
    """

    def __init__(self, name: str, entry_point_group: str | None = None) -> None:
        self.name = name
        self.entry_point_group = entry_point_group or f"trinity.{name}"
        self._modules: dict[str, T] = {}
        self._lock = threading.RLock()
        self._entry_points: dict[str, list[metadata.EntryPoint]] | None = None

    # ------------------------------------------------------------------ registration
    @overload
    def register_module(self, module_name: str) -> Callable[[T], T]: ...

    @overload
    def register_module(self, module_name: str, module_cls: T, force: bool = False) -> T: ...

    def register_module(self, module_name: str, module_cls: Any = None, force: bool = False) -> Any:
        """Register ``module_cls`` under ``module_name``; without ``module_cls``, return a decorator.

        Registering the very same object again is a no-op (a module imported twice through
        the same path); so is re-registering a class re-created by ``importlib.reload`` (same
        module and qualified name). Anything else under a taken name raises
        :class:`DuplicateModuleError` unless ``force=True``.
        """
        if not isinstance(module_name, str) or not module_name:
            raise TypeError(
                f"{self.name}.register_module needs a non-empty string name, got "
                f"{module_name!r} (use @{self.name.upper()}.register_module('my_name'))"
            )
        if module_cls is not None:
            self._register(module_name, module_cls, force)
            return module_cls

        def decorator(obj: T) -> T:
            self._register(module_name, obj, force)
            return obj

        return decorator

    def _register(self, name: str, module: T, force: bool) -> None:
        with self._lock:
            existing = self._modules.get(name)
            if existing is not None and existing is not module and not force:
                if _qualname(existing) != _qualname(module):
                    raise DuplicateModuleError(
                        f"Cannot register {_qualname(module)} as {self.name} {name!r}: "
                        f"the name is already taken by {_qualname(existing)}. "
                        "Choose another name (names are unique across installed packages "
                        "and plugins)."
                    )
            self._modules[name] = module

    def unregister(self, name: str) -> None:
        """Remove ``name`` (for tests and interactive sessions)."""
        with self._lock:
            self._modules.pop(name, None)

    # ------------------------------------------------------------------ lookup
    def get(self, name: str) -> T:
        """Return the module registered as ``name``, loading an entry point if needed.

        Raises:
            UnknownModuleError: nobody registered ``name``; the message lists known names.
            EntryPointLoadError: an installed package advertises ``name`` but fails to import.
        """
        with self._lock:
            if name in self._modules:
                return self._modules[name]
        eps = self._get_entry_points().get(name)
        if eps:
            return self._load_entry_point(name, eps)
        raise UnknownModuleError(self.name, name, self.list())

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        with self._lock:
            if name in self._modules:
                return True
        return name in self._get_entry_points()

    def list(self) -> list[str]:
        """All known names, registered or advertised by installed packages, sorted."""
        with self._lock:
            names = set(self._modules)
        names.update(self._get_entry_points())
        return sorted(names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.list())

    def __len__(self) -> int:
        return len(self.list())

    @property
    def modules(self) -> dict[str, T]:
        """The modules registered in this process so far (entry points not yet loaded)."""
        with self._lock:
            return dict(self._modules)

    def load_all(self) -> dict[str, T]:
        """Load every advertised entry point and return all modules (e.g. to list choices)."""
        for name in self._get_entry_points():
            self.get(name)
        return self.modules

    def find_by_attr(self, attr: str) -> T | None:
        """Load the entry point whose target attribute is named ``attr`` (e.g. ``MathWorkflow``).

        Lets ``trinity.common.workflows.MathWorkflow`` — a name the guides use — resolve to a
        class that lives in another distribution, without core importing that distribution.
        """
        for name, eps in self._get_entry_points().items():
            if any(ep.value.rpartition(":")[2].split(".")[-1] == attr for ep in eps):
                return self.get(name)
        with self._lock:
            for module in self._modules.values():
                if getattr(module, "__name__", None) == attr:
                    return module
        return None

    def module_getattr(self, module_name: str, attr: str) -> Any:
        """Implement a module's ``__getattr__`` that resolves class names through this registry.

        ``trinity.common.workflows`` uses it so ``from trinity.common.workflows import
        MathWorkflow`` (the guides' path) works when the class ships in another distribution.
        """
        if not attr.startswith("_") and attr[:1].isupper():
            found = self.find_by_attr(attr)
            if found is not None:
                return found
        raise AttributeError(
            f"module {module_name!r} has no attribute {attr!r} "
            f"(installed {self.name}: {', '.join(self.list()) or 'none'})"
        )

    def refresh(self) -> None:
        """Re-read installed entry points (after installing a package in a running process)."""
        with self._lock:
            self._entry_points = None

    # ------------------------------------------------------------------ entry points
    def _get_entry_points(self) -> dict[str, list[metadata.EntryPoint]]:
        with self._lock:
            if self._entry_points is None:
                found: dict[str, list[metadata.EntryPoint]] = {}
                for ep in metadata.entry_points(group=self.entry_point_group):
                    same = found.setdefault(ep.name, [])
                    if all(e.value != ep.value for e in same):
                        same.append(ep)
                self._entry_points = found
            return self._entry_points

    def _load_entry_point(self, name: str, eps: list[metadata.EntryPoint]) -> T:
        if len(eps) > 1:
            sources = "; ".join(f"{_dist_name(ep)} ({ep.value})" for ep in eps)
            raise DuplicateModuleError(
                f"{self.name} {name!r} is advertised by more than one installed package: "
                f"{sources}. Uninstall one of them."
            )
        ep = eps[0]
        try:
            obj = ep.load()
        except Exception as exc:  # the import error itself is chained below
            raise EntryPointLoadError(
                f"{self.name} {name!r} comes from package {_dist_name(ep)} "
                f"(entry point {ep.value!r} in group {self.entry_point_group!r}) "
                f"but importing it failed: {type(exc).__name__}: {exc}"
            ) from exc
        with self._lock:
            # Importing the module usually ran its @register_module decorator already.
            if name not in self._modules:
                self._register(name, obj, force=False)
            return self._modules[name]

    @property
    def _default_mapping(self) -> dict[str, str]:
        """Trinity-RFT's ``{name: "module.Class"}`` of the known modules (its tests list the
        built-ins through it): registered ones and those installed packages advertise."""
        with self._lock:
            found = {name: _qualname(module) for name, module in self._modules.items()}
        for name, eps in self._get_entry_points().items():
            found.setdefault(name, eps[0].value.replace(":", "."))
        return found

    def __repr__(self) -> str:
        return f"Registry(name={self.name!r}, entry_point_group={self.entry_point_group!r})"


def _dist_name(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return getattr(dist, "name", None) or "<unknown distribution>"
