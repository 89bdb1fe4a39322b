"""The quickstart's reward: is the first number of the answer the value of the question?"""

from __future__ import annotations

import re
from typing import Any

from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.workflows.rewards.countdown import evaluate_equation

__all__ = ["ArithmeticRewardFn", "evaluate_question", "first_integer"]

_INT = re.compile(r"-?\d+")


def evaluate_question(question: str) -> int:
    """The integer value of an arithmetic question such as ``"12+7="`` or ``"3*4 = ?"``.

    Raises:
        ValueError: the question is not integer arithmetic with an integer result.
    """
    expression = str(question).split("=")[0].replace("×", "*").replace("÷", "/").strip()
    value, _ = evaluate_equation(expression)
    if value.denominator != 1:
        raise ValueError(f"{question!r} has a non-integer value {value}")
    return int(value)


def first_integer(text: str) -> int | None:
    """The first integer in ``text`` (``"17 apples"`` → 17), or ``None``."""
    match = _INT.search(text or "")
    return int(match.group()) if match else None


@REWARD_FUNCTIONS.register_module("arithmetic_reward")
class ArithmeticRewardFn(RewardFn):
    """``{"accuracy": 1.0}`` when the answer's first integer is the truth, else 0.

    Args:
        partial_credit: add ``digit_score`` = 0.5 × the fraction of the truth's digits that the
            answer has in the right (right-aligned) position, only when the answer is wrong —
            a denser signal for a tiny model early in training. Off by default.
        strict: require the answer to be only the number (whitespace allowed), so a model
            cannot hedge with several numbers.
    """

    def __init__(self, partial_credit: bool = False, strict: bool = False) -> None:
        self.partial_credit = bool(partial_credit)
        self.strict = bool(strict)

    def __call__(  # type: ignore[override]
        self, response: str, truth: Any = None, prompt: str | None = None, **kwargs: Any
    ) -> dict[str, float]:
        if truth is None:
            if prompt is None:
                raise ValueError("arithmetic_reward needs the truth or the question")
            truth = evaluate_question(prompt)
        expected = int(str(truth).strip())
        text = (response or "").strip()
        if self.strict and not re.fullmatch(r"-?\d+", text):
            got = None
        else:
            got = first_integer(text)
        if got == expected:
            return {"accuracy": 1.0}
        out = {"accuracy": 0.0}
        if self.partial_credit:
            out["digit_score"] = 0.5 * _digit_overlap(got, expected)
        return out


def _digit_overlap(got: int | None, expected: int) -> float:
    if got is None:
        return 0.0
    a, b = str(abs(got))[::-1], str(abs(expected))[::-1]
    same = sum(1 for x, y in zip(a, b, strict=False) if x == y)
    return same / max(len(a), len(b))
