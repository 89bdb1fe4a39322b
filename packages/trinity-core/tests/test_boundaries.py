"""trinity-core stands alone: it imports no sibling package and ships no trinity/__init__.py."""

from __future__ import annotations

import ast
from pathlib import Path

import trinity.common

SRC = Path(trinity.common.__file__).resolve().parents[1]  # .../src/trinity
SIBLINGS = (
    "trinity.algorithm",
    "trinity.buffer",
    "trinity.workflows",
    "trinity.launcher",
    "trinity.manager",
)


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_core_sources_import_no_sibling_package():
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 5
    offenders = [
        f"{f.relative_to(SRC)}: {name}"
        for f in files
        for name in _imports(f)
        if name.startswith(SIBLINGS)
    ]
    assert not offenders, offenders


def test_trinity_is_a_namespace_package():
    assert not (SRC / "__init__.py").exists()
    import trinity

    assert getattr(trinity, "__file__", None) is None
