"""``sudoku_workflow`` and its pure-Python boards."""

from __future__ import annotations

import pytest

from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, run_task
from trinity.workflows.common import MissingTaskFieldError, WorkflowArgsError
from trinity.workflows.envs.sudoku import SudokuWorkflow, apply_moves, parse_moves
from trinity.workflows.envs.sudoku_board import (
    check_board,
    generate_puzzle,
    is_complete,
    is_consistent,
    render_board,
)

SOLUTION = [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]
# three holes: (0, 0) = 1, (1, 1) = 4, (3, 3) = 1
PUZZLE = [[0, 2, 3, 4], [3, 0, 1, 2], [2, 1, 4, 3], [4, 3, 2, 0]]


def _task(row, repeat_times=1, **kwargs):
    return Task(workflow="sudoku_workflow", raw_task=row, repeat_times=repeat_times, **kwargs)


def _board_of(messages) -> list[list[int]]:
    lines = messages[-1]["content"].split("Board:\n", 1)[1].strip().splitlines()
    return [[int(v) for v in line.split()] for line in lines]


# ---------------------------------------------------------------------- boards
@pytest.mark.parametrize(("size", "difficulty", "holes"), [(4, "easy", 5), (9, "medium", 40)])
def test_generated_puzzles_are_seeded_and_keep_their_solution(size, difficulty, holes):
    puzzle, solution = generate_puzzle(7, size, difficulty)
    assert (puzzle, solution) == generate_puzzle(7, size, difficulty)
    assert puzzle != generate_puzzle(8, size, difficulty)[0]
    assert is_complete(solution) and is_consistent(solution)
    assert sum(v == 0 for row in puzzle for v in row) == holes
    assert all(
        p in (0, s)
        for pr, sr in zip(puzzle, solution, strict=True)
        for p, s in zip(pr, sr, strict=True)
    )
    assert sum(v == 0 for row in generate_puzzle(7, 9, "hard")[0] for v in row) == 54


def test_consistency_checks_rows_columns_and_boxes():
    assert is_consistent(PUZZLE) and not is_complete(PUZZLE)
    assert not is_consistent([[1, 1, 0, 0], [0] * 4, [0] * 4, [0] * 4])  # row
    assert not is_consistent([[1, 0, 0, 0], [0] * 4, [1, 0, 0, 0], [0] * 4])  # column
    assert not is_consistent([[1, 0, 0, 0], [0, 1, 0, 0], [0] * 4, [0] * 4])  # box
    assert render_board(PUZZLE).splitlines()[0] == "0 2 3 4"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1234", "must be a square list of lists"),
        ([[1, 2], [2, 1]], "has 2 rows; allowed: 4, 9"),
        ([[0] * 4, [0] * 4, [0] * 3, [0] * 4], "row 2 of 'puzzle' is not 4 cells"),
        ([[5, 0, 0, 0], [0] * 4, [0] * 4, [0] * 4], "holds 5; allowed: ints 0 \\(empty\\) to 4"),
        ([[True, 0, 0, 0], [0] * 4, [0] * 4, [0] * 4], "holds True"),
        ([[1, 1, 0, 0], [0] * 4, [0] * 4, [0] * 4], "repeats a digit"),
    ],
)
def test_check_board_names_the_key_and_the_bad_value(value, message):
    with pytest.raises(ValueError, match=message):
        check_board(value, "puzzle", "sudoku_workflow")


def test_parse_moves():
    assert parse_moves("0 0 1\n\n 1 1 4 \n", 4, 5) == [(0, 0, 1), (1, 1, 4)]
    assert parse_moves("Here: 0 0 1", 4, 5) is None  # only move lines
    assert parse_moves("0 0 5", 4, 5) is None  # digit out of range
    assert parse_moves("4 0 1", 4, 5) is None  # row out of range
    assert parse_moves("0 0 0", 4, 5) is None  # 0 is not a digit
    assert parse_moves("", 4, 5) is None and parse_moves(None, 4, 5) is None
    assert parse_moves("0 0 1\n1 1 4", 4, 1) is None  # too many moves


def test_apply_moves_outcomes():
    board = [row[:] for row in PUZZLE]
    assert apply_moves(board, [(0, 0, 1)]) == "continue" and board[0][0] == 1
    assert apply_moves([r[:] for r in PUZZLE], None) == "bad_format"
    assert apply_moves([r[:] for r in PUZZLE], [(0, 1, 1)]) == "occupied_cell"
    assert apply_moves([r[:] for r in PUZZLE], [(0, 0, 2)]) == "conflict"
    assert apply_moves(board, [(1, 1, 4), (3, 3, 1)]) == "solved" and board == SOLUTION


# ---------------------------------------------------------------------- the workflow
def test_an_episode_that_solves_the_board_step_by_step():
    model = FakeModelWrapper(["0 0 1", "1 1 4\n3 3 1"])
    exps = run_task(_task({"puzzle": PUZZLE, "solution": SOLUTION}), model)
    assert [e.reward for e in exps] == [0.0, 1.0]
    assert [(e.eid.run, e.eid.step) for e in exps] == [(0, 0), (0, 1)]
    assert [e.info["outcome"] for e in exps] == ["continue", "solved"]
    episode = {"solved": 1.0, "invalid": 0.0, "episode_steps": 2.0}
    assert all(e.metrics == episode for e in exps)
    # each step is one message holding the board as it stands, no history
    first, second = model.calls_of("chat")
    assert len(first.messages) == len(second.messages) == 1
    assert _board_of(first.messages) == PUZZLE
    assert _board_of(second.messages)[0] == [1, 2, 3, 4]
    assert "step 2 of 20 (18 left)" in second.messages[0]["content"]
    assert "1 to 5 moves" in first.messages[0]["content"]
    # each experience is exactly that step's prompt and reply
    exp = exps[1]
    prompt = model.tokenizer.apply_chat_template(second.messages, add_generation_prompt=True)
    assert exp.tokens[: exp.prompt_length].tolist() == prompt
    reply = model.tokenizer.encode("1 1 4\n3 3 1") + [model.tokenizer.eos_token_id]
    assert exp.tokens[exp.prompt_length :].tolist() == reply


@pytest.mark.parametrize(
    ("replies", "outcome"),
    [
        (["I would put a 1 top left."], "bad_format"),
        (["0 1 1"], "occupied_cell"),
        (["0 0 2"], "conflict"),
    ],
)
def test_an_invalid_step_ends_the_episode_with_minus_one(replies, outcome):
    exps = run_task(_task({"puzzle": PUZZLE}), FakeModelWrapper(replies))
    assert [e.reward for e in exps] == [-1.0]
    assert exps[0].info["outcome"] == outcome
    assert exps[0].metrics == {"solved": 0.0, "invalid": 1.0, "episode_steps": 1.0}


def test_max_steps_ends_an_unfinished_episode_with_zero():
    model = FakeModelWrapper(["0 0 1", "1 1 4"])
    exps = run_task(_task({"puzzle": PUZZLE}, workflow_args={"max_steps": 2}), model)
    assert [e.reward for e in exps] == [0.0, 0.0]
    assert exps[-1].metrics == {"solved": 0.0, "invalid": 0.0, "episode_steps": 2.0}


def test_runs_play_the_same_board_independently():
    def player(messages, sample_index):
        board = _board_of(messages)
        return "0 0 1" if board[0][0] == 0 else "1 1 3"  # then a conflict

    exps = run_task(_task({"puzzle": PUZZLE}, repeat_times=3), FakeModelWrapper(player))
    assert sorted((e.eid.run, e.eid.step, e.reward) for e in exps) == [
        (run, step, reward) for run in range(3) for step, reward in ((0, 0.0), (1, -1.0))
    ]


def test_a_seed_row_plays_a_generated_puzzle():
    puzzle, _ = generate_puzzle(11, 4, "hard")
    model = FakeModelWrapper("x")
    run_task(_task({"seed": 11}, workflow_args={"size": 4, "difficulty": "hard"}), model)
    assert _board_of(model.calls[0].messages) == puzzle


def test_reset_switches_the_board():
    model = FakeModelWrapper("x")
    workflow = _task({"puzzle": PUZZLE}).to_workflow(model)
    other = [row[:] for row in SOLUTION]
    other[2][2] = 0
    workflow.reset(_task({"puzzle": other}))
    assert workflow.puzzle == other


@pytest.mark.parametrize(
    ("row", "error", "message"),
    [
        ({"board": PUZZLE}, MissingTaskFieldError, r"needs 'puzzle'.*or 'seed'.*keys \['board'\]"),
        ({"seed": "7"}, ValueError, r"'seed' must be an int, got '7'"),
        ({"puzzle": [[1, 2], [2, 1]]}, ValueError, r"'puzzle' has 2 rows"),
        (
            {
                "puzzle": PUZZLE,
                "solution": [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 0]],
            },
            ValueError,
            r"'solution' must be a complete grid",
        ),
        (
            {
                "puzzle": PUZZLE,
                "solution": [[2, 1, 3, 4], [3, 4, 1, 2], [1, 2, 4, 3], [4, 3, 2, 1]],
            },
            ValueError,
            r"'solution' does not keep the puzzle's givens",
        ),
    ],
)
def test_bad_rows_are_refused_naming_the_key(row, error, message):
    with pytest.raises(error, match=message):
        run_task(_task(row), FakeModelWrapper("x"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"max_steps": 0}, r"workflow_args.max_steps: must be >= 1, got 0"),
        ({"size": 16}, r"workflow_args.size: invalid value 16; allowed values: 4 or 9"),
        ({"difficulty": "brutal"}, r"invalid value 'brutal'; allowed values: 'easy', 'medium'"),
        ({"max_move_per_step": 2}, r"did you mean 'max_moves_per_step'"),
    ],
)
def test_bad_workflow_args_are_refused_naming_the_key(args, message):
    with pytest.raises(WorkflowArgsError, match=message):
        run_task(_task({"puzzle": PUZZLE}, workflow_args=args), FakeModelWrapper("x"))


def test_registered_under_trinity_rfts_name():
    assert WORKFLOWS.get("sudoku_workflow") is SudokuWorkflow


def test_trinity_rft_0_6_sudoku_helpers_at_their_module_paths():
    from trinity.common.workflows.envs.sudoku import SudokuGenerator as Gen
    from trinity.common.workflows.envs.sudoku.sudoku_generator import SudokuGenerator
    from trinity.common.workflows.envs.sudoku.sudoku_judge import SudokuJudge

    assert Gen is SudokuGenerator
    for size in (4, 9):
        puzzle, solution = SudokuGenerator(size=size, seed=1).generate("easy")
        assert len(puzzle) == len(solution) == size
        assert SudokuJudge.is_valid(puzzle) and SudokuJudge.is_valid(solution)
        assert all(0 not in row for row in solution) and any(0 in row for row in puzzle)
        assert SudokuJudge.is_solved(solution, [list(r) for r in solution])
    assert SudokuGenerator(size=4, seed=3).generate() == SudokuGenerator(size=4, seed=3).generate()
    assert not SudokuJudge.is_valid([[1, 1, 0, 0]] + [[0] * 4] * 3)


def test_trinity_rft_0_6_workflow_module_paths():
    from trinity.common.workflows.math_rm_workflow import AsyncMathRMWorkflow, MathRMWorkflow
    from trinity.common.workflows.math_ruler_workflow import MathRULERWorkflow
    from trinity.workflows.ruler import MathRULERWorkflow as Ruler
    from trinity.workflows.single_turn import MathRMWorkflow as RM

    assert MathRMWorkflow is RM and issubclass(AsyncMathRMWorkflow, RM)
    assert MathRULERWorkflow is Ruler
