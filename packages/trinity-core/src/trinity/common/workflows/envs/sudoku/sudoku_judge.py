"""Trinity-RFT 0.6's module path of ``SudokuJudge`` (resolved from trinity-workflows)."""

from trinity.utils.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {"SudokuJudge": "trinity.workflows.envs.sudoku_board"},
    provider="trinity-workflows",
)
