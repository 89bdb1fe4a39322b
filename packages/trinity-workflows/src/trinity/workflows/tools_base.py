"""What a tool is and how a call runs: :class:`Tool`, :class:`ToolSet`, the ``TOOLS`` registry.

This module owns the tool type (name, OpenAI function schema inferred from the signature and
docstring, the callable, argument checks), :class:`ToolResult`, :class:`ToolSet` (runs a call
with a timeout and turns every failure into a message for the model), :class:`ToolError`, the
registry :data:`TOOLS` with :func:`register_tool` / :func:`get_tools`, and the defaults for
timeout and output size. The built-in tools and the schema-parsing helpers are in
:mod:`trinity.workflows.tools`, which re-exports everything here.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from trinity.utils.registry import Registry

TOOLS: Registry[Tool] = Registry("tools")

#: Seconds one tool call may take (``workflow_args.tool_timeout``).
DEFAULT_TOOL_TIMEOUT = 30.0
#: Longest tool output (characters) put into the conversation
#: (``workflow_args.max_tool_output_chars``).
DEFAULT_MAX_TOOL_OUTPUT_CHARS = 4000


class ToolError(Exception):
    """Raise from a tool to show the model an error message as is (no exception type prefix)."""


# ---------------------------------------------------------------------- schema inference
_UnionType = getattr(types, "UnionType", None)  # ``int | None`` (Python >= 3.10)
_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


def _json_type(annotation: Any) -> dict[str, Any]:
    """JSON-schema fragment for a Python annotation (unknown annotations: no type constraint)."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        values = list(typing.get_args(annotation))
        frag: dict[str, Any] = {"enum": values}
        kinds = {_JSON_TYPES.get(type(v)) for v in values}
        if len(kinds) == 1 and None not in kinds:
            frag["type"] = kinds.pop()
        return frag
    if origin is Union or (_UnionType is not None and origin is _UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _json_type(args[0]) if len(args) == 1 else {}
    if origin is not None:
        annotation = origin
    for py_type, name in _JSON_TYPES.items():
        if annotation is py_type or (
            isinstance(annotation, type) and issubclass(annotation, py_type)
        ):
            return {"type": name}
    return {}


def _docstring_parts(doc: Optional[str]) -> tuple[str, dict[str, str]]:
    """(description, {param: description}) from a Google-style docstring."""
    doc = inspect.cleandoc(doc or "")
    if not doc:
        return "", {}
    description = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    params: dict[str, str] = {}
    match = re.search(r"^(?:Args|Arguments|Parameters):\s*$", doc, re.MULTILINE)
    if match:
        current = None
        for line in doc[match.end() :].splitlines():
            if not line.strip():
                continue
            if not line.startswith((" ", "\t")):
                break  # the next section
            m = re.match(r"^\s+(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
            if m and (current is None or len(line) - len(line.lstrip()) <= 4):
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif current is not None:
                params[current] = (params[current] + " " + line.strip()).strip()
    return description, params


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """Resolved annotations of ``fn``; string annotations (``from __future__ import annotations``)
    may use ``typing`` names (``Literal``, ``Optional``) imported anywhere, even locally."""
    try:
        return typing.get_type_hints(fn, localns=dict(vars(typing)))
    except Exception:  # noqa: BLE001 - an unresolvable name: keep what the simple names give
        builtin = {t.__name__: t for t in _JSON_TYPES}
        return {
            name: builtin.get(ann, ann) if isinstance(ann, str) else ann
            for name, ann in getattr(fn, "__annotations__", {}).items()
        }


def _infer_parameters(fn: Callable[..., Any], param_docs: Mapping[str, str]) -> dict[str, Any]:
    """The ``parameters`` JSON schema of ``fn`` from its signature."""
    hints = _type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    extra = False
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind is param.VAR_KEYWORD:
            extra = True
            continue
        if param.kind is param.VAR_POSITIONAL:
            continue  # a JSON object has no positional arguments
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(
                f"tool function {fn.__name__}: parameter {name!r} is positional-only; tools are "
                "called with keyword arguments (the JSON object's keys)"
            )
        prop = _json_type(hints.get(name, param.annotation))
        if name in param_docs:
            prop["description"] = param_docs[name]
        if param.default is inspect.Parameter.empty:
            required.append(name)
        elif param.default is None or isinstance(param.default, (str, int, float, bool)):
            prop["default"] = param.default
        properties[name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if not extra:
        schema["additionalProperties"] = False
    return schema


# ---------------------------------------------------------------------- Tool / ToolSet
@dataclass
class Tool:
    """An executable tool: name + OpenAI function schema + callable.

    Attributes:
        name: the function name the model calls (``[A-Za-z0-9_-]{1,64}``, as the OpenAI API
            requires).
        fn: the callable, ``fn(**arguments)``; sync or ``async def``. Its return value is shown
            to the model (``str`` as is, anything else as JSON). Raise :class:`ToolError` for a
            message shown verbatim; any other exception is shown with its type.
        description: what the tool does, for the model.
        parameters: JSON schema of the arguments object.
        run_in_thread: run a *sync* ``fn`` in a worker thread (so slow tools don't block other
            episodes and ``timeout`` applies). Cheap pure-Python tools (game moves) set False.
        available: ``() -> bool``, whether the tool can work here (its sandbox, service or
            module); an unavailable built-in is left out of the default tool set instead of
            failing on every call.
    """

    name: str
    fn: Callable[..., Any]
    description: str = ""
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}, "required": []}
    )
    run_in_thread: bool = True
    available: Optional[Callable[[], bool]] = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name):
            raise ValueError(
                f"tool name {self.name!r} is invalid: use 1-64 letters, digits, '_' or '-' "
                "(the OpenAI function-name rule)"
            )
        if not callable(self.fn):
            raise TypeError(f"tool {self.name!r}: fn must be callable, got {self.fn!r}")
        if (
            not isinstance(self.parameters, dict)
            or self.parameters.get("type", "object") != "object"
        ):
            raise ValueError(
                f"tool {self.name!r}: parameters must be a JSON schema of type 'object', got "
                f"{self.parameters!r}"
            )
        # Registry duplicate detection compares module + qualname: give the tool those of its
        # function so re-importing a plugin module re-registers instead of clashing.
        self.__module__ = getattr(self.fn, "__module__", __name__)
        self.__qualname__ = f"Tool[{getattr(self.fn, '__qualname__', self.name)}]"

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        name: Optional[str] = None,
        description: Optional[str] = None,
        parameters: Optional[dict[str, Any]] = None,
        run_in_thread: bool = True,
        available: Optional[Callable[[], bool]] = None,
    ) -> Tool:
        """A tool from a function, inferring the schema from its signature and docstring."""
        doc_description, param_docs = _docstring_parts(fn.__doc__)
        return cls(
            name=name or fn.__name__,
            fn=fn,
            description=description if description is not None else doc_description,
            parameters=parameters if parameters is not None else _infer_parameters(fn, param_docs),
            run_in_thread=run_in_thread,
            available=available,
        )

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools=[...]`` entry of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def is_available(self) -> bool:
        """Whether the tool can work here (``available``; a failing check counts as no)."""
        if self.available is None:
            return True
        try:
            return bool(self.available())
        except Exception:  # noqa: BLE001 - a broken check means "not available"
            return False

    def __call__(self, **arguments: Any) -> Any:
        """Call the underlying function directly (no argument checks, no error conversion)."""
        return self.fn(**arguments)

    def check_arguments(self, arguments: Mapping[str, Any]) -> Optional[str]:
        """Why ``arguments`` do not fit the schema (missing / unexpected keys), else None."""
        properties = self.parameters.get("properties") or {}
        required = [k for k in self.parameters.get("required") or [] if k not in arguments]
        if required:
            return f"{self.name} is missing required argument(s) {', '.join(map(repr, required))}"
        if self.parameters.get("additionalProperties") is False:
            unknown = [k for k in arguments if k not in properties]
            if unknown:
                return (
                    f"{self.name} got unexpected argument(s) {', '.join(map(repr, unknown))}; it "
                    f"accepts: {', '.join(properties) or 'no arguments'}"
                )
        return None

    async def invoke(self, arguments: Mapping[str, Any], timeout: Optional[float]) -> Any:
        """Run the tool (awaiting async tools, threading blocking ones) within ``timeout``."""
        if inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(
            type(self.fn).__call__  # an object with ``async def __call__``
        ):
            return await asyncio.wait_for(self.fn(**arguments), timeout)
        if self.run_in_thread:
            return await asyncio.wait_for(asyncio.to_thread(self.fn, **arguments), timeout)
        result = self.fn(**arguments)
        if inspect.isawaitable(result):
            result = await asyncio.wait_for(result, timeout)
        return result


@dataclass
class ToolResult:
    """The outcome of one tool call: ``content`` goes into the ``role: tool`` message.

    ``error`` is set (to the same text) when the call failed, so workflows can count errors.
    """

    name: str
    content: str
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None


class ToolSet:
    """The tools available in one episode; executes calls and never raises.

    Args:
        tools: the executable tools.
        schemas: the schemas to advertise (defaults to each tool's own); a task row may
            describe a registered tool in its own words.
        timeout: seconds per call (``None``: unbounded).
        max_output_chars: longer outputs are cut, with a note saying how much was dropped.
    """

    def __init__(
        self,
        tools: Iterable[Tool],
        schemas: Optional[Sequence[dict[str, Any]]] = None,
        timeout: Optional[float] = DEFAULT_TOOL_TIMEOUT,
        max_output_chars: int = DEFAULT_MAX_TOOL_OUTPUT_CHARS,
    ) -> None:
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            if not isinstance(tool, Tool):
                raise TypeError(f"ToolSet takes Tool objects, got {type(tool).__name__}")
            if tool.name in self.tools:
                raise ValueError(f"ToolSet: tool name {tool.name!r} appears twice")
            self.tools[tool.name] = tool
        self.schemas: list[dict[str, Any]] = (
            [normalize_tool_schema(s) for s in schemas]
            if schemas is not None
            else [t.schema for t in self.tools.values()]
        )
        if timeout is not None and timeout <= 0:
            raise ValueError(f"tool timeout must be > 0 seconds or None, got {timeout!r}")
        if max_output_chars < 1:
            raise ValueError(f"max_output_chars must be >= 1, got {max_output_chars!r}")
        self.timeout = timeout
        self.max_output_chars = int(max_output_chars)

    @classmethod
    def from_names(cls, names: Iterable[str], **kwargs: Any) -> ToolSet:
        """A tool set of registered tools (``TOOLS``), refusing unknown names."""
        return cls(get_tools(names), **kwargs)

    @property
    def names(self) -> list[str]:
        return list(self.tools)

    def _error(self, name: str, message: str) -> ToolResult:
        text = f"Error: {message}"
        return ToolResult(name=name, content=text, error=text)

    async def execute(
        self, name: str, arguments: Union[str, Mapping[str, Any], None]
    ) -> ToolResult:
        """Run one tool call; failures come back as an error :class:`ToolResult`.

        Args:
            name: the function name the model called.
            arguments: the JSON text of the arguments (as the OpenAI API returns it), an
                already-parsed mapping, or None / "" for no arguments.
        """
        tool = self.tools.get(name)
        if tool is None:
            return self._error(
                name,
                f"unknown tool {name!r}. Available tools: {', '.join(self.tools) or 'none'}.",
            )
        if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
            parsed: Any = {}
        elif isinstance(arguments, str):
            try:
                parsed = json.loads(arguments)
            except json.JSONDecodeError as exc:
                return self._error(
                    name,
                    f"the arguments of {name} are not valid JSON ({exc.msg} at character "
                    f"{exc.pos}); send a JSON object with the keys "
                    f"{', '.join(tool.parameters.get('properties') or {}) or '(none)'}.",
                )
        else:
            parsed = arguments
        if not isinstance(parsed, Mapping):
            return self._error(
                name, f"the arguments of {name} must be a JSON object, got {type(parsed).__name__}."
            )
        problem = tool.check_arguments(parsed)
        if problem is not None:
            return self._error(name, problem + ".")
        try:
            value = await tool.invoke(dict(parsed), self.timeout)
        except asyncio.TimeoutError:
            return self._error(name, f"{name} timed out after {self.timeout:g}s.")
        except ToolError as exc:
            return self._error(name, f"{name}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a tool failure is feedback for the model
            return self._error(name, f"{name} failed: {type(exc).__name__}: {exc}")
        return ToolResult(name=name, content=self._render(value))

    def _render(self, value: Any) -> str:
        if value is None:
            text = "(no output)"
        elif isinstance(value, str):
            text = value
        else:
            try:
                text = json.dumps(value, ensure_ascii=False, default=str)
            except (TypeError, ValueError):
                text = str(value)
        if len(text) > self.max_output_chars:
            dropped = len(text) - self.max_output_chars
            text = (
                text[: self.max_output_chars]
                + f"\n... [output truncated: {dropped} more characters]"
            )
        return text


# ---------------------------------------------------------------------- registration helpers
def register_tool(
    name: Optional[str] = None,
    *,
    description: Optional[str] = None,
    parameters: Optional[dict[str, Any]] = None,
    run_in_thread: bool = True,
    available: Optional[Callable[[], bool]] = None,
    force: bool = False,
) -> Callable[[Callable[..., Any]], Tool]:
    """Decorator registering a function as a tool in :data:`TOOLS` (see the module docstring).

    Returns the :class:`Tool` (still callable like the function). ``force=True`` replaces a tool
    registered under the same name by other code.
    """
    if callable(name) and not isinstance(name, str):
        raise TypeError("use @register_tool() or @register_tool('name'), with parentheses")

    def decorator(fn: Callable[..., Any]) -> Tool:
        tool = Tool.from_function(
            fn,
            name=name,
            description=description,
            parameters=parameters,
            run_in_thread=run_in_thread,
            available=available,
        )
        TOOLS.register_module(tool.name, tool, force=force)
        return tool

    return decorator


def get_tools(names: Iterable[str]) -> list[Tool]:
    """Registered tools by name (an unknown name raises, listing the known ones)."""
    if isinstance(names, str):
        raise TypeError(f"tool names must be a list of names, got the string {names!r}")
    tools = []
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"tool names must be strings, got {name!r}")
        tool = TOOLS[name]
        if not isinstance(tool, Tool):
            raise TypeError(f"TOOLS[{name!r}] is {tool!r}, not a Tool")
        tools.append(tool)
    return tools


def normalize_tool_schema(schema: Any) -> dict[str, Any]:
    """An OpenAI ``{"type": "function", "function": {...}}`` entry from either common form.

    Accepts that form or a bare ``{"name", "description", "parameters"}`` function description
    (as many tool-use data sets store it).
    """
    if not isinstance(schema, Mapping):
        raise ValueError(
            f"a tool schema must be a JSON object, got {type(schema).__name__}: {schema!r}"
        )
    fn = schema.get("function") if schema.get("type", "function") == "function" else None
    if isinstance(fn, Mapping):
        body = dict(fn)
    elif isinstance(schema.get("name"), str):
        body = {k: v for k, v in schema.items() if k != "type"}
    else:
        raise ValueError(
            "a tool schema needs a function name: either {'type': 'function', 'function': "
            "{'name': ...}} or {'name': ..., 'parameters': ...}; got " + repr(dict(schema))
        )
    if not isinstance(body.get("name"), str) or not body["name"]:
        raise ValueError(f"a tool schema's function has no name: {dict(schema)!r}")
    body.setdefault("description", "")
    body.setdefault("parameters", {"type": "object", "properties": {}})
    return {"type": "function", "function": body}
