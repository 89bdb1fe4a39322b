"""Answer extraction and comparison helpers under the names Trinity-RFT's reward code uses.

Trinity-RFT keeps a toolbox of string-level math helpers that user reward functions import:
``trinity.common.rewards.eval_utils`` (0.6), ``trinity.common.rewards.qwen25_eval`` and
``trinity.common.rewards.naive_dapo_score`` (0.6), and the older ``trinity.utils.eval_utils``,
``trinity.utils.qwen25_eval_utils`` and ``trinity.utils.math_utils``. Those paths are thin
re-exports of this module (core's namespace, resolved lazily: this package owns math-verify).

The helpers come in three kinds:

* extraction -- the last ``\\boxed{}`` (:func:`last_boxed_only_string`,
  :func:`find_boxed_answer`), an ``<answer>`` tag (:func:`extract_solution`), or the final
  answer of free text (:func:`extract_answer`: boxed, then "answer is", then the last number);
* string normalisation -- :func:`strip_string` rewrites LaTeX spellings that mean the same
  (``\\dfrac`` / ``\\frac``, ``0.5`` / ``\\frac{1}{2}``, units, ``%``, ``$``, spaces), and
  :func:`is_equiv` / :func:`compute_score_v0` compare normalised strings;
* semantic comparison -- :func:`math_equal`, :func:`verify_math_answer`, :func:`grade_answer`
  compare numbers numerically and expressions with math-verify (the library our math rewards
  use), where Trinity-RFT calls sympy directly. So ``x = 5`` equals ``5`` and ``\\frac{1}{2}``
  equals ``0.5`` alike, and an unparseable expression is simply unequal.
"""

from __future__ import annotations

import concurrent.futures
import math
import re
from collections.abc import Iterable
from fractions import Fraction
from typing import Any, Optional, Union

from math_verify import parse, verify

from trinity.workflows.rewards.countdown import EquationError
from trinity.workflows.rewards.countdown import evaluate_equation as _evaluate_fraction
from trinity.workflows.rewards.math import is_equivalent, validate_think_pattern

__all__ = [
    "ANS_RE",
    "INVALID_ANS",
    "compute_score",
    "compute_score_v0",
    "evaluate_equation",
    "extract_answer",
    "extract_solution",
    "find_boxed_answer",
    "fix_a_slash_b",
    "fix_fracs",
    "fix_sqrt",
    "grade_answer",
    "is_equiv",
    "last_boxed_only_string",
    "match_answer",
    "math_equal",
    "normalize_final_answer",
    "parse_with_timeout",
    "remove_boxed",
    "remove_right_units",
    "simple_answer_parser",
    "strip_string",
    "validate_equation",
    "validate_think_pattern",
    "verify_math_answer",
    "verify_with_timeout",
]

#: GSM8K's reference format: the answer after ``####``.
ANS_RE = re.compile(r"#### (\-?[0-9\.\,]+)")
#: what GSM8K-style parsers return for a response without an answer
INVALID_ANS = "[invalid]"

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
#: "the answer is ..." in English and Chinese, the last occurrence wins
_ANSWER_IS = re.compile(r"(?:answer\s+is|答案是|答案为)", re.IGNORECASE)


# ---------------------------------------------------------------------- math-verify with a bound
def _bounded(call: Any, timeout: float, what: str) -> Any:
    """Run ``call()`` in a worker thread, at most ``timeout`` seconds: math-verify's own timeout
    relies on ``signal.alarm``, which only works in the main thread."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(call).result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise TimeoutError(f"{what} took longer than {timeout} s") from None
    finally:
        pool.shutdown(wait=False)


def parse_with_timeout(pred: str, parsing_timeout: float = 5, **kwargs: Any) -> list:
    """math-verify's ``parse(pred)``, bounded by ``parsing_timeout`` seconds (``TimeoutError``)."""
    return _bounded(lambda: parse(pred, parsing_timeout=None, **kwargs), parsing_timeout, "parsing")


def verify_with_timeout(gold: Any, target: Any, timeout_seconds: float = 5, **kwargs: Any) -> bool:
    """math-verify's ``verify(gold, target)``, bounded by ``timeout_seconds`` seconds."""
    return bool(
        _bounded(
            lambda: verify(gold, target, timeout_seconds=None, **kwargs),
            timeout_seconds,
            "verification",
        )
    )


def simple_answer_parser(response: str) -> list:
    """math-verify's parse of the ``<answer>`` block of ``response`` (all of it when none)."""
    found = _ANSWER_TAG.search(response)
    return parse_with_timeout(found.group(1) if found else response)


# ---------------------------------------------------------------------- extraction
def _balanced_group(text: str, open_at: int) -> Optional[int]:
    """Index of the ``}`` closing the ``{`` at ``open_at``, or ``None`` when it never closes."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def last_boxed_only_string(string: str) -> Optional[str]:
    """The last ``\\boxed{...}`` (or ``\\fbox{...}``) of ``string`` with its wrapper, e.g.
    ``"\\boxed{42}"``; ``"\\boxed 5"`` (boxed without braces) up to the next ``$``; else ``None``."""
    if "\\boxed " in string:
        return "\\boxed " + string.split("\\boxed ")[-1].split("$")[0]
    start = string.rfind("\\boxed")
    if start < 0:
        start = string.rfind("\\fbox")
        if start < 0:
            return None
    brace = string.find("{", start)
    end = _balanced_group(string, brace) if brace >= 0 else None
    return None if end is None else string[start : end + 1]


def remove_boxed(s: str) -> str:
    """``"\\boxed{42}"`` -> ``"42"`` (also ``"\\boxed 42"``).

    Raises:
        ValueError: ``s`` is not a boxed expression.
    """
    if s.startswith("\\boxed "):
        return s[len("\\boxed ") :]
    for left in ("\\boxed{", "\\fbox{"):
        if s.startswith(left) and s.endswith("}"):
            return s[len(left) : -1]
    raise ValueError(f"not a boxed expression: {s!r}")


def find_boxed_answer(raw_answer: str, timeout: float = 10) -> Optional[str]:
    """The content of the last ``\\boxed`` of ``raw_answer`` (``\\boxed{a}`` or
    ``\\boxed a``), or ``None``. ``timeout`` is Trinity-RFT's argument (its regex could
    backtrack); this scan is linear and ignores it."""
    boxed = last_boxed_only_string(raw_answer)
    return None if boxed is None else remove_boxed(boxed).strip()


def extract_solution(solution_str: str) -> Optional[str]:
    """The last ``<answer>...</answer>`` of the response's last line, stripped (Countdown)."""
    last_line = solution_str.split("\n")[-1]
    found = _ANSWER_TAG.findall(last_line)
    return found[-1].strip() if found else None


def _last_number(text: str) -> Optional[str]:
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def extract_answer(response_text: Any) -> Optional[str]:
    """The final answer of a free-text response, or ``None`` (also for a non-string).

    In order: the content of the last ``\\boxed{}`` (an empty one is no answer); the text after
    the last "answer is" / "答案是" (without a leading colon or a trailing full stop); the last
    number (thousands separators removed).
    """
    if not isinstance(response_text, str):
        return None
    if "boxed" in response_text:
        boxed = find_boxed_answer(response_text)
        return boxed if boxed else None
    stated = list(_ANSWER_IS.finditer(response_text))
    if stated:
        rest = response_text[stated[-1].end() :].strip().lstrip(":：").strip()
        rest = rest.rstrip("。.").strip()
        if rest:
            return rest
    return _last_number(response_text)


# ---------------------------------------------------------------------- string normalisation
def fix_fracs(string: str) -> str:
    """Brace the arguments of ``\\frac``: ``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1b``
    -> ``\\frac{1}{b}``, ``\\frac{1}2`` -> ``\\frac{1}{2}``; a ``\\frac`` missing its
    arguments leaves the text as it is."""
    head, *parts = string.split("\\frac")
    out = [head]
    for part in parts:
        if part.startswith("{"):
            end = _balanced_group(part, 0)
            if end is not None and end + 1 < len(part) and part[end + 1] != "{":
                part = part[: end + 1] + "{" + part[end + 1] + "}" + part[end + 2 :]
        elif len(part) < 2:
            return string
        elif part[1] == "{":
            part = "{" + part[0] + "}" + part[1:]
        else:
            part = "{" + part[0] + "}{" + part[1] + "}" + part[2:]
        out.append("\\frac" + part)
    return "".join(out)


def fix_a_slash_b(string: str) -> str:
    """``"3/4"`` -> ``"\\frac{3}{4}"`` for two integers; anything else unchanged."""
    match = re.fullmatch(r"(-?\d+)/(\d+)", string)
    return f"\\frac{{{match.group(1)}}}{{{match.group(2)}}}" if match else string


def fix_sqrt(string: str) -> str:
    """Brace a one-character ``\\sqrt`` argument: ``\\sqrt3`` -> ``\\sqrt{3}``."""
    return re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", string)


def remove_right_units(string: str) -> str:
    """Drop a trailing unit written as ``\\text{ unit}`` (``"5\\text{ cm}"`` -> ``"5"``)."""
    if "\\text{ " in string:
        return string.split("\\text{ ")[0]
    return string


def strip_string(string: Any) -> Any:
    """Normalise a LaTeX answer so spellings of the same value compare equal as strings.

    Removes line breaks, ``\\!``, ``\\left`` / ``\\right``, degree marks, dollar and percent
    signs, a right-hand unit, spaces and a short ``x =`` prefix; writes ``\\tfrac`` /
    ``\\dfrac`` as ``\\frac``, braces ``\\frac`` and ``\\sqrt`` arguments, turns ``a/b`` of two
    integers into ``\\frac{a}{b}`` and ``0.5`` into ``\\frac{1}{2}``. ``None`` stays ``None``.
    """
    if string is None:
        return None
    text = str(string).strip().replace("\n", "").replace("\\!", "")
    text = text.replace("\\\\", "\\").replace("tfrac", "frac").replace("dfrac", "frac")
    text = text.replace("\\left", "").replace("\\right", "")
    text = text.replace("^{\\circ}", "").replace("^\\circ", "")
    text = text.replace("\\$", "").replace("$", "")
    text = remove_right_units(text)
    text = text.replace("\\%", "").replace("%", "")
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    if text.startswith("."):
        text = "0" + text
    lhs, eq, rhs = text.partition("=")
    if eq and "=" not in rhs and len(lhs.strip()) <= 2:
        text = rhs
    text = fix_sqrt(text).replace(" ", "")
    text = fix_fracs(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return fix_a_slash_b(text)


def is_equiv(str1: Optional[str], str2: Optional[str], verbose: bool = False) -> bool:
    """Whether two answers are equal after :func:`strip_string` (two ``None`` are equal)."""
    if str1 is None or str2 is None:
        return str1 is None and str2 is None
    try:
        left, right = strip_string(str1), strip_string(str2)
    except Exception:  # a normaliser bug must not crash a reward; compare as written
        return str1 == str2
    if verbose:
        print(left, right)
    return left == right


def normalize_final_answer(final_answer: str) -> str:
    """An answer as compared by :func:`grade_answer`: ``\\text{}`` unwrapped, then
    :func:`strip_string`."""
    text = (final_answer or "").strip()
    wrapped = re.fullmatch(r"\\text\{(.+?)\}", text)
    return strip_string(wrapped.group(1).strip() if wrapped else text)


# ---------------------------------------------------------------------- comparison
def _as_number(text: str) -> Optional[float]:
    try:
        return float(text.replace(",", "").replace("{,}", ""))
    except ValueError:
        return None


def math_equal(
    prediction: Optional[Union[str, float]],
    reference: Optional[Union[str, float]],
    tolerance: float = 1e-4,
) -> bool:
    """Whether two extracted answers are the same value: equal after :func:`strip_string`,
    numerically close (relative ``tolerance``), or equal as math (math-verify)."""
    if prediction is None or reference is None:
        return False
    pred, ref = str(prediction).strip(), str(reference).strip()
    if is_equiv(pred, ref):
        return True
    left, right = _as_number(pred), _as_number(ref)
    if left is not None and right is not None:
        return math.isclose(left, right, rel_tol=tolerance, abs_tol=tolerance * 1e-3)
    try:
        return is_equivalent(pred, ref, bare=True)
    except (ValueError, TimeoutError):
        return False


def verify_math_answer(response_text: str, ground_truth: Any) -> tuple[float, dict[str, Any]]:
    """``(1.0 or 0.0, details)``: whether the final answers of the response and of the
    reference (both through :func:`extract_answer`) are equal (:func:`math_equal`)."""
    predicted = extract_answer(response_text)
    truth = extract_answer(str(ground_truth))
    correct = math_equal(predicted, truth)
    details = {"parsed_prediction": predicted, "ground_truth": truth, "is_correct": correct}
    return (1.0 if correct else 0.0), details


def compute_score_v0(solution_str: str, ground_truth: str) -> float:
    """1.0 when the last ``\\boxed{}`` of the solution equals the reference (its last
    ``\\boxed{}`` if it has one, else all of it) after normalisation; 0.0 otherwise, also
    when the solution boxes nothing."""
    boxed = last_boxed_only_string(solution_str or "")
    if boxed is None:
        return 0.0
    truth_boxed = last_boxed_only_string(ground_truth or "")
    truth = remove_boxed(truth_boxed) if truth_boxed is not None else ground_truth
    return 1.0 if is_equiv(remove_boxed(boxed), truth) else 0.0


def match_answer(response: str) -> tuple[bool, str]:
    """``(found, answer)``: the content of the last ``\\boxed{}`` after any ``</think>``; when
    there is none, ``(False, the text after </think>)``."""
    tail = response.split("</think>")[-1]
    boxed = last_boxed_only_string(tail)
    if boxed is None or boxed.startswith("\\boxed "):
        return False, tail
    return True, remove_boxed(boxed).strip()


def grade_answer(given_answer: Optional[str], ground_truth: str) -> tuple[bool, str]:
    """``(correct, normalised given answer)``: equal after :func:`normalize_final_answer`, or
    the same value (:func:`math_equal`)."""
    if given_answer is None:
        return False, ""
    given = normalize_final_answer(given_answer)
    if given == normalize_final_answer(ground_truth):
        return True, given
    return math_equal(given_answer, ground_truth), given


def compute_score(solution_str: str, ground_truth: str) -> tuple[float, str]:
    """``(1.0 or 0.0, extracted answer)`` of a DAPO-style response: the last ``\\boxed{}``
    after ``</think>`` compared with the reference (:func:`grade_answer`)."""
    found, answer = match_answer(str(solution_str))
    if not found and len(answer) > 20:
        answer = answer[:20] + "(... output is truncated.)"
    correct, _ = grade_answer(answer, str(ground_truth)) if found else (False, "")
    return (1.0 if correct else 0.0), answer


# ---------------------------------------------------------------------- countdown equations
def validate_equation(equation_str: str, available_numbers: Iterable[int]) -> bool:
    """Whether the equation uses exactly the available numbers, each once."""
    try:
        used = sorted(int(n) for n in re.findall(r"\d+", equation_str))
        return used == sorted(int(n) for n in available_numbers)
    except (TypeError, ValueError):
        return False


def evaluate_equation(equation_str: str) -> Optional[Union[int, float]]:
    """The value of an arithmetic expression of numbers, ``+ - * /`` and parentheses, or
    ``None`` when it is anything else (no ``eval``: the expression is parsed)."""
    try:
        value, _ = _evaluate_fraction(equation_str)
    except (EquationError, ZeroDivisionError, ValueError, SyntaxError):
        return None
    if isinstance(value, Fraction) and value.denominator == 1 and "/" not in equation_str:
        return int(value)
    return float(value)
