"""Trinity-RFT 0.6's module path of ``SudokuGenerator`` (resolved from trinity-workflows)."""

from trinity.utils.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {"SudokuGenerator": "trinity.workflows.envs.sudoku_board"},
    provider="trinity-workflows",
)
