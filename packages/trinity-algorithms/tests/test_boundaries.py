"""trinity-algorithms imports only trinity-core, torch, numpy and the standard library.

verl is a test-only reference (parity tests); the package itself must never import it, or
`pip install trinity-algorithms` would break.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import trinity.algorithm

SRC = Path(trinity.algorithm.__file__).resolve().parent
ALLOWED_THIRD_PARTY = {"torch", "numpy"}
ALLOWED_TRINITY = ("trinity.algorithm", "trinity.common", "trinity.utils")


def _top_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_only_core_torch_numpy_and_stdlib_are_imported():
    files = sorted(SRC.rglob("*.py"))
    assert files
    bad = []
    for f in files:
        for name in _top_imports(f):
            root = name.split(".")[0]
            if root == "trinity":
                if not name.startswith(ALLOWED_TRINITY):
                    bad.append(f"{f.relative_to(SRC)}: {name}")
            elif root not in ALLOWED_THIRD_PARTY and root not in sys.stdlib_module_names:
                bad.append(f"{f.relative_to(SRC)}: {name}")
    assert not bad, bad
