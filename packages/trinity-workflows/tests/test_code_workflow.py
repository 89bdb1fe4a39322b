"""``code_workflow`` / ``code_test_reward`` end to end: scripted model answers, real sandbox runs.

Each test format (stdin/stdout pairs, assert statements, a HumanEval check function) is run with
a correct answer, a partly correct one, a hostile one and one without code; the reward is the
pass rate and the reason a sample lost credit lands in ``Experience.info``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time

import pytest

from trinity.common.config import FormatConfig
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.rewards import REWARD_FUNCTIONS
from trinity.common.workflows import WORKFLOWS, Task, run_task
from trinity.workflows.common import MissingTaskFieldError
from trinity.workflows.rewards.base import compute_reward
from trinity.workflows.rewards.code import CodeTestRewardFn, extract_program, outputs_match

if shutil.which("bwrap") is None:
    if os.environ.get("TRINITY_REQUIRE_SANDBOX") == "1":
        raise RuntimeError(
            "bubblewrap is required here (TRINITY_REQUIRE_SANDBOX=1) but not installed (apt install bubblewrap)"
        )
    pytest.skip("bubblewrap is not installed (apt install bubblewrap)", allow_module_level=True)

#: Small per-test limits so hostile answers cost about a second.
FAST = {"timeout": 1.5, "sandbox": {"cpu_time_s": 1}}


def fenced(code: str, prose: str = "Here is my solution.") -> str:
    return f"{prose}\n```python\n{code.strip()}\n```\nThis runs in O(n)."


def code_task(row: dict, repeat_times: int = 4, **kwargs) -> Task:
    kwargs.setdefault("reward_fn_args", FAST)
    return Task(
        workflow="code_workflow",
        raw_task=row,
        format_args=FormatConfig(prompt_key="question"),
        repeat_times=repeat_times,
        **kwargs,
    )


# ------------------------------------------------------------------------- the three formats
IO_ROW = {
    "question": "Read two integers a and b and print a + b.",
    # APPS stores its tests as a JSON string
    "input_output": json.dumps(
        {"inputs": ["1 2\n", "10 20\n", "-5 5\n"], "outputs": ["3\n", "30", "0\n"]}
    ),
}
IO_ANSWERS = [
    # correct; trailing spaces and blank lines do not matter
    fenced("a, b = map(int, input().split())\nprint(a + b, ' ')\nprint()"),
    # right on 2 of 3 tests (wrong for negative numbers)
    fenced("a, b = map(int, input().split())\nprint(abs(a) + abs(b))"),
    # a fork bomb
    fenced("import os\nwhile True:\n    os.fork()"),
    "You can add the two numbers with the plus operator.",
]

ASSERT_ROW = {
    "question": "Write a function is_even(n) that tells whether n is even.",
    "test_setup_code": "import math",
    "test_list": ["assert is_even(2)", "assert not is_even(3)", "assert is_even(math.floor(10.5))"],
}
ASSERT_ANSWERS = [
    fenced("def is_even(n):\n    return n % 2 == 0\n\nif __name__ == '__main__':\n    input()"),
    fenced("def is_even(n):\n    return n < 5 and n % 2 == 0"),  # fails on 10
    fenced("def is_even(n):\n    while True:\n        pass"),  # an infinite loop
    "I am not sure.",
]

HUMANEVAL_ROW = {
    "question": "def add(x: int, y: int) -> int:\n    '''Add two numbers x and y.'''\n",
    "test": (
        "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
    ),
    "entry_point": "add",
}
HUMANEVAL_ANSWERS = [
    fenced("def add(x: int, y: int) -> int:\n    return x + y"),
    fenced("def add(x: int, y: int) -> int:\n    return x + y if x > 0 else 1"),
    fenced("def add(x, y):\n    data = bytearray(10**10)"),  # a huge allocation
    "The answer is to add x and y.",
]


@pytest.mark.parametrize(
    "row, answers, partial, hostile_reasons",
    [
        # the fork bomb's main process dies when its fork() hits the process limit -- or, on
        # a loaded machine, the wall-time limit stops it first. Its children's tracebacks
        # share its stderr, so the last line (the reason's) can be any line of theirs: a CI run
        # read 'test 1: exit code 1: File "<sandbox>/main.py", line 3, in <module>'
        pytest.param(
            IO_ROW,
            IO_ANSWERS,
            2 / 3,
            ("BlockingIOError", "test 1: timeout after 1.5s", "test 1: exit code 1"),
            id="stdin-stdout",
        ),
        pytest.param(
            ASSERT_ROW,
            ASSERT_ANSWERS,
            2 / 3,
            ("test 1: CPU time limit exceeded", "test 1: timeout after 1.5s"),
            id="assert",
        ),
        pytest.param(
            HUMANEVAL_ROW, HUMANEVAL_ANSWERS, 0.0, ("memory limit exceeded",), id="humaneval"
        ),
    ],
)
def test_each_format_scores_correct_partial_hostile_and_missing_code(
    row: dict, answers: list[str], partial: float, hostile_reasons: tuple[str, ...]
) -> None:
    model = FakeModelWrapper(responses=answers)
    exps = run_task(code_task(row), model)

    assert [e.eid.run for e in exps] == [0, 1, 2, 3]
    correct, part, hostile, no_code = exps
    total = 1 if "entry_point" in row else 3

    assert correct.reward == 1.0
    assert correct.info["code_reason"] == f"all {total} tests passed"
    assert correct.metrics["tests_passed"] == correct.metrics["tests_total"] == total
    assert correct.metrics["pass_rate"] == 1.0 and correct.metrics["reward_error"] == 0.0

    assert part.reward == pytest.approx(partial)
    assert part.metrics["tests_passed"] == round(partial * total)
    failing = [r for r in part.info["code_results"] if not r["passed"]]
    assert failing and part.info["code_reason"].startswith(f"test {failing[0]['test']}: ")

    assert hostile.reward == 0.0
    assert any(r in hostile.info["code_reason"] for r in hostile_reasons), hostile.info
    assert all(not r["passed"] for r in hostile.info["code_results"])

    assert no_code.reward == 0.0
    assert no_code.info["code_reason"] == "no code block"
    assert no_code.info["code_results"] == [] and no_code.metrics["tests_total"] == total


def test_failure_reasons_name_the_test_and_what_went_wrong() -> None:
    exps = run_task(code_task(IO_ROW, repeat_times=1), FakeModelWrapper(responses=[IO_ANSWERS[1]]))
    assert exps[0].info["code_reason"] == "test 3: wrong answer: expected '0', got '10'"
    exps = run_task(
        code_task(ASSERT_ROW, repeat_times=2), FakeModelWrapper(responses=ASSERT_ANSWERS[1:3])
    )
    assert exps[0].info["code_reason"] == "test 3: assertion failed"
    loop_results = exps[1].info["code_results"]
    assert {r["status"] for r in loop_results} <= {"cpu_limit", "timeout"}
    assert all(
        r["reason"] in ("timeout after 1.5s (wall-time limit)", "CPU time limit exceeded (1s)")
        for r in loop_results
    )


def test_exiting_before_the_tests_run_does_not_pass() -> None:
    """The known reward hack: ``exit(0)`` at import time so that no assert ever fails."""
    hacks = [
        fenced("import sys\nsys.exit(0)"),
        fenced("import os\nos._exit(0)"),
        # a wrong solution that turns every failed assert into a clean exit
        fenced(
            "import sys, os\n"
            "sys.excepthook = lambda *a: os._exit(0)\n"
            "def is_even(n):\n"
            "    return n % 2 == 1"
        ),
    ]
    exps = run_task(code_task(ASSERT_ROW, repeat_times=3), FakeModelWrapper(responses=hacks))
    for exp in exps:
        assert exp.reward == 0.0, exp.info["code_reason"]
        assert "no completion marker" in exp.info["code_reason"]


def test_syntax_error_scores_zero_without_running_anything() -> None:
    exps = run_task(
        code_task(ASSERT_ROW, repeat_times=1),
        FakeModelWrapper(responses=[fenced("def is_even(n):\nreturn n % 2 == 0")]),
    )
    assert exps[0].reward == 0.0
    assert exps[0].info["code_reason"].startswith("syntax error: expected an indented block")


# ------------------------------------------------------------------------- configuration
def test_workflow_and_reward_resolve_by_name_and_entry_point() -> None:
    from trinity.common.workflows import CodeWorkflow
    from trinity.workflows.code import CodeWorkflow as Defined

    assert CodeWorkflow is Defined
    assert WORKFLOWS.get("code_workflow") is Defined
    assert REWARD_FUNCTIONS.get("code_test_reward") is CodeTestRewardFn


def test_reward_fn_args_reach_the_sandbox() -> None:
    sleepy = fenced("import time\ntime.sleep(3)\ndef is_even(n):\n    return n % 2 == 0")
    greedy = fenced("blob = bytearray(200 * 2**20)\ndef is_even(n):\n    return n % 2 == 0")
    row = {**ASSERT_ROW, "test_list": ASSERT_ROW["test_list"][:1]}
    task = code_task(
        row, repeat_times=2, reward_fn_args={"timeout": 1.0, "sandbox": {"memory_mb": 100}}
    )
    workflow = task.to_workflow(FakeModelWrapper(responses=[sleepy, greedy]))
    config = workflow.reward_fn.sandbox.config
    assert (config.wall_time_s, config.cpu_time_s, config.memory_mb) == (1.0, 1.0, 100)
    workflow.set_repeat_times(2, run_id_base=0)
    slow, big = workflow.run()
    assert slow.info["code_reason"] == "test 1: timeout after 1s (wall-time limit)"
    assert big.info["code_reason"].startswith("test 1: memory limit exceeded (100 MB)")
    # the same 200 MB answer passes under the default 512 MB limit
    assert CodeTestRewardFn()(response=greedy, raw_task=row) == {"pass_rate": 1.0}


def test_unknown_reward_fn_args_are_refused_by_name() -> None:
    task = code_task(ASSERT_ROW, reward_fn_args={"sandbox": {"wall_time": 3}})
    with pytest.raises(ValueError, match="unknown sandbox setting.*wall_time.*allowed"):
        run_task(task, FakeModelWrapper(responses=["x"]))


def test_row_without_tests_is_refused_naming_the_keys_tried() -> None:
    task = code_task({"question": "Write anything."})
    with pytest.raises(MissingTaskFieldError) as info:
        run_task(task, FakeModelWrapper(responses=["x"]))
    message = str(info.value)
    for key in ("'test' + 'entry_point'", "'input_output'", "'test_list'", "'public_tests'"):
        assert key in message
    assert "tests_key" in message


def test_custom_tests_key_and_list_of_pairs_format() -> None:
    row = {
        "question": "Echo the input line twice.",
        "cases": [{"input": "ab\n", "output": "abab\n"}, {"input": "x\n", "output": "xx"}],
    }
    answer = fenced("s = input()\nprint(s * 2)")
    exps = run_task(
        code_task(row, repeat_times=1, reward_fn_args={**FAST, "tests_key": "cases"}),
        FakeModelWrapper(responses=[answer]),
    )
    assert exps[0].reward == 1.0


def test_code_contests_public_tests_format() -> None:
    row = {
        "question": "Double it.",
        "public_tests": {"input": ["2\n", "5\n"], "output": ["4\n", "10\n"]},
    }
    reward = CodeTestRewardFn(timeout=2)
    assert reward(response=fenced("print(2 * int(input()))"), raw_task=row) == {"pass_rate": 1.0}


def test_repeat_times_gives_run_ids_and_sync_and_async_runs_agree() -> None:
    answers = [ASSERT_ANSWERS[0], ASSERT_ANSWERS[1], ASSERT_ANSWERS[0], ASSERT_ANSWERS[3]]
    expected = [1.0, 2 / 3, 1.0, 0.0]

    task = code_task(ASSERT_ROW, repeat_times=4)
    workflow = task.to_workflow(FakeModelWrapper(responses=answers))
    workflow.set_repeat_times(4, run_id_base=10)
    sync_exps = workflow.run()
    assert [e.eid.run for e in sync_exps] == [10, 11, 12, 13]
    assert [e.reward for e in sync_exps] == pytest.approx(expected)

    workflow = code_task(ASSERT_ROW, repeat_times=4).to_workflow(
        FakeModelWrapper(responses=answers)
    )
    workflow.set_repeat_times(4, run_id_base=0)
    async_exps = asyncio.run(workflow.run_async())
    assert [e.eid.run for e in async_exps] == [0, 1, 2, 3]
    assert [e.reward for e in async_exps] == pytest.approx(expected)


def test_samples_share_a_bounded_number_of_concurrent_sandboxes() -> None:
    """4 samples x 3 tests sleeping 0.3 s: with 2 slots this takes >= 12 x 0.3 s / 2."""
    nap = fenced("import time\ntime.sleep(0.3)\ndef is_even(n):\n    return n % 2 == 0")
    task = code_task(ASSERT_ROW, repeat_times=4, workflow_args={"sandbox_concurrency": 2})
    start = time.monotonic()
    exps = run_task(task, FakeModelWrapper(responses=[nap]))
    elapsed = time.monotonic() - start
    assert [e.reward for e in exps] == [1.0] * 4
    assert elapsed >= 4 * 3 * 0.3 / 2


# ------------------------------------------------------------------------- the reward API
def test_reward_is_a_plain_reward_fn_through_compute_reward() -> None:
    reward = CodeTestRewardFn(**FAST)
    result = compute_reward(reward, response=ASSERT_ANSWERS[1], truth=None, raw_task=ASSERT_ROW)
    assert result.error is None
    assert result.components == {"pass_rate": pytest.approx(2 / 3)}
    assert result.reward == pytest.approx(2 / 3)
    # a row without tests costs this sample its reward, with the reason as reward_error
    result = compute_reward(reward, response="x", raw_task={"question": "?"})
    assert result.reward == 0.0 and "has no tests" in result.error


def test_evaluate_gives_per_test_outcomes() -> None:
    evaluation = CodeTestRewardFn(**FAST).evaluate(IO_ANSWERS[1], raw_task=IO_ROW)
    assert (evaluation.passed, evaluation.total) == (2, 3)
    assert [o.passed for o in evaluation.outcomes] == [True, True, False]
    assert evaluation.outcomes[2].status == "wrong_answer"
    assert evaluation.program == "a, b = map(int, input().split())\nprint(abs(a) + abs(b))\n"


def test_fail_fast_skips_the_remaining_tests() -> None:
    reward = CodeTestRewardFn(**FAST, fail_fast=True, concurrency=1)
    evaluation = reward.evaluate(fenced("def is_even(n):\n    return False"), raw_task=ASSERT_ROW)
    assert [o.status for o in evaluation.outcomes] == ["error", "skipped", "skipped"]
    assert evaluation.reason == "test 1: assertion failed"


def test_extract_program_prefers_the_last_python_block() -> None:
    text = "```python\nprint(1)\n```\nbetter:\n```py\nprint(2)\n```\n```text\nout\n```"
    assert extract_program(text) == "print(2)\n"
    assert extract_program("```\nprint(3)\n```") == "print(3)\n"
    assert extract_program("print(4)") == "print(4)"  # a bare program parses as Python
    assert extract_program("The answer is forty two.") is None
    assert extract_program("print(4)", allow_unfenced=False) is None
    assert extract_program("cut off:\n```python\nprint(5)\nfor i in") == "print(5)\nfor i in"
    assert extract_program("```python\n```") is None


def test_outputs_match_ignores_trailing_whitespace_only() -> None:
    assert outputs_match("1 2  \n3\n\n\n", "1 2\n3")
    assert outputs_match("a\r\nb\r\n", "a\nb\n")
    assert not outputs_match("1  2\n", "1 2\n")
    assert not outputs_match("\n1\n", "1\n")


def test_malformed_tests_are_reported_with_the_key() -> None:
    reward = CodeTestRewardFn(**FAST)
    with pytest.raises(ValueError, match="'input_output': 2 inputs but 1 outputs"):
        reward.parse_tests({"input_output": {"inputs": ["1", "2"], "outputs": ["1"]}})
    with pytest.raises(ValueError, match="call-based"):
        reward.parse_tests({"input_output": {"inputs": [[1]], "outputs": [[1]], "fn_name": "f"}})


def test_workflow_reward_timeout_bounds_one_sample_and_reports_it() -> None:
    sleepy = fenced("import time\ntime.sleep(1)\ndef is_even(n):\n    return n % 2 == 0")
    task = code_task(ASSERT_ROW, repeat_times=1, workflow_args={"reward_timeout": 0.3})
    (exp,) = run_task(task, FakeModelWrapper(responses=[sleepy]))
    assert exp.reward == 0.0 and exp.metrics["reward_error"] == 1.0
    assert exp.info["code_reason"] == "code_test_reward timed out after 0.3s"


def test_bad_sandbox_concurrency_is_refused_by_name() -> None:
    task = code_task(ASSERT_ROW, workflow_args={"sandbox_concurrency": 0})
    with pytest.raises(ValueError, match="workflow_args.sandbox_concurrency must be an integer"):
        run_task(task, FakeModelWrapper(responses=["x"]))


def test_assert_harness_runs_ordinary_module_code() -> None:
    """The program runs as a real module: dataclasses with postponed annotations, pickle and
    a ``__main__`` guard (skipped, as in the reference harnesses) all behave."""
    program = fenced(
        "from __future__ import annotations\n"
        "import pickle\n"
        "from dataclasses import dataclass\n"
        "@dataclass\n"
        "class Point:\n"
        "    x: int\n"
        "    y: int\n"
        "def mirror(p: Point) -> Point:\n"
        "    return pickle.loads(pickle.dumps(Point(p.y, p.x)))\n"
        "if __name__ == '__main__':\n"
        "    raise SystemExit('the demo must not run')\n"
    )
    row = {
        "test_list": ["assert mirror(Point(1, 2)) == Point(2, 1)", "assert __name__ != '__main__'"]
    }
    evaluation = CodeTestRewardFn(**FAST).evaluate(program, raw_task=row)
    assert evaluation.pass_rate == 1.0, evaluation.reason
