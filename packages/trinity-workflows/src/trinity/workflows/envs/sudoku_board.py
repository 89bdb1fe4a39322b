"""Sudoku boards in pure Python: generate a puzzle from a seed, check a board, apply moves.

A board is a list of ``size`` rows of ``size`` ints, ``0`` for an empty cell; ``size`` is a
perfect square (4 or 9 in practice), the boxes are ``sqrt(size)`` wide. These helpers hold no
state, so the workflow can keep one board per episode and check it after every move.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any, Optional

__all__ = [
    "DIFFICULTIES",
    "Board",
    "SudokuGenerator",
    "SudokuJudge",
    "check_board",
    "generate_puzzle",
    "is_complete",
    "is_consistent",
    "render_board",
]

Board = list[list[int]]

#: share of the cells emptied for each difficulty of a generated puzzle (numerator, denominator)
DIFFICULTIES = {"easy": (1, 3), "medium": (1, 2), "hard": (2, 3)}


def _box(size: int) -> int:
    box = math.isqrt(size)
    if size < 1 or box * box != size:
        raise ValueError(f"a sudoku's size must be a perfect square (4, 9, ...), got {size}")
    return box


def _groups(size: int) -> list[list[tuple[int, int]]]:
    """The cells of every row, column and box: each must hold distinct digits."""
    box = _box(size)
    rows = [[(r, c) for c in range(size)] for r in range(size)]
    cols = [[(r, c) for r in range(size)] for c in range(size)]
    boxes = [
        [(br + r, bc + c) for r in range(box) for c in range(box)]
        for br in range(0, size, box)
        for bc in range(0, size, box)
    ]
    return rows + cols + boxes


def is_consistent(board: Sequence[Sequence[int]]) -> bool:
    """No digit twice in a row, a column or a box (empty cells ignored)."""
    for group in _groups(len(board)):
        digits = [board[r][c] for r, c in group if board[r][c] != 0]
        if len(digits) != len(set(digits)):
            return False
    return True


def is_complete(board: Sequence[Sequence[int]]) -> bool:
    """Every cell filled."""
    return all(v != 0 for row in board for v in row)


def render_board(board: Sequence[Sequence[int]]) -> str:
    """One line per row, cells separated by spaces (``0`` = empty)."""
    return "\n".join(" ".join(str(v) for v in row) for row in board)


def check_board(value: Any, key: str, who: str, complete: bool = False) -> Board:
    """``value`` as a board, or a ``ValueError`` naming ``key``, the bad value and the rule.

    A board is a square list of lists of ints whose size is a perfect square (4, 9, ...), with
    digits ``0`` (empty) to ``size`` and no digit repeated in a row, column or box;
    ``complete`` also refuses empty cells (a solution).
    """
    shown = repr(value)[:200]
    rule = "a square list of lists of ints, size 4 or 9 (a perfect square), 0 for empty"
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{who}: the row's {key!r} must be {rule}; got {shown}")
    size = len(value)
    if math.isqrt(size) ** 2 != size or size < 4:
        raise ValueError(f"{who}: the row's {key!r} has {size} rows; allowed: 4, 9, 16 ...")
    board: Board = []
    for r, row in enumerate(value):
        if not isinstance(row, (list, tuple)) or len(row) != size:
            raise ValueError(f"{who}: row {r} of {key!r} is not {size} cells: {row!r}")
        for v in row:
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= size:
                raise ValueError(
                    f"{who}: {key!r} row {r} holds {v!r}; allowed: ints 0 (empty) to {size}"
                )
        board.append(list(row))
    if not is_consistent(board):
        raise ValueError(f"{who}: {key!r} repeats a digit in a row, column or box: {shown}")
    if complete and not is_complete(board):
        raise ValueError(f"{who}: {key!r} must be a complete grid (no 0): {shown}")
    return board


def _fill(board: Board, rng: random.Random, box: int) -> bool:
    """Fill the empty cells by randomised backtracking; True once the board is full."""
    size = len(board)
    for r in range(size):
        for c in range(size):
            if board[r][c] != 0:
                continue
            used = set(board[r]) | {board[i][c] for i in range(size)}
            br, bc = r - r % box, c - c % box
            used |= {board[i][j] for i in range(br, br + box) for j in range(bc, bc + box)}
            digits = [d for d in range(1, size + 1) if d not in used]
            rng.shuffle(digits)
            for digit in digits:
                board[r][c] = digit
                if _fill(board, rng, box):
                    return True
            board[r][c] = 0
            return False
    return True


def generate_puzzle(
    seed: Optional[int], size: int = 9, difficulty: str = "medium"
) -> tuple[Board, Board]:
    """``(puzzle, solution)``: a random full grid, then a share of its cells emptied.

    The same ``seed`` gives the same puzzle (every run of a task, on every runner, plays the
    same board). The puzzle may have other solutions than ``solution``; any complete, valid
    board that keeps the givens solves it.
    """
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty {difficulty!r}; allowed: {', '.join(DIFFICULTIES)}")
    box = _box(size)
    rng = random.Random(seed)
    solution: Board = [[0] * size for _ in range(size)]
    _fill(solution, rng, box)
    puzzle = [row[:] for row in solution]
    cells = [(r, c) for r in range(size) for c in range(size)]
    rng.shuffle(cells)
    num, den = DIFFICULTIES[difficulty]
    for r, c in cells[: size * size * num // den]:
        puzzle[r][c] = 0
    return puzzle, solution


class SudokuGenerator:
    """Trinity-RFT 0.6's generator (``trinity.common.workflows.envs.sudoku``): a random full
    grid of ``size`` (a perfect square), then a share of its cells emptied.

    ``generate(difficulty)`` returns ``(puzzle, solution)`` as :func:`generate_puzzle` does; an
    unknown difficulty reads as ``"medium"``, as in Trinity-RFT. ``seed`` (ours) makes the
    puzzles reproducible; the default draws a fresh one each time.
    """

    def __init__(self, size: int = 9, seed: Optional[int] = None) -> None:
        _box(size)  # a perfect square, or a ValueError naming the size
        self.size = size
        self._rng = random.Random(seed)

    def generate(self, difficulty: str = "medium") -> tuple[Board, Board]:
        if difficulty not in DIFFICULTIES:
            difficulty = "medium"
        return generate_puzzle(self._rng.getrandbits(64), self.size, difficulty)


class SudokuJudge:
    """Trinity-RFT 0.6's board checks (``trinity.common.workflows.envs.sudoku``)."""

    @staticmethod
    def is_valid(board: Sequence[Sequence[int]]) -> bool:
        """No digit twice in a row, a column or a box; empty cells (``0``) allowed."""
        return is_consistent(board)

    @staticmethod
    def is_solved(board: Sequence[Sequence[int]], solution: Sequence[Sequence[int]]) -> bool:
        """The board equals the given solution."""
        return [list(row) for row in board] == [list(row) for row in solution]
