"""Math rewards: answers compared with ``math-verify``, not with string equality.

``math-verify`` parses LaTeX and plain expressions into sympy and compares them semantically, so
``\\frac{1}{2}``, ``0.5`` and ``\\boxed{1/2}`` match, ``5\\text{ cm}`` matches ``5``, sets and
intervals compare as such, and a wrong answer is wrong however it is written.

Its built-in timeouts use ``signal.alarm`` and refuse to run outside the main thread (where
workflows and rewards run), so they are switched off there; :func:`compute_reward` bounds the
whole call instead.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, Callable, Optional

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.workflows.rewards.format import THINK_ANSWER_PATTERN, FormatReward

__all__ = [
    "AccuracyReward",
    "MathBoxedRewardFn",
    "MathRewardFn",
    "extract_answer_tag",
    "extract_boxed",
    "is_equivalent",
    "validate_think_pattern",
]

# math-verify warns once per process that its own timeout is off; ours is on (compute_reward).
for _name in ("math_verify.grader", "math_verify.parser"):
    logging.getLogger(_name).setLevel(logging.ERROR)

_GOLD_CONFIG = [LatexExtractionConfig(), ExprExtractionConfig()]
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def _timeout() -> Optional[int]:
    """math-verify's own (signal-based) timeout where it works: only the main thread."""
    return 5 if threading.current_thread() is threading.main_thread() else None


def _has_delimiters(text: str) -> bool:
    return any(mark in text for mark in ("$", "\\boxed", "\\(", "\\["))


def parse_bare(text: Any) -> list:
    """Parse a bare answer (``\\frac12``, ``2\\pi``, ``0.5``) as LaTeX math, else as an expression."""
    text = str(text).strip()
    if not _has_delimiters(text):
        text = f"${text}$"
    return parse(text, extraction_config=_GOLD_CONFIG, parsing_timeout=_timeout())


def is_equivalent(answer: str, truth: Any, bare: bool = False) -> bool:
    """Whether the final answer in ``answer`` is mathematically equal to ``truth``.

    Args:
        answer: a whole response (math-verify takes the last ``\\boxed{}``, else the last
            LaTeX or plain expression) or, with ``bare=True``, an already extracted answer
            such as the content of an ``<answer>`` tag, read as LaTeX math.
        truth: the reference answer (bare LaTeX or plain).

    An unparseable answer counts as not equal; an unparseable reference raises ``ValueError``
    (a data error, reported as ``reward_error``, not a silent 0).
    """
    if truth is None or answer is None:
        return False
    gold = parse_bare(truth)
    if not gold:
        raise ValueError(f"the reference answer {truth!r} could not be parsed as math")
    pred = parse(f"\\boxed{{{answer}}}", parsing_timeout=_timeout()) if bare else []
    if not pred:
        pred = parse(str(answer), parsing_timeout=_timeout())
    if not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=_timeout()))


def extract_answer_tag(response: str) -> Optional[str]:
    """The content of the last ``<answer>…</answer>`` block, or ``None``."""
    found = _ANSWER_TAG.findall(response or "")
    return found[-1].strip() if found else None


def extract_boxed(response: str) -> Optional[str]:
    """The content of the last ``\\boxed{…}`` (braces balanced), or ``None``."""
    text = response or ""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def validate_think_pattern(response: str) -> bool:
    """Exactly one ``<think>…</think>`` block, before the answer."""
    text = response or ""
    if text.count("<think>") != 1 or text.count("</think>") != 1:
        return False
    return text.index("<think>") < text.index("</think>")


def _answer_of(response: str) -> tuple[str, bool]:
    """The answer of an R1-style response: the ``<answer>`` block (bare) if any, else all."""
    tagged = extract_answer_tag(response)
    return (tagged, True) if tagged is not None else (response or "", False)


@REWARD_FUNCTIONS.register_module("accuracy_reward")
class AccuracyReward(RewardFn):
    """1.0 when the response's answer equals the reference (math-verify), else 0.0.

    Args:
        answer_parser: optional ``fn(response) -> str | None`` extracting the answer (read as
            bare LaTeX math). The default reads the last ``<answer>`` block when present, else
            lets math-verify find the final answer in the whole response.
    """

    def __init__(self, answer_parser: Optional[Callable[[str], Optional[str]]] = None) -> None:
        self.answer_parser = answer_parser

    def __call__(  # type: ignore[override]
        self, response: str, truth: Any = None, prompt: Optional[str] = None, **kwargs: Any
    ) -> dict[str, float]:
        if truth is None:
            raise ValueError("accuracy_reward needs the reference answer (format.response_key)")
        if self.answer_parser is not None:
            answer, bare = self.answer_parser(response), True
        else:
            answer, bare = _answer_of(response)
        ok = answer is not None and is_equivalent(answer, truth, bare=bare)
        return {"accuracy": 1.0 if ok else 0.0}


@REWARD_FUNCTIONS.register_module("math_reward")
class MathRewardFn(RewardFn):
    """DeepSeek-R1 style math reward: accuracy of the ``<answer>`` + a format term.

    Components: ``accuracy`` (1.0 / 0.0, math-verify) and ``format_score`` (+0.1 when the
    response is ``<think>…</think><answer>…</answer>``, -0.1 otherwise; see
    :class:`~trinity.workflows.rewards.format.FormatReward`).
    """

    def __init__(
        self,
        answer_parser: Optional[Callable[[str], Optional[str]]] = None,
        pattern: str = THINK_ANSWER_PATTERN,
        format_score: float = 0.1,
    ) -> None:
        self.accuracy_reward = AccuracyReward(answer_parser)
        self.format_reward = FormatReward(pattern=pattern, score=format_score)

    def __call__(  # type: ignore[override]
        self, response: str, truth: Any = None, prompt: Optional[str] = None, **kwargs: Any
    ) -> dict[str, float]:
        return {**self.accuracy_reward(response, truth), **self.format_reward(response)}


@REWARD_FUNCTIONS.register_module("math_boxed_reward")
class MathBoxedRewardFn(RewardFn):
    """Accuracy of the last ``\\boxed{}`` answer, with an optional ``<think>`` requirement.

    Components: ``accuracy`` (1.0 / 0.0; no ``\\boxed{}`` scores 0) and ``format_score``
    (``-format_score_coef`` when ``with_think`` and the response lacks one well-formed
    ``<think>`` block, else 0). ``with_think`` / ``format_score_coef`` come per call from
    ``math_boxed_workflow`` (its ``workflow_args``) or from ``reward_fn_args``.
    """

    def __init__(self, with_think: bool = False, format_score_coef: float = 0.1) -> None:
        self.with_think = with_think
        self.format_score_coef = format_score_coef

    def __call__(  # type: ignore[override]
        self,
        response: str,
        truth: Any = None,
        with_think: Optional[bool] = None,
        format_score_coef: Optional[float] = None,
        **kwargs: Any,
    ) -> dict[str, float]:
        if truth is None:
            raise ValueError("math_boxed_reward needs the reference answer (format.response_key)")
        with_think = self.with_think if with_think is None else with_think
        coef = self.format_score_coef if format_score_coef is None else format_score_coef
        boxed = extract_boxed(response)
        accuracy = 1.0 if boxed is not None and is_equivalent(boxed, truth, bare=True) else 0.0
        format_score = -float(coef) if with_think and not validate_think_pattern(response) else 0.0
        return {"accuracy": accuracy, "format_score": format_score}
