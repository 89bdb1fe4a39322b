"""Countdown reward (TinyZero): an equation over the given numbers that hits the target.

The equation is read from the last ``<answer>`` block and evaluated with a small ``ast``
interpreter (numbers, ``+ - * /``, parentheses) — never with ``eval`` on model output.
"""

from __future__ import annotations

import ast
import json
import operator
from collections import Counter
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Optional

from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.workflows.rewards.math import extract_answer_tag

__all__ = ["CountDownRewardFn", "evaluate_equation"]

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


class EquationError(ValueError):
    """The answer is not an arithmetic expression over numbers."""


def evaluate_equation(expression: str) -> tuple[Fraction, list[int]]:
    """Evaluate ``expression`` exactly; return its value and the integer literals it uses.

    Raises:
        EquationError: anything but integers, ``+ - * /``, unary minus and parentheses, a
            division by zero, or an expression longer than 200 characters.
    """
    if len(expression) > 200:
        raise EquationError("expression longer than 200 characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise EquationError(f"not an expression: {expression!r}") from exc
    used: list[int] = []

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            used.append(node.value)
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise EquationError("division by zero")
            return _OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise EquationError(f"unsupported element {type(node).__name__} in {expression!r}")

    return walk(tree), used


def _parse_truth(truth: Any) -> tuple[list[int], Fraction]:
    if isinstance(truth, str):
        try:
            truth = json.loads(truth)
        except json.JSONDecodeError as exc:
            raise ValueError(f"countdown_reward: truth is not JSON: {truth!r}") from exc
    if not isinstance(truth, Mapping) or "target" not in truth:
        raise ValueError(
            f"countdown_reward: truth must be {{'numbers': [...], 'target': N}}, got {truth!r}"
        )
    numbers = truth.get("numbers", truth.get("nums"))
    if not isinstance(numbers, Sequence) or isinstance(numbers, str):
        raise ValueError(f"countdown_reward: 'numbers' must be a list, got {numbers!r}")
    return [int(n) for n in numbers], Fraction(truth["target"])


@REWARD_FUNCTIONS.register_module("countdown_reward")
class CountDownRewardFn(RewardFn):
    """1.0 for a correct equation, ``format_score`` for a well-formed wrong one, else 0.

    Correct means: the ``<answer>`` holds an arithmetic expression using each given number
    exactly once (all of them, as in TinyZero) whose exact value equals the target.
    """

    def __init__(self, format_score: float = 0.1, score: float = 1.0) -> None:
        self.format_score = float(format_score)
        self.score = float(score)

    def __call__(  # type: ignore[override]
        self, response: str, truth: Any = None, **kwargs: Any
    ) -> dict[str, float]:
        numbers, target = _parse_truth(truth)
        equation: Optional[str] = extract_answer_tag(response)
        if equation is None:
            return {"accuracy": 0.0}
        try:
            value, used = evaluate_equation(equation)
        except EquationError:
            return {"accuracy": self.format_score}
        if Counter(used) != Counter(numbers):
            return {"accuracy": self.format_score}
        return {"accuracy": self.score if value == target else self.format_score}
