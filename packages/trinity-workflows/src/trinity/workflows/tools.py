"""Executable tools for agent workflows, and the ``TOOLS`` registry.

A :class:`Tool` couples three things an agent loop needs: a name, the OpenAI function JSON schema
sent to the model in ``tools=[...]``, and the Python callable (sync or async) that runs a call.
A :class:`ToolSet` is the set of tools one episode may use; :meth:`ToolSet.execute` turns *every*
failure (unknown tool, arguments that are not JSON, missing or unexpected arguments, a tool that
raises or hangs) into a tool message that tells the model what went wrong. A model that calls
tools badly is the normal case early in RL training, so it must cost the model a turn, never
crash the rollout.

Built-in tools: ``calculator`` (arithmetic parsed with :mod:`ast`, never ``eval``) and ``python``
(a program run in :class:`trinity.workflows.sandbox.CodeSandbox`; in the default tool set only
where the default sandbox runs; the agent workflows build it from ``workflow_args.sandbox`` when
it is named, see :func:`make_python_tool`).

Registering your own tool (in a plugin module or before building the workflow)::

    from trinity.workflows.tools import register_tool, ToolError

    @register_tool("weather")
    def weather(city: str, unit: str = "celsius") -> str:
        \"\"\"Current weather of a city.

        Args:
            city: the city name, e.g. "Paris".
            unit: "celsius" or "fahrenheit".
        \"\"\"
        if city not in DATA:
            raise ToolError(f"unknown city {city!r}")  # shown to the model as is
        return f"{DATA[city]} degrees"

The JSON schema is inferred from the signature (``str``/``int``/``float``/``bool``/``list``/
``dict``/``Literal``/``Optional``; parameters without a default are required) and the docstring
(first paragraph = description, ``Args:`` lines = parameter descriptions); pass ``parameters=``
to give it explicitly. Then name it in ``workflow_args.tools: [weather, calculator]``. The module
must be imported before the workflow is built (a plugin directory), or an installed package can
advertise the decorated object in the ``trinity.tools`` entry-point group
(``weather = "my_pkg.tools:weather"``), which :data:`TOOLS` loads on first use.
"""

from __future__ import annotations

import ast
import json
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any, Optional, Union

# The tool type, the tool set and the registry live in tools_base; re-exported here, the public
# path (``from trinity.workflows.tools import Tool, ToolSet, register_tool, ToolError``).
from trinity.workflows.tools_base import (  # noqa: F401
    DEFAULT_MAX_TOOL_OUTPUT_CHARS,
    DEFAULT_TOOL_TIMEOUT,
    TOOLS,
    Tool,
    ToolError,
    ToolResult,
    ToolSet,
    _docstring_parts,
    _infer_parameters,
    _json_type,
    _type_hints,
    get_tools,
    normalize_tool_schema,
    register_tool,
)

__all__ = [
    "TOOLS",
    "BUILTIN_TOOLS",
    "DEFAULT_TOOL_TIMEOUT",
    "DEFAULT_MAX_TOOL_OUTPUT_CHARS",
    "Tool",
    "ToolError",
    "ToolResult",
    "ToolSet",
    "register_tool",
    "get_tools",
    "make_python_tool",
    "default_tool_names",
    "normalize_tool_schema",
    "parse_tool_schemas",
    "evaluate_arithmetic",
]

#: Registry of executable tools (name -> :class:`Tool`); entry-point group ``trinity.tools``.
#: The tools this module registers.
BUILTIN_TOOLS: tuple[str, ...] = ("calculator", "python")


def default_tool_names() -> list[str]:
    """The built-in tools that work here (``python`` only where the default sandbox runs)."""
    return [name for name in BUILTIN_TOOLS if TOOLS[name].is_available()]


def parse_tool_schemas(value: Any, where: str) -> list[dict[str, Any]]:
    """Tool schemas from a task row field: a list of schemas or a JSON string of one.

    Args:
        value: the row's value.
        where: the field (e.g. ``"row['tools'] (format.tools_key)"``), named in errors.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} is a string but not JSON ({exc})") from exc
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where} must be a list of tool schemas, got {type(value).__name__}")
    try:
        return [normalize_tool_schema(s) for s in value]
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc


# ---------------------------------------------------------------------- calculator
_BIN_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY_OPS: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": math.log,
    "floor": math.floor,
    "ceil": math.ceil,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}
_MAX_EXPRESSION_CHARS = 1000
_MAX_RESULT_BITS = 4096  # bounds 9**9**9-style expressions that would take forever


def _check_size(value: Any) -> Any:
    if isinstance(value, int) and value.bit_length() > _MAX_RESULT_BITS:
        raise ToolError(f"the result is too large (more than {_MAX_RESULT_BITS} bits)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("the result is not a finite number")
    return value


def _eval_node(node: ast.AST) -> Union[int, float]:
    if isinstance(node, ast.Expression):
        return _eval_node(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ToolError(f"only numbers are allowed, got {node.value!r}")
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN_OPS:
        left, right = _eval_node(node.left), _eval_node(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > 10_000 or (
                isinstance(left, int)
                and isinstance(right, int)
                and right > 0
                and abs(left) > 1
                and right * math.log2(abs(left)) > _MAX_RESULT_BITS
            ):
                raise ToolError("the result is too large")
        try:
            return _check_size(_BIN_OPS[type(node.op)](left, right))
        except ZeroDivisionError as exc:
            raise ToolError("division by zero") from exc
        except OverflowError as exc:
            raise ToolError("the result is too large") from exc
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _UNARY_OPS[type(node.op)](_eval_node(node.operand))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise ToolError(f"unknown name {node.id!r}; known constants: {', '.join(_CONSTANTS)}")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        fn = _FUNCTIONS.get(node.func.id)
        if fn is None:
            raise ToolError(
                f"unknown function {node.func.id!r}; allowed: {', '.join(sorted(_FUNCTIONS))}"
            )
        args = [_eval_node(a) for a in node.args]
        try:
            return _check_size(fn(*args))
        except (TypeError, ValueError, OverflowError) as exc:
            raise ToolError(f"{node.func.id}({', '.join(map(str, args))}): {exc}") from exc
    raise ToolError(
        f"unsupported syntax {type(node).__name__!s}: use numbers, + - * / // % **, parentheses "
        f"and the functions {', '.join(sorted(_FUNCTIONS))}"
    )


def evaluate_arithmetic(expression: str) -> Union[int, float]:
    """Evaluate an arithmetic expression safely (parsed with :mod:`ast`; no names but constants).

    ``^`` is accepted as power, as models often write it. Raises :class:`ToolError` with a
    message meant for the model on anything else.
    """
    if not isinstance(expression, str):
        raise ToolError(f"expression must be a string, got {type(expression).__name__}")
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/")
    if not text:
        raise ToolError("the expression is empty")
    if len(text) > _MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {_MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"cannot parse {expression!r}: {exc.msg}") from exc
    return _eval_node(tree)


def _format_number(value: Union[int, float]) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return format(value, ".12g")
    return str(value)


@register_tool("calculator", run_in_thread=False)
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Args:
        expression: e.g. "(3 + 4) * 12 / 5". Supports + - * / // % ** (or ^), parentheses,
            pi, e and abs, round, min, max, sqrt, exp, log, floor, ceil.
    """
    return _format_number(evaluate_arithmetic(expression))


# ---------------------------------------------------------------------- python (sandboxed)
PYTHON_TOOL_DESCRIPTION = (
    "Run a Python 3 program in a sandbox (no network, limited time and memory) and return what "
    "it printed (stdout and stderr)."
)


def _format_sandbox_result(result: Any) -> str:
    parts = []
    stdout = getattr(result, "stdout", "") or ""
    stderr = getattr(result, "stderr", "") or ""
    if stdout:
        parts.append(stdout.rstrip("\n"))
    if stderr:
        parts.append("[stderr]\n" + stderr.rstrip("\n"))
    if not getattr(result, "ok", False):
        parts.append(f"[{getattr(result, 'status', 'error')}: {getattr(result, 'reason', '')}]")
    return "\n".join(parts) if parts else "(no output)"


def make_python_tool(sandbox: Any = None) -> Tool:
    """A ``python`` tool running programs in ``CodeSandbox(sandbox)``.

    Args:
        sandbox: a :class:`~trinity.workflows.sandbox.SandboxConfig` or its mapping
            (``workflow_args.sandbox`` of the agent workflows; e.g. ``{"backend": "process"}``
            where bubblewrap cannot run); ``None`` for the defaults.

    Raises:
        ImportError / SandboxUnavailableError: the sandbox cannot run here; raised now, at
            workflow construction, instead of failing every call of a training run.
    """
    from trinity.workflows.sandbox import CodeSandbox

    box = CodeSandbox(sandbox)  # checks that the backend works (cached per configuration)

    async def python(code: str, stdin: str = "") -> str:
        """Run a Python program.

        Args:
            code: the complete program; print() what you want to see.
            stdin: text given to the program on standard input.
        """
        return _format_sandbox_result(await box.run_async(code, stdin=stdin))

    return Tool.from_function(python, name="python", description=PYTHON_TOOL_DESCRIPTION)


_default_python_tool: Optional[Tool] = None
_default_python_error: Optional[str] = None


def _python_sandbox_error() -> Optional[str]:
    """Why the default sandbox cannot run here (None when it can); probed once per process."""
    global _default_python_tool, _default_python_error
    if _default_python_tool is None and _default_python_error is None:
        try:
            _default_python_tool = make_python_tool()
        except Exception as exc:  # noqa: BLE001 - ImportError, SandboxUnavailableError, ...
            _default_python_error = f"{type(exc).__name__}: {exc}"
    return _default_python_error


@register_tool(
    "python",
    description=PYTHON_TOOL_DESCRIPTION,
    available=lambda: _python_sandbox_error() is None,
)
async def python(code: str, stdin: str = "") -> str:
    """Run a Python program in the default sandbox (see :func:`make_python_tool`).

    Args:
        code: the complete program; print() what you want to see.
        stdin: text given to the program on standard input.
    """
    error = _python_sandbox_error()
    if error is not None:
        raise ToolError(f"the python tool is unavailable here ({error})")
    assert _default_python_tool is not None
    return await _default_python_tool.fn(code=code, stdin=stdin)
