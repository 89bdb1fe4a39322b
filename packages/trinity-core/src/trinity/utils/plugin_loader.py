"""Load user plugin modules (workflows, algorithms, operators ...) from directories.

The guides tell users to drop modules into a plugin directory and pass ``--plugin-dir``
(or set ``TRINITY_PLUGIN_DIRS``, ``os.pathsep``-separated); every module there is imported at
start-up so its ``@REGISTRY.register_module`` decorators run. Modules in an installed
``trinity.plugins`` namespace package are loaded too (the guides' ``trinity/plugins``).

As in Trinity-RFT 0.6, a plugin file ``my_workflow.py`` becomes the module
``trinity.plugins.my_workflow``: its classes' ``__module__`` says so, and they pickle by that
name. The ``trinity.plugins`` package (shipped by trinity-core) puts the directories of
``TRINITY_PLUGIN_DIRS`` on its ``__path__`` when it is imported, so a fresh process -- a Ray
worker unpickling a plugin class, before anything called :func:`load_plugins` -- imports the
module by that name from the directory the variable names. :func:`load_plugins` records the
directories it loads in ``TRINITY_PLUGIN_DIRS`` so child processes inherit them.

Plugin modules also keep their plain names (``my_workflow``, ``my_pkg.helpers``) as aliases of
the same module objects: plugin modules import each other that way (``from my_utils import
helper``) without being executed twice (which would register their classes twice). A plugin
file some code imported by its plain name before :func:`load_plugins` (a plugin's own test under
pytest) keeps that module, which becomes ``trinity.plugins.<name>`` too. A plugin whose plain
name is a module imported or installed from elsewhere (``json.py``) is refused: rename it.

Plugin modules are user code for the registries (:mod:`trinity.utils.registry`): a plugin that
registers a name a built-in uses (the guides' ``"opmd"``, ``"reward_filter"``) replaces the
built-in in every process that loads the directory, whatever the order of imports. A plugin
directory may therefore not hold modules in the ``trinity`` namespace (other than
``trinity.plugins``), which would pass for built-ins.

Test files are not plugins: a file named ``test_*.py``, ``*_test.py`` or ``conftest.py``, at
any depth of a plugin directory (or of ``trinity.plugins``), is skipped, so the contract tests
a plugin author keeps beside the plugin (``my_plugins/test_my_workflow.py``) are never imported
by a run -- importing them would import pytest, run ``conftest.py`` fixtures' module code, or
fail outside a test session. Modules whose names are not identifiers, and hidden and
``__pycache__`` folders, are skipped too. A plugin module that imports a test module itself
still gets it (that is an ordinary import: the directory is on ``sys.path``).

:func:`loaded_plugin_dirs` lists the directories loaded in this process; the registries' "unknown
name" message shows it (:class:`trinity.utils.registry.UnknownModuleError`), so a plugin name
used without ``--plugin-dir`` says what to pass.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import traceback
from collections.abc import Iterable, MutableSequence
from pathlib import Path
from types import ModuleType
from typing import Optional

from trinity.common.constants import PLUGIN_DIRS_ENV_VAR
from trinity.utils.log import get_logger

__all__ = [
    "PLUGIN_DIRS_ENV",
    "PLUGIN_PACKAGE",
    "PluginLoadError",
    "get_plugin_dirs",
    "is_test_file",
    "load_plugins",
    "loaded_plugin_dirs",
]

#: the environment variable of plugin directories (Trinity-RFT's ``PLUGIN_DIRS_ENV_VAR``)
PLUGIN_DIRS_ENV = PLUGIN_DIRS_ENV_VAR
#: the package plugin modules are imported into (Trinity-RFT's ``trinity.plugins``)
PLUGIN_PACKAGE = "trinity.plugins"

logger = get_logger(__name__)

_loaded_files: dict[str, str] = {}  # absolute file path -> full module name
_loaded_dirs: list[Path] = []  # plugin directories load_plugins imported, in order
_plugin_roots: set[str] = set()  # plugin directories on trinity.plugins' __path__
_owned: set[str] = set()  # the trinity/plugins folders inside those directories
_plain_names: dict[str, str] = {}  # plain top-level name of a plugin module -> its directory
_lock = threading.RLock()


class PluginLoadError(ImportError):
    """A plugin module failed to import; names the file and shows the plugin's own traceback."""


def get_plugin_dirs(
    plugin_dirs: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
    include_env: bool = True,
) -> list[Path]:
    """Resolve plugin directories from arguments and ``TRINITY_PLUGIN_DIRS`` (deduplicated)."""
    raw: list[str | os.PathLike] = []
    if plugin_dirs is not None:
        if isinstance(plugin_dirs, (str, os.PathLike)):
            raw.extend(str(plugin_dirs).split(os.pathsep))
        else:
            raw.extend(plugin_dirs)
    if include_env:
        raw.extend(os.environ.get(PLUGIN_DIRS_ENV, "").split(os.pathsep))
    dirs: list[Path] = []
    for entry in raw:
        if not str(entry).strip():
            continue
        path = Path(entry).expanduser().resolve()
        if not path.is_dir():
            raise PluginLoadError(
                f"Plugin directory {str(entry)!r} does not exist or is not a directory "
                f"(from --plugin-dir or {PLUGIN_DIRS_ENV})."
            )
        if path not in dirs:
            dirs.append(path)
    return dirs


def is_test_file(name: str) -> bool:
    """Whether a file name is a test file the plugin loader skips: ``test_*.py``,
    ``*_test.py`` or ``conftest.py`` (pytest's default patterns)."""
    return name == "conftest.py" or (
        name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))
    )


def loaded_plugin_dirs() -> list[Path]:
    """The plugin directories :func:`load_plugins` imported in this process, in order."""
    return list(_loaded_dirs)


def _module_files(root: Path) -> list[tuple[str, Path]]:
    """(dotted module name, file) for every importable module under ``root``, sorted.

    Test files (:func:`is_test_file`) are left out.
    """
    found: list[tuple[str, Path]] = []
    for file in sorted(root.rglob("*.py")):
        rel = file.relative_to(root)
        if any(part.startswith((".", "__pycache__")) for part in rel.parts):
            continue
        if is_test_file(file.name):
            logger.debug("Skipping test file %s of plugin directory %s", rel, root)
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
            if not parts:  # an __init__.py right in the plugin dir belongs to no module
                continue
        if not all(p.isidentifier() for p in parts):
            logger.warning("Skipping plugin file %s: %r is not a valid module name", file, rel)
            continue
        found.append((".".join(parts), file))
    return found


# ---------------------------------------------------------------------- the trinity.plugins package
def _in_plugin_namespace(name: str) -> bool:
    return name == PLUGIN_PACKAGE or name.startswith(PLUGIN_PACKAGE + ".")


def _plugin_package() -> ModuleType:
    """``trinity.plugins``, imported (its ``__init__`` attaches the variable's directories)."""
    return importlib.import_module(PLUGIN_PACKAGE)


def _attach(path: MutableSequence[str], location: Path, root: bool) -> None:
    """Put ``location`` on ``trinity.plugins``' ``__path__``; a plugin directory (``root``) also
    lends its top-level module names as plain aliases (see the module docstring)."""
    entry = str(location)
    with _lock:
        if entry not in path:
            path.append(entry)
        if root:
            _plugin_roots.add(entry)
            _install_finder()
            for name in _top_level_names(location):
                if name not in _plain_names and _plain_name_is_free(name, location):
                    _plain_names[name] = entry


def attach_env_dirs(path: MutableSequence[str]) -> None:
    """Put the directories of ``TRINITY_PLUGIN_DIRS`` on ``path`` (``trinity.plugins``'
    ``__path__``, when the package is imported). A missing directory is left out here;
    :func:`load_plugins` reports it."""
    for entry in os.environ.get(PLUGIN_DIRS_ENV, "").split(os.pathsep):
        location = Path(entry).expanduser().resolve() if entry.strip() else None
        if location is not None and location.is_dir():
            _attach(path, location, root=True)
            if (location / "trinity" / "plugins").is_dir():  # the guides' layout inside it
                _attach(path, location / "trinity" / "plugins", root=False)
                _owned.add(str(location / "trinity" / "plugins"))


def _top_level_names(root: Path) -> set[str]:
    tops = {name.split(".")[0] for name, _ in _module_files(root)}
    tops.discard("trinity")  # the guides' trinity/plugins layout: already trinity.plugins.*
    return tops


def _elsewhere(name: str, root: Path) -> Optional[str]:
    """Where a module named ``name`` comes from when that is not plugin directory ``root``:
    the file of one imported already, else of one importable from ``sys.path``."""
    if name in sys.builtin_module_names:
        return "the interpreter (a built-in module)"
    module = sys.modules.get(name)
    if module is not None:
        if _in_plugin_namespace(getattr(module, "__name__", "")):
            return None  # our own alias
        origin = getattr(module, "__file__", None) or repr(module)
    else:
        try:
            spec = importlib.machinery.PathFinder.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        origin = None
        if spec is not None:
            origin = spec.origin or next(iter(spec.submodule_search_locations or []), None)
        if origin is None:
            return None
    try:
        Path(origin).resolve().relative_to(root)
        return None
    except (ValueError, OSError):
        return str(origin)


def _plain_name_is_free(name: str, root: Path) -> bool:
    return _elsewhere(name, root) is None


class _AliasLoader(importlib.abc.Loader):
    """Gives the module ``trinity.plugins.<name>`` for the plain name ``<name>``."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._spec: Optional[importlib.machinery.ModuleSpec] = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self._spec = getattr(module, "__spec__", None)
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system set the alias's spec on the shared module object; restore its own.
        if self._spec is not None:
            module.__spec__ = self._spec


class _PlainNameFinder(importlib.abc.MetaPathFinder):
    """Resolves a plugin module's plain name (and its submodules) to the
    ``trinity.plugins.<name>`` module, so both names are one module object."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname.partition(".")[0] not in _plain_names:
            return None
        return importlib.util.spec_from_loader(
            fullname, _AliasLoader(f"{PLUGIN_PACKAGE}.{fullname}")
        )


_finder = _PlainNameFinder()


def _install_finder() -> None:
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


# ---------------------------------------------------------------------- loading
def _module_file(module: ModuleType) -> Optional[Path]:
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None


def _refuse_clash(shown: str, file: Path, full: str, plain: Optional[str], root: Path) -> None:
    """A plugin whose module name is already taken by another file is an error."""
    existing = sys.modules.get(full)
    existing_file = _module_file(existing) if existing is not None else None
    if existing_file is not None and existing_file != file:
        raise PluginLoadError(
            f"Plugin module {shown!r} ({file}) has the same name as the already imported module "
            f"from {existing_file}. Rename the plugin file."
        )
    if plain is None:
        return
    elsewhere = _elsewhere(plain.split(".")[0], root)
    if elsewhere is not None:
        kind = "already imported" if plain.split(".")[0] in sys.modules else "installed"
        raise PluginLoadError(
            f"Plugin module {shown!r} ({file}) has the same name as the {kind} module "
            f"from {elsewhere}. Rename the plugin file."
        )


def _adopt_plain_import(plain: str, full: str, file: Path) -> bool:
    """A plugin file imported under its plain name before any ``load_plugins`` (a test file's
    ``from my_workflow import MyWorkflow`` under pytest, a directory on ``PYTHONPATH``) is not
    executed a second time, which would register its classes twice: that module object
    becomes ``trinity.plugins.<name>`` too, and its classes keep the plain module name."""
    existing = sys.modules.get(plain)
    if existing is None or _in_plugin_namespace(getattr(existing, "__name__", "")):
        return False
    if _module_file(existing) != file:
        return False
    sys.modules.setdefault(full, existing)
    return True


def _import(full: str, file: Path, root: Path, plain: Optional[str] = None) -> None:
    """Import plugin ``file`` as ``full`` (``trinity.plugins.<name>``), once, with its plain
    name ``plain`` as an alias of the same module object."""
    key = str(file)
    if key in _loaded_files and full in sys.modules:
        return
    _refuse_clash(plain or full, file, full, plain, root)
    if plain is not None and _adopt_plain_import(plain, full, file):
        _loaded_files[key] = full
        return
    try:
        module = importlib.import_module(full)
    except Exception as exc:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        raise PluginLoadError(
            f"Failed to load plugin module {plain or full!r} from {file}:\n{tb}"
        ) from exc
    if plain is not None:
        sys.modules.setdefault(plain, module)
    _loaded_files[key] = full


def _load_dir(package: ModuleType, root: Path) -> list[str]:
    """Import every module of plugin directory ``root``; return their plain names."""
    _attach(package.__path__, root, root=True)
    if str(root) not in sys.path:  # what a plugin imports besides plugins (its test helpers)
        sys.path.append(str(root))
    loaded = []
    for name, file in _module_files(root):
        if name.split(".")[0] == "trinity":
            if not _in_plugin_namespace(name):
                raise PluginLoadError(
                    f"Plugin module {name!r} ({file}) is in the 'trinity' namespace, where the "
                    "installed packages' built-ins live. Move it out of the 'trinity' folder of "
                    f"plugin directory {root} (or into 'trinity/plugins')."
                )
            _attach(package.__path__, root / "trinity" / "plugins", root=False)
            _owned.add(str(root / "trinity" / "plugins"))
            _import(name, file, root)
        else:
            _import(f"{PLUGIN_PACKAGE}.{name}", file, root, plain=name)
        loaded.append(name)
    return loaded


def load_plugins(
    plugin_dirs: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
    include_env: bool = True,
    include_namespace: bool = True,
) -> list[str]:
    """Import every module under the plugin directories; return the module names loaded
    (plugin directories' modules by their plain names, ``trinity.plugins`` ones in full).

    Test files (``test_*.py``, ``*_test.py``, ``conftest.py``) are skipped. Safe to call
    several times: a module is imported once per process.

    Raises:
        PluginLoadError: a directory is missing, a module name clashes with an imported module,
            or a plugin raised while importing (its traceback is in the message).
    """
    dirs = get_plugin_dirs(plugin_dirs, include_env=include_env)
    loaded: list[str] = []
    package = _plugin_package() if dirs or include_namespace else None
    for root in dirs:
        loaded.extend(_load_dir(package, root))
        if root not in _loaded_dirs:
            _loaded_dirs.append(root)
    if dirs:
        env_dirs = [p for p in os.environ.get(PLUGIN_DIRS_ENV, "").split(os.pathsep) if p]
        for root in dirs:
            if str(root) not in env_dirs:
                env_dirs.append(str(root))
        os.environ[PLUGIN_DIRS_ENV] = os.pathsep.join(env_dirs)
    if include_namespace:
        loaded.extend(_load_namespace_plugins(package))
    if loaded:
        logger.info("Loaded plugin modules: %s", ", ".join(loaded))
    return loaded


def _namespace_locations(package: ModuleType) -> list[Path]:
    """The ``trinity/plugins`` folders of the path (the guides' layout, or a user's installed
    package), not the plugin directories that ``--plugin-dir`` attached."""
    trinity = sys.modules.get("trinity")
    for entry in list(getattr(trinity, "__path__", [])):
        candidate = Path(entry) / "plugins"
        if candidate.is_dir():
            _attach(package.__path__, candidate.resolve(), root=False)
    return [
        Path(p)
        for p in package.__path__
        if p not in _plugin_roots and p not in _owned and Path(p).is_dir()
    ]


def _load_namespace_plugins(package: Optional[ModuleType]) -> list[str]:
    """Import modules of the ``trinity.plugins`` folders on the path, if there are any."""
    if package is None:
        return []
    loaded = []
    for location in _namespace_locations(package):
        for name, file in _module_files(location):
            full = f"{PLUGIN_PACKAGE}.{name}"
            if str(file.resolve()) in _loaded_files and full in sys.modules:
                continue
            _import(full, file.resolve(), location)
            loaded.append(full)
    return loaded
