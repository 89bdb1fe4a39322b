"""docs/compat.md's table of the upstream unit tests that do not pass here is the conftest's.

Every test ``conftest.py`` marks as a documented difference (strict ``xfail``, pinned to the
exception it must fail with), skips as out of scope, or does not collect (its file imports a
module documented as missing) is a row of the table, "(fails on 0.6.0 too)" where Trinity-RFT
0.6.0 fails it as well (``conftest.FAILS_ON_06_FILES`` or a "Not ours" reason), between ``<!-- upstream-tests:begin -->``
and ``<!-- upstream-tests:end -->``, with the reason the mark carries; regenerate it with::

    python tests/trinity_rft_compat/test_upstream_table.py --write-docs
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
COMPAT_DOC = HERE.parents[1] / "docs" / "compat.md"
BEGIN, END = "<!-- upstream-tests:begin -->", "<!-- upstream-tests:end -->"


def _conftest() -> ModuleType:
    """This directory's conftest, loaded from its file (it is not an importable module)."""
    spec = importlib.util.spec_from_file_location("_compat_conftest", HERE / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def docs_table() -> str:
    conftest = _conftest()
    rows = [
        "| upstream test (`tests/…` of Trinity-RFT) | here | why |",
        "|---|---|---|",
    ]
    for node, (why, exc) in sorted(conftest.DOCUMENTED_DIFFERENCES.items()):
        file = node.split("::", 1)[0]
        passes_06 = not why.startswith(conftest._UPSTREAM_06)
        passes_06 = passes_06 and file not in conftest.FAILS_ON_06_FILES
        status = f"xfail, `{exc.__name__}`" + ("" if passes_06 else " (fails on 0.6.0 too)")
        rows.append(f"| `{node}` | {status} | {_cell(why)} |")
    for node, why in sorted(conftest.OUT_OF_SCOPE.items()):
        rows.append(f"| `{node}` | skipped (out of scope) | {_cell(why)} |")
    for file, why in sorted(conftest.DOCUMENTED_MISSING_FILES.items()):
        rows.append(
            f"| `{file}` (every test) | not collected (fails on 0.6.0 too) | {_cell(why)} |"
        )
    return "\n".join(rows)


def _replace_table(text: str, table: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def test_the_upstream_tests_table_is_current() -> None:
    text = COMPAT_DOC.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"docs/compat.md lacks {BEGIN} ... {END}"
    assert _replace_table(text, docs_table()) == text, (
        "docs/compat.md's table of upstream tests is out of date: run "
        "python tests/trinity_rft_compat/test_upstream_table.py --write-docs"
    )


if __name__ == "__main__":  # regenerate the docs table
    if sys.argv[1:] != ["--write-docs"]:
        sys.exit("usage: python tests/trinity_rft_compat/test_upstream_table.py --write-docs")
    COMPAT_DOC.write_text(
        _replace_table(COMPAT_DOC.read_text(encoding="utf-8"), docs_table()), encoding="utf-8"
    )
