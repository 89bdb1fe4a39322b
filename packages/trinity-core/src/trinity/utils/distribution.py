"""Consistency checks of installed Trinity distributions.

Trinity ships as five separately installed distributions that must agree on versions and share
the ``trinity`` namespace. These checks answer "is this installation sound?" — each package's
tests run them on itself, and tools can run :func:`check_installation` before a job starts, so a
half-upgraded environment fails with a list of reasons instead of an obscure ImportError.
"""

from __future__ import annotations

import importlib
from importlib import metadata

from packaging.requirements import Requirement

__all__ = ["check_distribution", "check_installation", "installed_trinity_distributions"]


def installed_trinity_distributions() -> dict[str, str]:
    """Installed ``trinity-*`` distributions and their versions."""
    found = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("trinity-"):
            found[name] = dist.version
    return found


def _namespace_problems() -> list[str]:
    import trinity

    if getattr(trinity, "__file__", None) is not None:
        return [
            f"'trinity' is a regular package ({trinity.__file__}); it must stay a PEP 420 "
            "namespace: no distribution may ship trinity/__init__.py"
        ]
    return []


def _requirement_problems(dist: str, installed: dict[str, str]) -> tuple[list[str], set[str]]:
    problems, deps = [], set()
    for raw in metadata.requires(dist) or []:
        req = Requirement(raw)
        if not req.name.lower().startswith("trinity-"):
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an optional extra
        deps.add(req.name.lower())
        if req.url:
            problems.append(f"{dist} pins {req.name} to a URL or path ({raw}); use a version range")
            continue
        if not any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier):
            problems.append(f"{dist} requires {req.name}{req.specifier} with no upper bound")
        have = installed.get(req.name.lower())
        if have is None:
            problems.append(f"{dist} requires {req.name}{req.specifier}, which is not installed")
        elif not req.specifier.contains(have, prereleases=True):
            problems.append(
                f"{dist} requires {req.name}{req.specifier} but {req.name} {have} is installed"
            )
    return problems, deps


def check_distribution(
    dist: str, namespace: str, expected_trinity_deps: set[str] | None = None
) -> list[str]:
    """Problems with one installed Trinity distribution (an empty list when it is sound).

    Checks that ``namespace`` imports, that its ``__version__`` (if any) is the distribution's,
    that ``trinity`` is still a namespace package, and that every Trinity requirement is a bounded
    range satisfied by what is installed. ``expected_trinity_deps`` additionally pins which
    Trinity distributions it may depend on (package boundaries).
    """
    try:
        version = metadata.version(dist)
    except metadata.PackageNotFoundError:
        return [f"distribution {dist} is not installed"]
    problems = _namespace_problems()
    try:
        module = importlib.import_module(namespace)
    except Exception as exc:  # report, do not crash: this is a diagnostic
        return problems + [f"{namespace} (from {dist}) fails to import: {exc!r}"]
    declared = getattr(module, "__version__", None)
    if declared is not None and declared != version:
        problems.append(f"{namespace}.__version__ is {declared} but {dist} is {version}")
    req_problems, deps = _requirement_problems(dist, installed_trinity_distributions())
    problems += req_problems
    if expected_trinity_deps is not None and deps != set(expected_trinity_deps):
        problems.append(
            f"{dist} depends on Trinity packages {sorted(deps)}, expected "
            f"{sorted(expected_trinity_deps)}"
        )
    return problems


def check_installation() -> list[str]:
    """Problems across every installed Trinity distribution (version ranges, namespace)."""
    installed = installed_trinity_distributions()
    problems = _namespace_problems() if installed else []
    for dist in sorted(installed):
        problems += _requirement_problems(dist, installed)[0]
    return problems
