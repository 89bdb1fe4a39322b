"""``sudoku_workflow``: solve a Sudoku a few moves at a time, one Experience per step.

A local environment (pure Python, :mod:`.sudoku_board`): each step shows the model the current
board and asks for up to ``max_moves_per_step`` moves, ``row col value`` one per line (rows and
columns counted from 0). The moves are written on the board in order, then:

* a reply that is not only such lines, or has more moves than allowed, a move onto a filled
  cell, or a board that now repeats a digit in a row, column or box ends the episode with
  reward -1 on that step;
* a full, consistent board ends it with reward +1 (solved: the givens cannot be overwritten, so
  any full consistent board is a solution, whichever of several the puzzle has);
* otherwise the step gets 0 and the next step shows the new board, up to ``max_steps``.

Each step is one :class:`Experience` (prompt = that step's message, response = the reply) with
``eid.run`` = the episode and ``eid.step`` = the step, as Trinity-RFT's workflow produces them.
A step's message holds the whole board, so no conversation history is kept.

Task row: ``puzzle`` (a 4x4 or 9x9 list of lists of ints, 0 = empty; ``solution`` may come
with it and is checked against the givens), or ``seed`` (an int): a puzzle generated from it
with ``workflow_args.size`` and ``difficulty``, the same for every run of the task.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Literal, Optional

from trinity.common.config import ComponentArgs, Field
from trinity.common.experience import Experience
from trinity.common.models.calls import call_model
from trinity.common.workflows import WORKFLOWS, Task, Workflow
from trinity.workflows.common import (
    MissingTaskFieldError,
    ResettableWorkflowMixin,
    generation_kwargs,
    read_workflow_args,
)
from trinity.workflows.envs.sudoku_board import (
    Board,
    check_board,
    generate_puzzle,
    is_complete,
    is_consistent,
    render_board,
)

__all__ = ["REWARDS", "SudokuWorkflow", "apply_moves", "parse_moves"]

SUDOKU_PROMPT = (
    "We are solving a {size}x{size} Sudoku. Empty cells hold 0. Each row, each column and "
    "each {box}x{box} box must end up holding every digit from 1 to {size} exactly once, and "
    "only empty cells may be written.\n\n"
    "Reply with 1 to {max_moves} moves and nothing else, one per line, each as three integers "
    "`row col value`; rows and columns are counted from 0. For example:\n"
    "0 2 4\n"
    "1 3 1\n\n"
    "This is step {step} of {max_steps} ({left} left).\n\n"
    "Board:\n{board}\n"
)
_MOVE = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s*$")

#: step outcomes and their rewards; every outcome but "continue" ends the episode
REWARDS = {
    "continue": 0.0,
    "solved": 1.0,
    "bad_format": -1.0,
    "occupied_cell": -1.0,
    "conflict": -1.0,
}


def parse_moves(text: Optional[str], size: int, max_moves: int) -> Optional[list[tuple]]:
    """The ``(row, col, value)`` moves of a reply, or ``None`` when it is not 1 to
    ``max_moves`` lines of three in-range integers (blank lines aside)."""
    moves = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        found = _MOVE.match(line)
        if found is None:
            return None
        r, c, v = (int(x) for x in found.groups())
        if not (r < size and c < size and 1 <= v <= size):
            return None
        moves.append((r, c, v))
    return moves if 0 < len(moves) <= max_moves else None


def apply_moves(board: Board, moves: Optional[list[tuple]]) -> str:
    """Write ``moves`` on ``board`` (in place) and return the step's outcome (see
    :data:`REWARDS`)."""
    if moves is None:
        return "bad_format"
    for r, c, v in moves:
        if board[r][c] != 0:
            return "occupied_cell"
        board[r][c] = v
    if not is_consistent(board):
        return "conflict"
    return "solved" if is_complete(board) else "continue"


@WORKFLOWS.register_module("sudoku_workflow")
class SudokuWorkflow(ResettableWorkflowMixin, Workflow):
    """Sudoku played a few moves per step (see the module docstring for rules and rewards).

    Runs: ``repeat_times`` episodes of the same board, played at the same time. Experience
    metrics (the episode's, on each of its steps): ``solved``, ``invalid`` (ended by an
    invalid step), ``episode_steps``; ``info``: ``step`` and ``outcome`` of the step.
    """

    class Args(ComponentArgs):
        """``workflow_args`` of ``sudoku_workflow``."""

        max_steps: Annotated[int, Field(ge=1)] = Field(
            20, description="Steps (model replies) per episode."
        )
        max_moves_per_step: Annotated[int, Field(ge=1)] = Field(
            5, description="Moves one reply may make."
        )
        size: Literal[4, 9] = Field(9, description="Size of a puzzle generated from a seed.")
        difficulty: Literal["easy", "medium", "hard"] = Field(
            "medium", description="Share of cells emptied in a generated puzzle (1/3, 1/2, 2/3)."
        )

    can_reset = True
    can_repeat = True
    is_async = True

    def reset(self, task: Task) -> None:
        self.task = task
        self.raw_task: dict = dict(task.raw_task or {})
        self.rollout_args = task.rollout_args
        self.is_eval = task.is_eval
        self.repeat_times = task.repeat_times or task.rollout_args.n or 1
        self.args = read_workflow_args(type(self), task.workflow_args, self.workflow_name)
        self.puzzle = self._read_puzzle()

    def _read_puzzle(self) -> Board:
        row, who = self.raw_task, self.workflow_name
        if "puzzle" in row:
            puzzle = check_board(row["puzzle"], "puzzle", who)
            if row.get("solution") is not None:
                solution = check_board(row["solution"], "solution", who, complete=True)
                if len(solution) != len(puzzle) or any(
                    p not in (0, s)
                    for prow, srow in zip(puzzle, solution, strict=True)
                    for p, s in zip(prow, srow, strict=True)
                ):
                    raise ValueError(
                        f"{who}: the row's 'solution' does not keep the puzzle's givens"
                    )
            return puzzle
        seed = row.get("seed")
        if "seed" not in row:
            raise MissingTaskFieldError(
                f"{who}: the task row needs 'puzzle' (a 4x4 or 9x9 grid, 0 = empty) or 'seed' "
                f"(an int to generate one from); the row has keys {sorted(row) or 'none'}"
            )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"{who}: the row's 'seed' must be an int, got {seed!r}")
        puzzle, _ = generate_puzzle(seed, self.args.size, self.args.difficulty)
        return puzzle

    def build_prompt(self, board: Board, step: int) -> str:
        """The message of step ``step`` (0-based) showing ``board``."""
        size = len(board)
        return SUDOKU_PROMPT.format(
            size=size,
            box=int(size**0.5),
            max_moves=self.args.max_moves_per_step,
            step=step + 1,
            max_steps=self.args.max_steps,
            left=self.args.max_steps - step - 1,
            board=render_board(board),
        )

    async def _episode(self, run: int) -> list[Experience]:
        board = [row[:] for row in self.puzzle]
        steps: list[Experience] = []
        outcome = "continue"
        for step in range(self.args.max_steps):
            message = {"role": "user", "content": self.build_prompt(board, step)}
            replies = await call_model(
                self.model, "chat", [message], **generation_kwargs(self.rollout_args, n=1)
            )
            exp = replies[0]
            moves = parse_moves(exp.response_text, len(board), self.args.max_moves_per_step)
            outcome = apply_moves(board, moves)
            exp.reward = REWARDS[outcome]
            exp.eid.run = self.run_id_base + run
            exp.eid.step = step
            exp.info = {**(exp.info or {}), "step": step, "outcome": outcome}
            steps.append(exp)
            if outcome != "continue":
                break
        episode = {
            "solved": float(outcome == "solved"),
            "invalid": float(REWARDS[outcome] < 0),
            "episode_steps": float(len(steps)),
        }
        for exp in steps:
            exp.metrics = {**(exp.metrics or {}), **episode}
        return steps

    async def run_async(self) -> list[Experience]:
        episodes = await asyncio.gather(*(self._episode(i) for i in range(self.repeat_times)))
        return [exp for steps in episodes for exp in steps]
