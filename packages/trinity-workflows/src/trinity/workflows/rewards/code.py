"""``code_test_reward``: the fraction of a task's tests that the program in a response passes.

The program is taken from the response (the last fenced ````python`` block, else the last fenced
block of any language, else the whole text when it parses as Python) and run against the task
row's tests in a :class:`~trinity.workflows.sandbox.CodeSandbox`, one sandbox run per test.
Three test formats are read from the row:

* **stdin/stdout pairs** (APPS, CodeContests): ``{"inputs": [...], "outputs": [...]}``,
  ``{"input": [...], "output": [...]}`` or ``[{"input": ..., "output": ...}, ...]``, possibly
  as a JSON string. Outputs are compared after stripping trailing spaces on every line and
  trailing blank lines. The program runs as ``__main__``.
* **assert statements** (MBPP): ``test_list: ["assert f(1) == 2", ...]``, each one a test, with
  ``test_setup_code`` / ``test_imports`` run first.
* **a check function** (HumanEval): ``test`` (code defining ``check(candidate)``) plus
  ``entry_point``; ``check(<entry_point>)`` is one test.

For the last two, the program and the test code run the way the reference harnesses do: in one
namespace (a module named ``solution``) whose ``__name__`` is not ``"__main__"``, so an
``if __name__ == "__main__":`` demo that reads stdin does not run. A test passes only if the process exits 0 *and* prints a random
completion marker that is written after the test code, so a program that calls ``exit(0)``
before the tests run (a known reward hack) does not pass. The marker only stops such shortcuts:
tests share the interpreter with the program, so a program written to find the marker in its
own source could still forge it.

A reward function returns numbers only, so :meth:`CodeTestRewardFn.evaluate` (and its async
twin, used by ``code_workflow``) returns a :class:`CodeEvaluation` with every test's outcome and
the reason a sample lost credit (``"test 2: timeout after 2s (wall-time limit)"``, ``"no code
block"``), which the workflow records in ``Experience.info``.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
import threading
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Union

from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.workflows.common import MissingTaskFieldError
from trinity.workflows.sandbox import CodeSandbox, SandboxConfig, SandboxResult

__all__ = [
    "DEFAULT_TESTS_KEYS",
    "CodeEvaluation",
    "CodeTest",
    "CodeTestRewardFn",
    "TestOutcome",
    "extract_program",
    "outputs_match",
]

#: Row keys searched, in order, for stdin/stdout pairs or assert statements.
DEFAULT_TESTS_KEYS: tuple[str, ...] = (
    "input_output",
    "test_cases",
    "tests",
    "public_tests",
    "test_list",
)
#: Row keys whose code runs before assert tests (MBPP).
DEFAULT_SETUP_KEYS: tuple[str, ...] = ("test_setup_code", "test_imports")

_FENCE = re.compile(r"```[ \t]*([^\n`]*)\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"python", "py", "python3", "py3"}
_SOLUTION_FILE = "solution.py"
_TEST_FILE = "test_code.py"
# Runs the program, then the test code, in one namespace like the HumanEval/MBPP harnesses, and
# writes the completion marker straight to fd 1 (not through a replaceable sys.stdout). The
# namespace is a real module registered in sys.modules, because dataclasses, pickle and typing
# look a class's module up there.
_HARNESS = """\
import os as _os, sys as _sys, types as _types
_module = _types.ModuleType("solution")
_module.__file__ = {solution!r}
_sys.modules["solution"] = _module
for _name in ({solution!r}, {test!r}):
    with open(_name, encoding="utf-8") as _fh:
        _source = _fh.read()
    exec(compile(_source, _name, "exec"), _module.__dict__)
_os.write(1, b"\\n{marker}\\n")
"""


# ---------------------------------------------------------------------------------- data
class _SandboxRun(NamedTuple):
    code: str
    stdin: str
    files: dict[str, str]
    marker: Optional[str]  # the completion marker the harness prints (assert/function tests)


@dataclass
class CodeTest:
    """One test of a task.

    Attributes:
        kind: ``"io"`` (stdin → expected stdout), ``"assert"`` (an assert statement) or
            ``"function"`` (HumanEval ``check(entry_point)``).
        stdin: the program's input (io tests).
        expected: the expected stdout (io tests).
        code: test code run after the program (assert / function tests).
    """

    kind: str
    stdin: str = ""
    expected: Optional[str] = None
    code: str = ""


@dataclass
class TestOutcome:
    """How the program did on one test (``index`` counts from 1, as in the reasons)."""

    __test__ = False  # not a pytest class

    index: int
    kind: str
    passed: bool
    status: str
    reason: str
    wall_time: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": self.index,
            "kind": self.kind,
            "passed": self.passed,
            "status": self.status,
            "reason": self.reason,
            "wall_time": round(self.wall_time, 3),
        }


@dataclass
class CodeEvaluation:
    """The result of running one response's program against a task's tests.

    Attributes:
        program: the extracted program (``None`` when the response had none).
        total: number of tests of the task.
        outcomes: one :class:`TestOutcome` per test (empty when nothing ran).
        reason: why the sample lost credit, ``"all N tests passed"`` otherwise.
    """

    program: Optional[str]
    total: int
    outcomes: list[TestOutcome] = field(default_factory=list)
    reason: str = ""

    @property
    def passed(self) -> int:
        return sum(1 for o in self.outcomes if o.passed)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    def to_info(self) -> dict[str, Any]:
        """JSON-friendly summary for ``Experience.info``."""
        return {
            "code_reason": self.reason,
            "code_results": [o.to_dict() for o in self.outcomes],
            "tests_passed": self.passed,
            "tests_total": self.total,
        }


# ---------------------------------------------------------------------------------- helpers
def extract_program(response: str, allow_unfenced: bool = True) -> Optional[str]:
    """The program in a model response, or ``None``.

    The last ````python`` (``py``, ``python3``) fenced block wins; else the last fenced block of
    any language; else, with ``allow_unfenced``, the whole response if it parses as Python (so
    a bare program works but prose does not count as one). An unclosed final fence (a response
    cut off by the length limit) counts as a block up to the end of the text.
    """
    if not isinstance(response, str):
        return None
    blocks = [(m.group(1).strip().lower(), m.group(2)) for m in _FENCE.finditer(response)]
    python = [body for tag, body in blocks if tag.split()[:1] and tag.split()[0] in _PYTHON_TAGS]
    chosen = python[-1] if python else (blocks[-1][1] if blocks else None)
    if chosen is not None:
        return chosen if chosen.strip() else None
    text = response.strip()
    if not allow_unfenced or not text:
        return None
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return text


def _normalize_output(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(actual: str, expected: str) -> bool:
    """Stdout comparison of judges: trailing spaces per line and trailing blank lines ignored."""
    return _normalize_output(actual) == _normalize_output(expected)


def _as_text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return "\n".join(value) + ("\n" if value else "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"{what} must be a string (or a list of lines), got {type(value).__name__}")


def _short(text: str, limit: int = 60) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _parse_tests_value(key: str, value: Any) -> list[CodeTest]:
    """Tests from one row value: stdin/stdout pairs or assert statements (see module docs)."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith(("{", "[")):
            try:
                value = json.loads(stripped)
            except json.JSONDecodeError as exc:
                raise ValueError(f"tests in {key!r} are not valid JSON: {exc}") from exc
        else:  # one block of assert statements
            return [CodeTest(kind="assert", code=value)] if stripped else []
    if isinstance(value, Mapping):
        if value.get("fn_name"):
            raise ValueError(
                f"tests in {key!r} are call-based (fn_name={value['fn_name']!r}); only "
                "stdin/stdout pairs, assert statements and HumanEval check() tests are supported"
            )
        ins = value.get("inputs", value.get("input"))
        outs = value.get("outputs", value.get("output"))
        if ins is None or outs is None:
            raise ValueError(
                f"tests in {key!r} must have 'inputs'/'outputs' (or 'input'/'output') lists, "
                f"got keys {sorted(value)}"
            )
        if not isinstance(ins, (list, tuple)) or not isinstance(outs, (list, tuple)):
            raise ValueError(f"tests in {key!r}: inputs and outputs must be lists")
        if len(ins) != len(outs):
            raise ValueError(
                f"tests in {key!r}: {len(ins)} inputs but {len(outs)} outputs (must be equal)"
            )
        return [
            CodeTest(
                kind="io",
                stdin=_as_text(i, f"{key} input {n + 1}"),
                expected=_as_text(o, f"{key} output {n + 1}"),
            )
            for n, (i, o) in enumerate(zip(ins, outs, strict=True))
        ]
    if isinstance(value, (list, tuple)):
        tests = []
        for n, item in enumerate(value):
            if isinstance(item, str):
                tests.append(CodeTest(kind="assert", code=item))
            elif isinstance(item, Mapping) and "input" in item and "output" in item:
                tests.append(
                    CodeTest(
                        kind="io",
                        stdin=_as_text(item["input"], f"{key}[{n}].input"),
                        expected=_as_text(item["output"], f"{key}[{n}].output"),
                    )
                )
            else:
                raise ValueError(
                    f"tests in {key!r}: item {n} must be an assert statement (str) or a "
                    f"{{'input': ..., 'output': ...}} mapping, got {item!r:.80}"
                )
        return tests
    raise ValueError(f"tests in {key!r} have an unsupported type {type(value).__name__}")


# ---------------------------------------------------------------------------------- reward
@REWARD_FUNCTIONS.register_module("code_test_reward")
class CodeTestRewardFn(RewardFn):
    """Pass rate of the response's program on the task's tests, run in a sandbox.

    Args (all from ``reward_fn_args``):
        sandbox: :class:`~trinity.workflows.sandbox.SandboxConfig` fields (``backend``,
            ``cpu_time_s``, ``wall_time_s``, ``memory_mb``, ``python``, ...).
        timeout: shorthand for the per-test wall time in seconds (CPU time is capped to it too).
        memory_mb: shorthand for ``sandbox.memory_mb``.
        tests_key: row key(s) holding stdin/stdout pairs or assert statements, tried in order
            (default :data:`DEFAULT_TESTS_KEYS`).
        test_code_key / entry_point_key: HumanEval-style ``check()`` code and function name.
        setup_key: row key(s) with code run before assert tests (MBPP ``test_setup_code``).
        max_tests: run only the first N tests (CodeContests rows carry hundreds).
        fail_fast: stop at the first failed test; the rest count as failed ("skipped"). Saves
            sandbox time, but the pass rate then only says "all or not".
        concurrency: sandbox runs at once for one response (``code_workflow`` bounds all
            responses of a task together instead).
        allow_unfenced: use the whole response as the program when it has no fenced block and
            parses as Python.

    Returns ``{"pass_rate": passed / total}``; the reward is that fraction.
    """

    def __init__(
        self,
        sandbox: Union[SandboxConfig, Mapping[str, Any], None] = None,
        timeout: Optional[float] = None,
        memory_mb: Optional[int] = None,
        tests_key: Union[str, Sequence[str], None] = None,
        test_code_key: str = "test",
        entry_point_key: str = "entry_point",
        setup_key: Union[str, Sequence[str], None] = None,
        max_tests: Optional[int] = None,
        fail_fast: bool = False,
        concurrency: int = 2,
        allow_unfenced: bool = True,
    ) -> None:
        overrides: dict[str, Any] = {}
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
                raise ValueError(f"code_test_reward: timeout must be seconds > 0, got {timeout!r}")
            base = SandboxConfig.coerce(sandbox)
            overrides["wall_time_s"] = float(timeout)
            overrides["cpu_time_s"] = min(base.cpu_time_s, float(timeout))
        if memory_mb is not None:
            overrides["memory_mb"] = memory_mb
        self.sandbox = CodeSandbox(SandboxConfig.coerce(sandbox, **overrides))
        self.tests_keys = _keys(tests_key, DEFAULT_TESTS_KEYS, "tests_key")
        self.setup_keys = _keys(setup_key, DEFAULT_SETUP_KEYS, "setup_key")
        self.test_code_key = test_code_key
        self.entry_point_key = entry_point_key
        if max_tests is not None and (not isinstance(max_tests, int) or max_tests < 1):
            raise ValueError(
                f"code_test_reward: max_tests must be an integer >= 1, got {max_tests!r}"
            )
        self.max_tests = max_tests
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(
                f"code_test_reward: concurrency must be an integer >= 1, got {concurrency!r}"
            )
        self.concurrency = concurrency
        self.fail_fast = bool(fail_fast)
        self.allow_unfenced = bool(allow_unfenced)

    # ------------------------------------------------------------------ reward API
    def __call__(  # type: ignore[override]
        self,
        response: str,
        truth: Optional[str] = None,
        raw_task: Optional[Mapping[str, Any]] = None,
        **kwargs: Any,
    ) -> dict[str, float]:
        """``{"pass_rate": fraction of tests passed}`` (raises if the row has no tests)."""
        return {"pass_rate": self.evaluate(response, raw_task=raw_task).pass_rate}

    # ------------------------------------------------------------------ tests of a row
    def parse_tests(self, raw_task: Optional[Mapping[str, Any]]) -> list[CodeTest]:
        """The tests of a task row.

        Raises:
            MissingTaskFieldError: the row has none of the keys tried (all are named).
            ValueError: a tests field is malformed (the key and the problem are named).
        """
        row = raw_task or {}
        tests: list[CodeTest] = []
        code, entry = row.get(self.test_code_key), row.get(self.entry_point_key)
        if isinstance(code, str) and code.strip() and isinstance(entry, str) and entry.strip():
            if not entry.strip().isidentifier():
                raise ValueError(f"{self.entry_point_key!r} must be a function name, got {entry!r}")
            tests = [CodeTest(kind="function", code=f"{code}\n\ncheck({entry.strip()})\n")]
        else:
            for key in self.tests_keys:
                value = row.get(key)
                if value is None or (isinstance(value, (str, list, tuple, dict)) and not value):
                    continue
                tests = _parse_tests_value(key, value)
                if tests:
                    break
        if not tests:
            tried = [f"{self.test_code_key!r} + {self.entry_point_key!r}"]
            tried += [repr(k) for k in self.tests_keys]
            raise MissingTaskFieldError(
                f"code_test_reward: the task row has no tests; tried {', '.join(tried)}; the row "
                f"has keys {sorted(row) or 'none'}. Set reward_fn_args.tests_key (or "
                "test_code_key/entry_point_key) to the row's tests column."
            )
        if any(t.kind == "assert" for t in tests):
            setup = self._setup_code(row)
            if setup:
                tests = [
                    CodeTest(kind=t.kind, code=f"{setup}\n{t.code}") if t.kind == "assert" else t
                    for t in tests
                ]
        return tests[: self.max_tests] if self.max_tests else tests

    def _setup_code(self, row: Mapping[str, Any]) -> str:
        parts = []
        for key in self.setup_keys:
            value = row.get(key)
            if isinstance(value, str) and value.strip():
                parts.append(value)
            elif isinstance(value, (list, tuple)):
                parts.extend(str(v) for v in value if str(v).strip())
        return "\n".join(parts)

    # ------------------------------------------------------------------ evaluation
    def evaluate(
        self,
        response: str,
        raw_task: Optional[Mapping[str, Any]] = None,
        tests: Optional[Sequence[CodeTest]] = None,
    ) -> CodeEvaluation:
        """Run the response's program on the tests (``tests`` or those of ``raw_task``)."""
        tests = list(tests) if tests is not None else self.parse_tests(raw_task)
        evaluation, runs = self._prepare(response, tests)
        if not runs:
            return evaluation
        failed = threading.Event()

        def one(index: int) -> TestOutcome:
            if self.fail_fast and failed.is_set():
                return _skipped(index, tests[index])
            run = runs[index]
            outcome = self._judge(index, tests[index], run, self.sandbox.run(*run[:3]))
            if not outcome.passed:
                failed.set()
            return outcome

        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(runs))) as pool:
            evaluation.outcomes = list(pool.map(one, range(len(runs))))
        return _summarize(evaluation)

    async def evaluate_async(
        self,
        response: str,
        raw_task: Optional[Mapping[str, Any]] = None,
        tests: Optional[Sequence[CodeTest]] = None,
        limiter: Optional[asyncio.Semaphore] = None,
    ) -> CodeEvaluation:
        """:meth:`evaluate` without blocking the loop; ``limiter`` bounds concurrent sandboxes
        (shared by all responses of a task, so 8 samples do not start 8 × N processes)."""
        tests = list(tests) if tests is not None else self.parse_tests(raw_task)
        evaluation, runs = self._prepare(response, tests)
        if not runs:
            return evaluation
        limiter = limiter or asyncio.Semaphore(self.concurrency)
        failed = asyncio.Event()

        async def one(index: int) -> TestOutcome:
            async with limiter:
                if self.fail_fast and failed.is_set():
                    return _skipped(index, tests[index])
                result = await self.sandbox.run_async(*runs[index][:3])
            outcome = self._judge(index, tests[index], runs[index], result)
            if not outcome.passed:
                failed.set()
            return outcome

        evaluation.outcomes = list(await asyncio.gather(*(one(i) for i in range(len(runs)))))
        return _summarize(evaluation)

    def _prepare(
        self, response: str, tests: list[CodeTest]
    ) -> tuple[CodeEvaluation, list[_SandboxRun]]:
        """The evaluation shell and one sandbox run per test.

        No runs when there is no program or it does not parse: every test fails with the same
        reason, and no sandbox is started for a program that cannot run.
        """
        program = extract_program(response, self.allow_unfenced)
        evaluation = CodeEvaluation(program=program, total=len(tests))
        if program is None:
            evaluation.reason = "no code block"
            return evaluation, []
        try:
            ast.parse(program)
        except SyntaxError as exc:
            evaluation.reason = f"syntax error: {exc.msg} (line {exc.lineno})"
            return evaluation, []
        except (ValueError, RecursionError, MemoryError) as exc:
            evaluation.reason = f"the program cannot be parsed: {type(exc).__name__}: {exc}"
            return evaluation, []
        runs = []
        for test in tests:
            if test.kind == "io":
                runs.append(_SandboxRun(program, test.stdin, {}, None))
            else:
                marker = uuid.uuid4().hex
                harness = _HARNESS.format(solution=_SOLUTION_FILE, test=_TEST_FILE, marker=marker)
                files = {_SOLUTION_FILE: program, _TEST_FILE: test.code}
                runs.append(_SandboxRun(harness, "", files, marker))
        return evaluation, runs

    def _judge(
        self, index: int, test: CodeTest, run: _SandboxRun, result: SandboxResult
    ) -> TestOutcome:
        """Whether ``result`` passes ``test``, and why not."""
        number = index + 1
        if test.kind == "io":
            if not result.ok:
                return _failed(number, test, result, _failure_reason(result))
            if outputs_match(result.stdout, test.expected or ""):
                return TestOutcome(number, test.kind, True, "ok", "passed", result.wall_time)
            reason = (
                f"wrong answer: expected {_short(test.expected or '')}, got {_short(result.stdout)}"
            )
            return _failed(number, test, result, reason, status="wrong_answer")
        if not result.ok:
            return _failed(number, test, result, _failure_reason(result))
        if run.marker is None or run.marker not in result.stdout.split("\n"):
            reason = "the program exited before the tests ran (no completion marker)"
            return _failed(number, test, result, reason, status="no_marker")
        return TestOutcome(number, test.kind, True, "ok", "passed", result.wall_time)


# ---------------------------------------------------------------------------------- internals
def _keys(
    value: Union[str, Sequence[str], None], default: tuple[str, ...], name: str
) -> tuple[str, ...]:
    if value is None:
        return default
    keys = (value,) if isinstance(value, str) else tuple(value)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise ValueError(f"code_test_reward: {name} must be a key or a list of keys, got {value!r}")
    return keys


def _failure_reason(result: SandboxResult) -> str:
    if result.status == "error":
        last = result.stderr.strip().splitlines()[-1:] or [""]
        if last[0].startswith("AssertionError"):
            message = last[0][len("AssertionError") :].lstrip(": ").strip()
            return "assertion failed" + (f": {message}" if message else "")
    return result.reason


def _failed(
    number: int, test: CodeTest, result: SandboxResult, reason: str, status: Optional[str] = None
) -> TestOutcome:
    return TestOutcome(number, test.kind, False, status or result.status, reason, result.wall_time)


def _skipped(index: int, test: CodeTest) -> TestOutcome:
    return TestOutcome(index + 1, test.kind, False, "skipped", "skipped after an earlier failure")


def _summarize(evaluation: CodeEvaluation) -> CodeEvaluation:
    failed = [o for o in evaluation.outcomes if not o.passed and o.status != "skipped"]
    if not failed:
        failed = [o for o in evaluation.outcomes if not o.passed]
    if failed:
        evaluation.reason = f"test {failed[0].index}: {failed[0].reason}"
    else:
        evaluation.reason = f"all {evaluation.total} tests passed"
    return evaluation
