"""Name → class registries, filled by decorators and by installed packages' entry points.

Every pluggable component family (workflows, reward functions, advantage functions, ...) has one
:class:`Registry`. Two ways put a module in it:

* ``@REGISTRY.register_module("name")`` on a class, run when its module is imported — the way the
  Trinity-RFT guides show, and the way plugin directories work;
* an entry point in the registry's group (``trinity.<registry name>`` by default), declared in an
  installed distribution's metadata. :meth:`Registry.get` loads it on first use, so
  ``WORKFLOWS.get("math_workflow")`` works with only ``trinity-workflows`` installed and nothing
  imported by hand, and ``trinity-core`` never imports a sibling package.

Two tiers, user code over built-ins
-----------------------------------
Every registration is either a *built-in* or *user code*, decided by where the registered
object was defined (its ``__module__``), never by the order of imports:

* **built-in** — defined in an installed package: anywhere in the ``trinity.*`` namespace that
  Trinity's distributions ship (``trinity.algorithm``, ``trinity.buffer``, ``trinity.workflows``,
  ``trinity.common``, ...), except ``trinity.plugins``; or in a top-level package that an
  installed distribution advertises through an entry point in a ``trinity.*`` group. Whatever an
  entry point loads is a built-in too.
* **user code** — everything else: a module the user imports, a ``--plugin-dir`` module (the
  plugin loader imports those as ``trinity.plugins.<file name>``), ``trinity.plugins.*``,
  ``__main__``, a notebook.

A user registration of a name a built-in holds *replaces the built-in in this process*, as in
Trinity-RFT (whose guides register ``"opmd"`` and ``"reward_filter"``, names the built-ins
use): :meth:`Registry.get`, configs naming it and the Studio's lists resolve to the user's
class, and one warning names both classes. The order does not matter: a built-in imported
*after* the user's registration (``import trinity.algorithm`` later, or a lazily loaded entry
point) stays behind the user's class. :meth:`Registry.unregister` of the user's name brings the
built-in back.

Refused with :class:`DuplicateModuleError` (silent shadowing within one tier is a bug users
only find after a training run): two user registrations of one name with different classes,
two built-ins of one name (two installed packages advertising it). The same class registered
again (a module imported twice, or re-created by ``importlib.reload``) is a no-op. An unknown
name raises an error listing the known names and the closest match, and saying how to load a
plugin directory (``--plugin-dir`` / ``TRINITY_PLUGIN_DIRS``) with the directories loaded so
far: a user's own component is unknown until its module is imported.
"""

from __future__ import annotations

import difflib
import importlib
import os
import threading
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any, Generic, Literal, Optional, TypeVar, overload

from trinity.utils.log import get_logger

__all__ = [
    "Registry",
    "RegistryError",
    "UnknownModuleError",
    "DuplicateModuleError",
    "EntryPointLoadError",
    "is_builtin_module",
]

T = TypeVar("T")
Tier = Literal["builtin", "user"]

logger = get_logger(__name__)

#: The user's own namespace inside ``trinity`` (the guides' ``trinity/plugins`` directory).
USER_NAMESPACE = "trinity.plugins"


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
        #: the plugin directories loaded in this process when the name was looked up
        self.plugin_dirs = _loaded_plugin_dirs()
        super().__init__(name)

    def __reduce__(self) -> Any:
        # picklable (a Ray actor's error reaches the driver): rebuilt from the constructor's
        # arguments, then the attributes as they were where it was raised
        return (type(self), (self.registry, self.name, self.known), dict(self.__dict__))

    def __str__(self) -> str:
        msg = f"Unknown {self.registry} name {self.name!r}."
        if self.suggestion:
            msg += f" Did you mean {self.suggestion!r}?"
        if self.known:
            msg += f" Known names: {', '.join(self.known)}."
        else:
            msg += " Nothing is registered yet (is the package that provides it installed?)."
        return msg + " " + self.plugin_hint()

    def plugin_hint(self) -> str:
        """What to do when the name is the user's own component: load its plugin directory."""
        if self.plugin_dirs:
            hint = (
                f"If {self.name!r} is your own component, no module of the loaded plugin "
                "directories registers it: check the name in its register_module(...), or pass "
                "the directory holding its module with --plugin-dir DIR (or set "
                f"TRINITY_PLUGIN_DIRS); plugin directories loaded: {', '.join(self.plugin_dirs)}."
            )
        else:
            hint = (
                f"If {self.name!r} is your own component, its module was not imported: pass the "
                "directory holding it with --plugin-dir DIR (or set TRINITY_PLUGIN_DIRS); "
                "plugin directories loaded: none."
            )
        pending = _pending_env_dirs(self.plugin_dirs)
        if pending:
            hint += (
                f" TRINITY_PLUGIN_DIRS names {', '.join(pending)}, not loaded in this process "
                "(trinity.utils.plugin_loader.load_plugins() loads it)."
            )
        return hint


def _loaded_plugin_dirs() -> list[str]:
    """The plugin directories loaded in this process (for the unknown-name message)."""
    try:  # the loader imports nothing of the registry; imported lazily all the same
        from trinity.utils.plugin_loader import loaded_plugin_dirs
    except ImportError:  # pragma: no cover - a broken installation
        return []
    return [str(p) for p in loaded_plugin_dirs()]


def _pending_env_dirs(loaded: list[str]) -> list[str]:
    """Entries of ``TRINITY_PLUGIN_DIRS`` that no ``load_plugins`` call imported yet."""
    from trinity.utils.plugin_loader import PLUGIN_DIRS_ENV

    pending = []
    for entry in os.environ.get(PLUGIN_DIRS_ENV, "").split(os.pathsep):
        if not entry.strip():
            continue
        resolved = os.path.realpath(os.path.expanduser(entry))
        if resolved not in loaded and resolved not in pending:
            pending.append(resolved)
    return pending


class DuplicateModuleError(RegistryError, ValueError, KeyError):
    """Raised when one tier (built-in or user code) registers a name twice, different objects."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


class EntryPointLoadError(RegistryError, ImportError):
    """Raised when an installed package's entry point cannot be imported."""


def _is_dotted_path(name: object) -> bool:
    """Whether ``name`` reads as ``"pkg.module.Class"`` (identifiers joined by dots)."""
    if not isinstance(name, str) or "." not in name:
        return False
    return all(part.isidentifier() for part in name.split("."))


def _closest(name: str, known: list[str]) -> str | None:
    matches = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    return matches[0] if matches else None


def _qualname(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or "?"
    qual = getattr(obj, "__qualname__", None) or repr(obj)
    return f"{module}.{qual}"


def _target(obj: Any) -> str:
    """``"module:QualName"``, the spelling of an entry point's target."""
    module = getattr(obj, "__module__", None) or "?"
    qual = getattr(obj, "__qualname__", None) or repr(obj)
    return f"{module}:{qual}"


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


_roots_lock = threading.Lock()
_installed_roots: frozenset[str] | None = None


def _advertised_roots() -> frozenset[str]:
    """Top-level packages outside ``trinity`` that installed distributions advertise.

    Read from the entry points of every ``trinity.*`` group (a third-party package that ships
    Trinity components declares them there), once per process (:meth:`Registry.refresh` clears it).
    """
    global _installed_roots
    with _roots_lock:
        if _installed_roots is None:
            roots = set()
            for dist in metadata.distributions():
                for ep in dist.entry_points:
                    if ep.group.startswith("trinity."):
                        root = ep.value.partition(":")[0].strip().split(".")[0]
                        if root and root != "trinity":
                            roots.add(root)
            _installed_roots = frozenset(roots)
        return _installed_roots


def is_builtin_module(module: str | None) -> bool:
    """Whether code defined in module ``module`` ships with an installed package (a built-in).

    ``trinity.*`` (but not ``trinity.plugins``) is the namespace of Trinity's own distributions;
    other installed packages count when they advertise entry points in a ``trinity.*`` group.
    Anything else — plugin-directory modules, ``__main__``, a user's package — is user code.
    """
    if not module:
        return False
    if _within(module, USER_NAMESPACE):
        return False
    if _within(module, "trinity"):
        return True
    return any(_within(module, root) for root in _advertised_roots())


def _tier_of(obj: Any) -> Tier:
    module = getattr(obj, "__module__", None)
    return "builtin" if is_builtin_module(module if isinstance(module, str) else None) else "user"


def _same(a: Any, b: Any) -> bool:
    """The same object, or the same class re-created (``importlib.reload``, a re-run module)."""
    return a is b or _qualname(a) == _qualname(b)


class Registry(Generic[T]):
    """A named registry of modules (usually classes).

    Names resolve by tier: user code over built-ins (see the module docstring for the rule and
    for how a registration's tier is decided). :meth:`get` returns the winner; :attr:`overridden`
    holds the built-ins user code replaced.

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
        #: the winner of each name (what :meth:`get` returns) and its tier
        self._modules: dict[str, T] = {}
        self._tiers: dict[str, Tier] = {}
        #: built-ins a user registration replaced, by name
        self._overridden: dict[str, T] = {}
        self._warned: set[str] = set()
        self._lock = threading.RLock()
        self._entry_points: dict[str, list[metadata.EntryPoint]] | None = None

    # ------------------------------------------------------------------ registration
    @overload
    def register_module(self, module_name: str) -> Callable[[T], T]: ...

    @overload
    def register_module(self, module_name: str, module_cls: T, force: bool = False) -> T: ...

    def register_module(self, module_name: str, module_cls: Any = None, force: bool = False) -> Any:
        """Register ``module_cls`` under ``module_name``; without ``module_cls``, return a decorator.

        User code registering a built-in's name replaces the built-in (one warning names both).
        Registering the very same object again is a no-op (a module imported twice through the
        same path); so is re-registering a class re-created by ``importlib.reload`` (same module
        and qualified name). A different object under a name its own tier already holds raises
        :class:`DuplicateModuleError`, unless ``force=True`` (then it simply takes the name).
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

    def _register(self, name: str, module: T, force: bool, tier: Tier | None = None) -> None:
        tier = tier or _tier_of(module)
        with self._lock:
            existing = self._modules.get(name)
            if existing is None:
                self._modules[name] = module
                self._tiers[name] = tier
                if tier == "user":
                    self._warn_if_advertised(name, module)
                return
            if force:  # takes the name whatever holds it; a replaced built-in can come back
                if tier == "user" and self._tiers[name] == "builtin":
                    self._overridden[name] = existing
                elif tier == "builtin":
                    self._overridden.pop(name, None)
                self._modules[name] = module
                self._tiers[name] = tier
                return
            held = self._tiers[name]
            if tier == held:
                if not _same(existing, module):
                    raise self._duplicate(name, module, existing, tier)
                self._modules[name] = module  # a reloaded class replaces its old self
            elif tier == "user":  # user code replaces the built-in that holds the name
                self._overridden[name] = existing
                self._modules[name] = module
                self._tiers[name] = "user"
                self._warn_override(name, module, _qualname(existing))
            else:  # a built-in arriving after the user's class stays behind it
                behind = self._overridden.get(name)
                if behind is not None and not _same(behind, module):
                    raise self._duplicate(name, module, behind, "builtin")
                self._overridden[name] = module
                self._warn_override(name, existing, _qualname(module))

    def _duplicate(self, name: str, module: Any, existing: Any, tier: Tier) -> DuplicateModuleError:
        why = (
            "two installed packages register it; uninstall one of them"
            if tier == "builtin"
            else "user code may replace a built-in, but two user classes cannot share a name; "
            "choose another name"
        )
        return DuplicateModuleError(
            f"Cannot register {_qualname(module)} as {self.name} {name!r}: the name is already "
            f"taken by {_qualname(existing)} ({why})."
        )

    def _warn_override(self, name: str, user: Any, builtin: str) -> None:
        if name in self._warned:
            return
        self._warned.add(name)
        logger.warning(
            "%s %r: user code %s replaces the built-in %s in this process.",
            self.name,
            name,
            _qualname(user),
            builtin,
        )

    def _warn_if_advertised(self, name: str, user: Any) -> None:
        """A user class took a name an installed package advertises but nobody loaded yet."""
        eps = self._get_entry_points().get(name)
        if eps:
            self._warn_override(name, user, " / ".join(ep.value.replace(":", ".") for ep in eps))

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests, interactive sessions); a built-in it replaced comes back."""
        with self._lock:
            self._modules.pop(name, None)
            self._tiers.pop(name, None)
            self._warned.discard(name)
            builtin = self._overridden.pop(name, None)
            if builtin is not None:
                self._modules[name] = builtin
                self._tiers[name] = "builtin"

    # ------------------------------------------------------------------ lookup
    def get(self, name: Optional[str]) -> Optional[T]:
        """The module registered as ``name`` (loading an entry point if needed), as Trinity-RFT
        0.6's ``Registry.get``:

        * ``None`` gives ``None`` (an optional component left unset in a config);
        * a name nobody registered raises :class:`UnknownModuleError` -- a ``ValueError`` as
          Trinity-RFT 0.6 raises, whose message lists the known names and the closest match;
        * a dotted path ``"pkg.module.Class"`` that is not a registered name is imported and
          registered under that path, so a config may name a class nobody registered.

        User code's registration wins over a built-in of the same name. (Trinity-RFT before 0.6
        returned ``None`` for an unknown name; ``name in registry`` asks without raising.)

        Raises:
            UnknownModuleError: nobody registered ``name`` and it is not an importable path.
            ImportError: ``name`` is a dotted path whose module or attribute cannot be imported.
            DuplicateModuleError: the name resolves to a built-in and more than one installed
                package advertises it.
            EntryPointLoadError: an installed package advertises ``name`` but fails to import.
        """
        if name is None:
            return None
        try:
            return self[name]
        except UnknownModuleError:
            if not _is_dotted_path(name):
                raise
        return self._import_path(name)

    def _import_path(self, path: str) -> T:
        """Import ``"pkg.module.Class"`` and register it under ``path`` (Trinity-RFT's dynamic
        import); the class keeps its tier (a user module's class is user code)."""
        module_name, _, attr = path.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ImportError(
                f"{self.name} {path!r} is neither a registered name nor an importable "
                f"'module.Class' path: {type(exc).__name__}: {exc}"
            ) from exc
        self._register(path, obj, force=False)
        with self._lock:
            return self._modules[path]

    def __getitem__(self, name: str) -> T:
        """The module registered as ``name``, loading an entry point if needed.

        Raises:
            UnknownModuleError: nobody registered ``name``; the message lists known names.
            DuplicateModuleError: see :meth:`get`.
            EntryPointLoadError: see :meth:`get`.
        """
        with self._lock:
            if self._tiers.get(name) == "user":
                return self._modules[name]
        eps = self._get_entry_points().get(name)
        if eps:
            self._check_single_source(name, eps)
        with self._lock:
            if name in self._modules:
                return self._modules[name]
        if eps:
            self._load_entry_point(name, eps)
            with self._lock:
                return self._modules[name]
        raise UnknownModuleError(self.name, name, self.list())

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
        """The modules registered in this process so far (entry points not yet loaded).

        For a name user code took over, the user's class.
        """
        with self._lock:
            return dict(self._modules)

    @property
    def overridden(self) -> dict[str, T]:
        """The built-ins that user registrations replaced in this process, by name."""
        with self._lock:
            return dict(self._overridden)

    def origin(self, name: str) -> str:
        """Where ``name`` comes from, as ``"module:Class"``, without importing anything: the
        registered module's, else the target of the entry point an installed package advertises.

        Raises:
            UnknownModuleError: nobody registered or advertised ``name``.
        """
        with self._lock:
            module = self._modules.get(name)
        if module is not None:
            return _target(module)
        eps = self._get_entry_points().get(name)
        if eps:
            return eps[0].value
        raise UnknownModuleError(self.name, name, self.list())

    def load_all(self) -> dict[str, T]:
        """Load every advertised entry point and return all modules (e.g. to list choices)."""
        for name in self._get_entry_points():
            self[name]
        return self.modules

    def find_by_attr(self, attr: str) -> T | None:
        """The built-in whose entry point targets an attribute named ``attr`` (``MathWorkflow``).

        Lets ``trinity.common.workflows.MathWorkflow`` — a name the guides use — resolve to a
        class that lives in another distribution, without core importing that distribution.
        It is the installed class of that name even where user code took its registry name.
        """
        for name, eps in self._get_entry_points().items():
            for ep in eps:
                if ep.value.rpartition(":")[2].split(".")[-1] == attr:
                    self._check_single_source(name, eps)
                    return self._load_entry_point(name, [ep])
        with self._lock:
            for module in [*self._modules.values(), *self._overridden.values()]:
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
        global _installed_roots
        with self._lock:
            self._entry_points = None
        with _roots_lock:
            _installed_roots = None

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

    def _check_single_source(self, name: str, eps: list[metadata.EntryPoint]) -> None:
        if len(eps) > 1:
            sources = "; ".join(f"{_dist_name(ep)} ({ep.value})" for ep in eps)
            raise DuplicateModuleError(
                f"{self.name} {name!r} is advertised by more than one installed package: "
                f"{sources}. Uninstall one of them."
            )

    def _load_entry_point(self, name: str, eps: list[metadata.EntryPoint]) -> T:
        """Import the (single) entry point of ``name`` and register it as the built-in."""
        self._check_single_source(name, eps)
        ep = eps[0]
        try:
            obj = ep.load()
        except Exception as exc:  # the import error itself is chained below
            raise EntryPointLoadError(
                f"{self.name} {name!r} comes from package {_dist_name(ep)} "
                f"(entry point {ep.value!r} in group {self.entry_point_group!r}) "
                f"but importing it failed: {type(exc).__name__}: {exc}"
            ) from exc
        # Importing the module usually ran its @register_module decorator already; then this
        # is a no-op. What an entry point loads is a built-in wherever it was defined.
        self._register(name, obj, force=False, tier="builtin")
        return obj

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
