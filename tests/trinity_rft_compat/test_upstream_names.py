"""Every name that code written for Trinity-RFT imports resolves here, or is documented missing.

``upstream_names.txt`` lists the ``module:name`` pairs (see its header for where they come
from). Each must import from the same path; the few that cannot are in
:data:`DOCUMENTED_MISSING` with the reason, and must really be missing (a name that starts to
resolve fails until its entry is removed). docs/compat.md carries a table generated from both,
between ``<!-- names:begin -->`` and ``<!-- names:end -->``; regenerate it with::

    python tests/trinity_rft_compat/test_upstream_names.py --write-docs
"""

from __future__ import annotations

import importlib
import sys
from itertools import groupby
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
NAMES_FILE = HERE / "upstream_names.txt"
COMPAT_DOC = HERE.parents[1] / "docs" / "compat.md"
BEGIN, END = "<!-- names:begin -->", "<!-- names:end -->"

_EXPLORER = (
    "Trinity-RFT's explorer internals (Ray actors driving vLLM engines); the explorer here is "
    "trinity.launcher.explorer, with a different API"
)

#: ``module:name`` -> why it does not resolve here
DOCUMENTED_MISSING: dict[str, str] = {
    "trinity.common.models.allocator:Allocator": (
        "Trinity-RFT's GPU engine allocation; the launcher places engines here"
    ),
    "trinity.common.models.model:InferenceModel": (
        "Trinity-RFT's engine actor base (vLLM / SGLang); engines here implement "
        "trinity.launcher.engines' interface"
    ),
    "trinity.explorer.explorer:Explorer": _EXPLORER,
    "trinity.explorer.scheduler:Scheduler": _EXPLORER,
    "trinity.trainer.trainer:Trainer": (
        "Trinity-RFT's trainer internals; the verl trainer here is trinity.launcher.trainer"
    ),
}


#: ``module:name`` -> why it imports but does not run here (calling it raises
#: ``NotImplementedError`` saying what to use instead)
DOCUMENTED_UNSUPPORTED: dict[str, str] = {
    "trinity.explorer.workflow_runner:WorkflowRunner": _EXPLORER,
}


def upstream_names() -> list[str]:
    """The ``module:name`` entries of ``upstream_names.txt``, in file order."""
    lines = NAMES_FILE.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def resolve(entry: str) -> object:
    """``from module import name`` for ``"module:name"`` (raises as that import would)."""
    module, _, name = entry.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except AttributeError as exc:
        raise ImportError(f"cannot import name {name!r} from {module!r}: {exc}") from exc


@pytest.mark.parametrize("entry", upstream_names())
def test_name_resolves_or_is_documented_missing(entry: str) -> None:
    if entry in DOCUMENTED_MISSING:
        with pytest.raises(ImportError):
            resolve(entry)  # resolves now? then delete its DOCUMENTED_MISSING entry
    elif entry in DOCUMENTED_UNSUPPORTED:
        with pytest.raises(NotImplementedError):
            resolve(entry)()  # runs now? then delete its DOCUMENTED_UNSUPPORTED entry
    else:
        resolve(entry)


def test_the_list_is_well_formed_and_the_table_names_listed_entries() -> None:
    entries = upstream_names()
    assert entries == sorted(set(entries)), "keep upstream_names.txt sorted, one entry a line"
    for entry in entries:
        module, sep, name = entry.partition(":")
        assert sep and module.startswith("trinity.") and name.isidentifier(), entry
    assert not set(DOCUMENTED_MISSING) - set(entries), "a missing entry not in the list"
    assert not set(DOCUMENTED_UNSUPPORTED) - set(entries), "an unsupported entry not in the list"


def docs_table() -> str:
    """The markdown table of docs/compat.md: one row per module and status."""
    rows = ["| Trinity-RFT module | names | here |", "|---|---|---|"]

    def status(entry: str) -> str:
        if entry in DOCUMENTED_MISSING:
            return "missing: " + DOCUMENTED_MISSING[entry]
        if entry in DOCUMENTED_UNSUPPORTED:
            return (
                "importable, not supported (raises NotImplementedError): "
                + (DOCUMENTED_UNSUPPORTED[entry])
            )
        return "importable"

    keyed = [(e.partition(":")[0], status(e), e) for e in upstream_names()]
    for (module, why), group in groupby(keyed, key=lambda row: row[:2]):
        names = ", ".join(f"`{entry.partition(':')[2]}`" for _, _, entry in group)
        rows.append(f"| `{module}` | {names} | {why} |")
    return "\n".join(rows)


def _replace_table(text: str, table: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def test_the_compat_doc_table_is_current() -> None:
    text = COMPAT_DOC.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"docs/compat.md lacks {BEGIN} ... {END}"
    assert _replace_table(text, docs_table()) == text, (
        "docs/compat.md's names table is out of date: run "
        "python tests/trinity_rft_compat/test_upstream_names.py --write-docs"
    )


if __name__ == "__main__":  # regenerate the docs table
    if sys.argv[1:] != ["--write-docs"]:
        sys.exit("usage: python tests/trinity_rft_compat/test_upstream_names.py --write-docs")
    COMPAT_DOC.write_text(
        _replace_table(COMPAT_DOC.read_text(encoding="utf-8"), docs_table()), encoding="utf-8"
    )
