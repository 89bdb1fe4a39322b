"""Load user plugin modules (workflows, algorithms, operators ...) from directories.

The guides tell users to drop modules into a plugin directory and pass ``--plugin-dir``
(or set ``TRINITY_PLUGIN_DIRS``, ``os.pathsep``-separated); every module there is imported at
start-up so its ``@REGISTRY.register_module`` decorators run. Modules in an installed
``trinity.plugins`` namespace package are loaded too (the guides' ``trinity/plugins``).

Each plugin directory is put on ``sys.path`` and its modules are imported under their plain
names. That keeps three things true at once: plugin modules can import each other
(``from my_utils import helper``) without being executed twice (which would register their
classes twice), classes pickle by reference, and a Ray worker that loads the same directories
gets the same module names. :func:`load_plugins` records what it loaded in
``TRINITY_PLUGIN_DIRS`` so child processes inherit it.

Plugin modules are user code for the registries (:mod:`trinity.utils.registry`): a plugin that
registers a name a built-in uses (the guides' ``"opmd"``, ``"reward_filter"``) replaces the
built-in in every process that loads the directory, whatever the order of imports. Plain module
names keep that true; a plugin directory may therefore not hold modules in the ``trinity``
namespace (other than ``trinity.plugins``), which would pass for built-ins.

Test files are not plugins: a file named ``test_*.py``, ``*_test.py`` or ``conftest.py``, at
any depth of a plugin directory (or of ``trinity.plugins``), is skipped, so the contract tests
a plugin author keeps beside the plugin (``my_plugins/test_my_workflow.py``) are never imported
by a run -- importing them would import pytest, run ``conftest.py`` fixtures' module code, or
fail outside a test session. Modules whose names are not identifiers, and hidden and
``__pycache__`` folders, are skipped too. A plugin module that imports a test module itself
still gets it (that is an ordinary import).

:func:`loaded_plugin_dirs` lists the directories loaded in this process; the registries' "unknown
name" message shows it (:class:`trinity.utils.registry.UnknownModuleError`), so a plugin name
used without ``--plugin-dir`` says what to pass.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path

from trinity.utils.log import get_logger

__all__ = [
    "PLUGIN_DIRS_ENV",
    "PluginLoadError",
    "get_plugin_dirs",
    "is_test_file",
    "load_plugins",
    "loaded_plugin_dirs",
]

PLUGIN_DIRS_ENV = "TRINITY_PLUGIN_DIRS"

logger = get_logger(__name__)

_loaded_files: dict[str, str] = {}  # absolute file path -> module name
_loaded_dirs: list[Path] = []  # plugin directories load_plugins imported, in order


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


def _import(name: str, file: Path) -> None:
    key = str(file)
    if key in _loaded_files:
        return
    existing = sys.modules.get(name)
    existing_file = getattr(existing, "__file__", None)
    if existing is not None and existing_file and Path(existing_file).resolve() != file:
        raise PluginLoadError(
            f"Plugin module {name!r} ({file}) has the same name as the already imported module "
            f"from {existing_file}. Rename the plugin file."
        )
    try:
        importlib.import_module(name)
    except Exception as exc:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        raise PluginLoadError(f"Failed to load plugin module {name!r} from {file}:\n{tb}") from exc
    _loaded_files[key] = name


def load_plugins(
    plugin_dirs: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
    include_env: bool = True,
    include_namespace: bool = True,
) -> list[str]:
    """Import every module under the plugin directories; return the module names loaded.

    Test files (``test_*.py``, ``*_test.py``, ``conftest.py``) are skipped. Safe to call
    several times: a module is imported once per process.

    Raises:
        PluginLoadError: a directory is missing, a module name clashes with an imported module,
            or a plugin raised while importing (its traceback is in the message).
    """
    dirs = get_plugin_dirs(plugin_dirs, include_env=include_env)
    loaded: list[str] = []
    for root in dirs:
        if str(root) not in sys.path:
            sys.path.append(str(root))
        for name, file in _module_files(root):
            if name.split(".")[0] == "trinity" and not (
                name == "trinity.plugins" or name.startswith("trinity.plugins.")
            ):
                raise PluginLoadError(
                    f"Plugin module {name!r} ({file}) is in the 'trinity' namespace, where the "
                    "installed packages' built-ins live. Move it out of the 'trinity' folder of "
                    f"plugin directory {root} (or into 'trinity/plugins')."
                )
            _import(name, file)
            loaded.append(name)
        if root not in _loaded_dirs:
            _loaded_dirs.append(root)
    if dirs:
        env_dirs = [p for p in os.environ.get(PLUGIN_DIRS_ENV, "").split(os.pathsep) if p]
        for root in dirs:
            if str(root) not in env_dirs:
                env_dirs.append(str(root))
        os.environ[PLUGIN_DIRS_ENV] = os.pathsep.join(env_dirs)
    if include_namespace:
        loaded.extend(_load_namespace_plugins())
    if loaded:
        logger.info("Loaded plugin modules: %s", ", ".join(loaded))
    return loaded


def _load_namespace_plugins() -> list[str]:
    """Import modules of an installed ``trinity.plugins`` package, if there is one."""
    try:
        spec = importlib.util.find_spec("trinity.plugins")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    loaded = []
    for location in spec.submodule_search_locations:
        for name, file in _module_files(Path(location)):
            full = f"trinity.plugins.{name}"
            _import(full, file.resolve())
            loaded.append(full)
    return loaded
