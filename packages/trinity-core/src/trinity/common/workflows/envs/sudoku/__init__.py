"""Trinity-RFT 0.6's Sudoku helpers (``SudokuGenerator``, ``SudokuJudge``): they ship in
trinity-workflows (``trinity.workflows.envs.sudoku_board``) and resolve here on first use,
without core importing its sibling."""

from trinity.utils.lazy import lazy_exports

_IMPLEMENTATION = "trinity.workflows.envs.sudoku_board"

__getattr__, __dir__ = lazy_exports(
    __name__,
    {"SudokuGenerator": _IMPLEMENTATION, "SudokuJudge": _IMPLEMENTATION},
    provider="trinity-workflows",
)
