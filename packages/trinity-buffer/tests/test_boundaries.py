"""trinity-buffer imports trinity-core and its own declared dependencies only.

The experience pipeline gets the algorithm's advantage function injected; the buffer never imports
trinity.algorithm, trinity.workflows or trinity.launcher (a test of the package installed alone).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import trinity.buffer

SRC = Path(trinity.buffer.__file__).resolve().parent
# declared dependencies of trinity-buffer and trinity-core (import names); data_juicer is the
# optional extra and must be imported lazily (inside functions), which this test does not see
# at module level.
ALLOWED_THIRD_PARTY = {"torch", "numpy", "sqlalchemy", "datasets", "pyarrow", "ray", "pydantic"}
ALLOWED_TRINITY = ("trinity.buffer", "trinity.common", "trinity.utils")


def _module_level_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = []
    for node in tree.body:  # module level only: lazy imports of optional extras are fine
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _all_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_no_sibling_package_is_imported_anywhere():
    bad = [
        f"{f.relative_to(SRC)}: {name}"
        for f in sorted(SRC.rglob("*.py"))
        for name in _all_imports(f)
        if name.startswith("trinity") and not name.startswith(ALLOWED_TRINITY)
    ]
    assert not bad, bad


def test_module_level_third_party_imports_are_declared_dependencies():
    bad = []
    for f in sorted(SRC.rglob("*.py")):
        for name in _module_level_imports(f):
            root = name.split(".")[0]
            if root in ("trinity", "__future__") or root in sys.stdlib_module_names:
                continue
            if root not in ALLOWED_THIRD_PARTY:
                bad.append(f"{f.relative_to(SRC)}: {name}")
    assert not bad, bad
