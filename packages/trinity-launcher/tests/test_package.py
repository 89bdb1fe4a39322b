"""trinity-launcher is a separately installable distribution owning only `trinity.launcher`."""

from __future__ import annotations

import importlib
from importlib import metadata

from packaging.requirements import Requirement

DIST = "trinity-launcher"
NAMESPACE = "trinity.launcher"
TRINITY_DEPS = {"trinity-core", "trinity-algorithms", "trinity-buffer", "trinity-workflows"}


def test_imports_and_version_matches_metadata():
    module = importlib.import_module(NAMESPACE)
    assert module.__version__ == metadata.version(DIST)


def test_trinity_is_a_namespace_package():
    import trinity

    assert getattr(trinity, "__file__", None) is None, (
        "no distribution may ship trinity/__init__.py"
    )
    assert len(list(trinity.__path__)) >= 1


def test_depends_on_trinity_packages_through_real_version_ranges():
    reqs = [Requirement(r) for r in metadata.requires(DIST) or []]
    trinity_reqs = {r.name: r for r in reqs if r.name.startswith("trinity-")}
    assert set(trinity_reqs) == TRINITY_DEPS
    for name, req in trinity_reqs.items():
        installed = metadata.version(name)
        assert req.specifier.contains(installed), (name, str(req.specifier), installed)
        assert any(s.operator == "<" for s in req.specifier), f"{name} needs an upper bound"
        assert not req.specifier.contains("99.0"), f"{name} range must be bounded"
