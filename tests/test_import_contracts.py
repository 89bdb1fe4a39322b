"""The contracts of `.importlinter` hold: core imports no sibling package; algorithm, buffer and
workflows import only core; no dependency cycle between the siblings of any package. Runs the real `lint-imports` of this environment, so a
new breach fails CI with import-linter's own report (which import, from where)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_lint_imports_keeps_every_contract() -> None:
    exe = Path(sys.executable).parent / "lint-imports"
    assert exe.exists(), f"import-linter is not installed next to {sys.executable} (dev group)"
    proc = subprocess.run(
        [str(exe), "--no-cache", "--no-logo", str(ROOT / ".importlinter")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout, proc.stdout[-6000:]
