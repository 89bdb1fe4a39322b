"""Scoring of single-turn tool calls against reference calls (``tool_call_reward``).

This module owns :func:`parse_reference_calls` (the task's expected calls, from JSON text or
dicts), :func:`score_tool_calls` (a name-and-arguments match in ``[0, 1]`` with an optimal
pairing of predicted and reference calls) and :class:`ToolCallRewardFn`, the reward function
that :class:`~trinity.workflows.agent.ToolCallWorkflow` uses by default.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn


# ---------------------------------------------------------------------- tool-call scoring
def _parse_arguments(arguments: Any) -> Any:
    """Arguments as a dict; JSON text is parsed; unparseable text is returned unchanged."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments


def _as_call(item: Any, where: str) -> dict[str, Any]:
    if isinstance(item, Mapping) and isinstance(item.get("function"), Mapping):
        item = item["function"]
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
        raise ValueError(
            f"{where}: a tool call must be {{'name': ..., 'arguments': {{...}}}}, got {item!r}"
        )
    args = item.get("arguments", item.get("parameters"))
    return {"name": item["name"], "arguments": _parse_arguments(args)}


def parse_reference_calls(
    truth: Any, where: str = "the reference tool calls"
) -> list[dict[str, Any]]:
    """Reference calls as ``[{"name", "arguments": dict}]``.

    Accepts a list of calls or one call, as Python objects or JSON text; a call is
    ``{"name", "arguments"}`` (or ``"parameters"``), or the OpenAI ``{"function": {...}}`` form.
    An empty list means "no tool should be called".
    """
    if truth is None:
        raise ValueError(f"{where} are missing (None)")
    if isinstance(truth, str):
        try:
            truth = json.loads(truth)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} are not valid JSON ({exc}): {truth[:200]!r}") from exc
    if isinstance(truth, Mapping):
        truth = [truth]
    if not isinstance(truth, (list, tuple)):
        raise ValueError(f"{where} must be a list of calls, got {type(truth).__name__}")
    calls = [_as_call(item, where) for item in truth]
    for call in calls:
        if not isinstance(call["arguments"], Mapping):
            raise ValueError(f"{where}: the arguments of {call['name']!r} are not a JSON object")
    return calls


def _values_equal(a: Any, b: Any) -> bool:
    """Argument values equal up to formatting: 3 == 3.0 == "3", strings compared stripped."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(_values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_values_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, str) and isinstance(b, (int, float)):
        a, b = b, a
    if isinstance(a, (int, float)) and isinstance(b, str):
        try:
            return math.isclose(a, float(b.strip()), rel_tol=1e-9, abs_tol=1e-12)
        except ValueError:
            return False
    if isinstance(a, str) and isinstance(b, str):
        return a.strip() == b.strip()
    return a == b


def _pair_score(pred: Mapping[str, Any], ref: Mapping[str, Any], name_weight: float) -> float:
    if pred["name"] != ref["name"]:
        return 0.0
    p_args, r_args = pred["arguments"], ref["arguments"]
    if not isinstance(p_args, Mapping):
        arg_score = 0.0  # arguments that are not a JSON object
    else:
        keys = set(p_args) | set(r_args)
        matched = sum(
            1 for k in keys if k in p_args and k in r_args and _values_equal(p_args[k], r_args[k])
        )
        arg_score = matched / len(keys) if keys else 1.0
    return name_weight + (1.0 - name_weight) * arg_score


def score_tool_calls(
    predicted: Sequence[Mapping[str, Any]],
    reference: Sequence[Mapping[str, Any]],
    name_weight: float = 0.5,
) -> float:
    """Score produced tool calls against reference calls, in ``[0, 1]``.

    * A pair of calls with different names scores 0. With the same name it scores
      ``name_weight + (1 - name_weight) * a``, where ``a`` is the fraction of argument keys
      (union of both calls' keys) present in both with equal values (3 == 3.0 == "3"; strings
      compared after stripping); arguments that are not a JSON object give ``a = 0``.
    * Calls are paired greedily, best pairs first (order does not matter); the total is the
      sum of pair scores divided by ``max(len(predicted), len(reference))``, so missing and
      extra calls both cost.
    * No reference calls: 1 if nothing was called, else 0.

    E.g. reference ``get_weather(city="Paris", unit="C")``: the exact call scores 1, the right
    function with ``unit="F"`` 0.75, another function 0, no call 0.
    """
    if not reference:
        return 1.0 if not predicted else 0.0
    if not predicted:
        return 0.0
    pairs = sorted(
        (
            (_pair_score(p, r, name_weight), i, j)
            for i, p in enumerate(predicted)
            for j, r in enumerate(reference)
        ),
        key=lambda t: -t[0],
    )
    used_p: set[int] = set()
    used_r: set[int] = set()
    total = 0.0
    for score, i, j in pairs:
        if i in used_p or j in used_r:
            continue
        used_p.add(i)
        used_r.add(j)
        total += score
    return total / max(len(predicted), len(reference))


@REWARD_FUNCTIONS.register_module("tool_call_reward")
class ToolCallRewardFn(RewardFn):
    """Reward of :class:`ToolCallWorkflow`: produced vs reference calls (:func:`score_tool_calls`).

    Called with ``tool_calls`` (the produced ``[{"name", "arguments"}]``) and ``truth`` (the
    reference, see :func:`parse_reference_calls`). Returns ``{"tool_call": score}``.

    Args:
        name_weight: credit for calling the right function with wrong arguments (0.5).
    """

    def __init__(self, name_weight: float = 0.5) -> None:
        if (
            isinstance(name_weight, bool)
            or not isinstance(name_weight, (int, float))
            or not 0 <= name_weight <= 1
        ):
            raise ValueError(
                f"tool_call_reward: name_weight must be in [0, 1], got {name_weight!r}"
            )
        self.name_weight = float(name_weight)

    def __call__(  # type: ignore[override]
        self,
        tool_calls: Optional[Sequence[Mapping[str, Any]]] = None,
        truth: Any = None,
        **kwargs: Any,
    ) -> dict[str, float]:
        reference = parse_reference_calls(truth)
        predicted = [_as_call(c, "the produced tool calls") for c in (tool_calls or [])]
        return {"tool_call": score_tool_calls(predicted, reference, self.name_weight)}
