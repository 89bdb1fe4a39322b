"""``rlcr_reward``: RLCR's calibration reward for math answers that state their own confidence.

RLCR (reinforcement learning with calibration rewards; "Beyond Binary Rewards: Training LMs to
Reason About Their Uncertainty", Damani et al., 2025) asks the policy to end every response with
an estimate ``q`` of the probability that its answer is right, and rewards an honest ``q`` with
the Brier score. The response must end with this tag chain (case-sensitive)::

    <think>…</think><answer>…</answer><analysis>…</analysis><confidence>q</confidence>

with only whitespace between the four blocks and after the last one, ``q`` a finite number in
``[0, 1]``. Earlier text may hold the same tags (a draft, then a revision) as long as every tag
is closed before the next one opens; the last chain counts.

Five components, each already multiplied by its weight (``weights``; the workflow sums them):

==========================  =============================================================  =======
component                   unweighted value                                               weight
==========================  =============================================================  =======
``format``                  1 when the terminal chain is well formed, else 0               0.5
``accuracy``                1 when the chain's answer equals the reference, else 0         0.5
``brier``                   ``1 - (accuracy - q)^2`` for a well-formed chain, else 0        0.5
``mean_confidence``         ``q`` of the last closed ``<confidence>`` block, else 0         1e-5
``confidence_one_or_zero``  1 when that ``q`` is below 0.01 or above 0.99, else 0           1e-5
==========================  =============================================================  =======

The two small components are monitoring signals (how confident, how often at the extremes) and
are read from the last closed ``<confidence>`` block even when the chain is malformed, as long
as that block holds only a valid number. An invalid ``q`` in the chain makes the chain
malformed, so every component is 0. When the answer cannot be checked (no reference, or the
parser or verifier raises or times out) ``accuracy`` and ``brier`` are 0: an infrastructure
failure is no evidence that the answer is wrong, so it must not pay a low ``q`` for being
"calibrated".

The answer is checked as ``verifier(answer_parser(answer), answer_parser(str(truth)))``; the
defaults parse both with math-verify and compare them with a bounded math-verify ``verify``
(:func:`~trinity.workflows.rewards.eval_utils.simple_answer_parser`,
:func:`~trinity.workflows.rewards.eval_utils.verify_with_timeout`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Optional

from pydantic import field_validator

from trinity.common.config import ComponentArgs, Field
from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.workflows.rewards import eval_utils

__all__ = [
    "COMPONENTS",
    "DEFAULT_WEIGHTS",
    "RLCRRewardFn",
    "check_weights",
    "last_confidence",
    "parse_terminal_chain",
]

#: the reward's components, in the order they are returned
COMPONENTS = ("format", "accuracy", "brier", "mean_confidence", "confidence_one_or_zero")
#: the weights used when ``weights`` is not given (those of Trinity-RFT's ``rlcr_reward``)
DEFAULT_WEIGHTS: dict[str, float] = {
    "format": 0.5,
    "accuracy": 0.5,
    "brier": 0.5,
    "mean_confidence": 1e-5,
    "confidence_one_or_zero": 1e-5,
}
#: ``confidence_one_or_zero`` counts a ``q`` strictly below ``LOW`` or strictly above ``HIGH``
LOW, HIGH = 0.01, 0.99

_BLOCKS = ("think", "answer", "analysis", "confidence")
_TAG = re.compile(r"<(/?)(think|answer|analysis|confidence)>")
_OPEN_Q, _CLOSE_Q = "<confidence>", "</confidence>"


class _NamedDefault:
    """A default callable that shows as its name (docs and errors stay free of addresses)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(eval_utils, self.name)(*args, **kwargs)

    def __repr__(self) -> str:
        return self.name


_DEFAULT_PARSER = _NamedDefault("simple_answer_parser")
_DEFAULT_VERIFIER = _NamedDefault("verify_with_timeout")


# ---------------------------------------------------------------------- parsing
def _confidence_value(text: str) -> Optional[float]:
    """``text`` (a ``<confidence>`` payload) as a finite number in [0, 1], else ``None``."""
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except (ValueError, OverflowError):
        return None
    if math.isfinite(value) and 0.0 <= value <= 1.0:
        return value
    return None


def last_confidence(response: Any) -> Optional[float]:
    """``q`` of the response's last closed ``<confidence>`` block, whatever the rest looks like.

    ``None`` when there is no such block, when a ``<confidence>`` opens after the last
    ``</confidence>`` (a truncated block makes the earlier one stale), when the block holds
    another reserved tag, or when its payload is not a number in [0, 1].
    """
    if not isinstance(response, str):
        return None
    start, end = response.rfind(_OPEN_Q), response.rfind(_CLOSE_Q)
    if start < 0 or end < start:
        return None
    payload = response[start + len(_OPEN_Q) : end]
    if _TAG.search(payload):
        return None
    return _confidence_value(payload)


def parse_terminal_chain(response: Any) -> Optional[tuple[str, float]]:
    """``(answer, q)`` of a response that ends with a well-formed RLCR tag chain, else ``None``.

    Well formed: reserved tags (``think``, ``answer``, ``analysis``, ``confidence``, exact
    lowercase spelling) never nest, every one that opens is closed by the same name, the last
    eight are the chain in order, only whitespace separates its blocks and follows it, and its
    ``q`` is a finite number in [0, 1]. The answer is returned as written (not stripped).
    """
    if not isinstance(response, str):
        return None
    tags = list(_TAG.finditer(response))
    inside: Optional[str] = None
    for tag in tags:
        closing, name = tag.group(1) == "/", tag.group(2)
        if closing:
            if inside != name:
                return None
            inside = None
        elif inside is not None:
            return None
        else:
            inside = name
    if inside is not None or len(tags) < 2 * len(_BLOCKS):
        return None
    chain = tags[-2 * len(_BLOCKS) :]
    for index, name in enumerate(_BLOCKS):
        opening, closing = chain[2 * index], chain[2 * index + 1]
        if opening.group(1) or opening.group(2) != name or not closing.group(1):
            return None
        if index and response[chain[2 * index - 1].end() : opening.start()].strip():
            return None  # text between two blocks of the chain
    if response[chain[-1].end() :].strip():
        return None  # text after </confidence>
    q = _confidence_value(response[chain[6].end() : chain[7].start()])
    if q is None:
        return None
    return response[chain[2].end() : chain[3].start()], q


# ---------------------------------------------------------------------- arguments
def _allowed() -> str:
    return ", ".join(COMPONENTS)


def check_weights(weights: Any) -> dict[str, float]:
    """``weights`` as a complete ``{component: float}``; the defaults for ``None``.

    Raises:
        TypeError: ``weights`` is not a mapping, or a weight is not a number (a bool is not).
        ValueError: a component is missing or unknown, or a weight is NaN or infinite.
    """
    if weights is None:
        return dict(DEFAULT_WEIGHTS)
    if not isinstance(weights, Mapping):
        raise TypeError(
            f"rlcr_reward: weights must be a mapping of component name to number, got "
            f"{type(weights).__name__} {weights!r}; components: {_allowed()}"
        )
    missing = [name for name in COMPONENTS if name not in weights]
    unknown = sorted(str(name) for name in weights if name not in COMPONENTS)
    if missing or unknown:
        problems = []
        if missing:
            problems.append(f"missing keys {missing}")
        if unknown:
            problems.append(f"unknown keys {unknown}")
        raise ValueError(
            f"rlcr_reward: weights {dict(weights)!r} has {' and '.join(problems)}; it needs "
            f"exactly one weight for each of {_allowed()}"
        )
    checked: dict[str, float] = {}
    for name in COMPONENTS:
        value = weights[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(
                f"rlcr_reward: weights[{name!r}] is {value!r} ({type(value).__name__}); it must "
                "be numeric (an int or a float, not a bool or a string)"
            )
        if not math.isfinite(value):
            raise ValueError(
                f"rlcr_reward: weights[{name!r}] is {value!r}; it must be a finite number"
            )
        checked[name] = float(value)
    return checked


def _check_callable(name: str, value: Any, called_as: str) -> Any:
    if not callable(value):
        raise TypeError(
            f"rlcr_reward: {name} must be callable ({called_as}), got "
            f"{type(value).__name__} {value!r}"
        )
    return value


_PARSER_CALL = "answer_parser(text) -> parsed answer"
_VERIFIER_CALL = "verifier(parsed_answer, parsed_truth) -> bool"


class _RLCRArgs(ComponentArgs):
    """``reward_fn_args`` of ``rlcr_reward``."""

    weights: Optional[dict[str, float]] = Field(
        None,
        description=(
            "Weight of each component, all five named: format, accuracy, brier, "
            "mean_confidence, confidence_one_or_zero (default 0.5, 0.5, 0.5, 1e-5, 1e-5)."
        ),
    )
    answer_parser: Callable[..., Any] = Field(
        _DEFAULT_PARSER,
        description="Parses the answer block's text and the reference (a Python callable).",
    )
    verifier: Callable[..., Any] = Field(
        _DEFAULT_VERIFIER,
        description="Compares the parsed answer with the parsed reference (a Python callable).",
    )

    @field_validator("weights", mode="before")
    @classmethod
    def _weights(cls, value: Any) -> Any:
        try:
            return check_weights(value)
        except TypeError as exc:  # pydantic reports ValueErrors raised here, located at the key
            raise ValueError(str(exc)) from None

    @field_validator("answer_parser", "verifier", mode="before")
    @classmethod
    def _callables(cls, value: Any, info: Any) -> Any:
        called_as = _PARSER_CALL if info.field_name == "answer_parser" else _VERIFIER_CALL
        try:
            return _check_callable(info.field_name, value, called_as)
        except TypeError as exc:
            raise ValueError(str(exc)) from None


# ---------------------------------------------------------------------- the reward
@REWARD_FUNCTIONS.register_module("rlcr_reward")
class RLCRRewardFn(RewardFn):
    """RLCR's five weighted components: format, accuracy, Brier calibration and two monitors.

    Args:
        weights: ``{component: weight}`` naming all five components (``format``,
            ``accuracy``, ``brier``, ``mean_confidence``, ``confidence_one_or_zero``); default
            :data:`DEFAULT_WEIGHTS`. Any finite numbers (a component can be switched off with 0).
        answer_parser: ``fn(text)`` parsing the chain's ``<answer>`` payload and the reference
            alike (default: math-verify's parse, bounded).
        verifier: ``fn(parsed_answer, parsed_truth) -> bool`` (default: math-verify's
            ``verify``, bounded).

    Raises:
        TypeError: ``answer_parser`` or ``verifier`` is not callable, ``weights`` is not a
            mapping or holds a non-number.
        ValueError: ``weights`` misses or adds a component, or holds NaN / infinity.
    """

    Args = _RLCRArgs

    def __init__(
        self,
        weights: Optional[Mapping[str, Any]] = None,
        answer_parser: Callable[..., Any] = _DEFAULT_PARSER,
        verifier: Callable[..., Any] = _DEFAULT_VERIFIER,
    ) -> None:
        self.answer_parser = _check_callable("answer_parser", answer_parser, _PARSER_CALL)
        self.verifier = _check_callable("verifier", verifier, _VERIFIER_CALL)
        self.weights = check_weights(weights)

    def __call__(  # type: ignore[override]
        self,
        response: str,
        prompt: Optional[str] = None,
        truth: Any = None,
        **kwargs: Any,
    ) -> dict[str, float]:
        q_seen = last_confidence(response)
        chain = parse_terminal_chain(response)
        format_ok = chain is not None
        accuracy = brier = 0.0
        if chain is not None:
            answer, q = chain
            accuracy, brier = self._score(answer, q, truth)
        values = {
            "format": 1.0 if format_ok else 0.0,
            "accuracy": accuracy,
            "brier": brier,
            "mean_confidence": q_seen if q_seen is not None else 0.0,
            "confidence_one_or_zero": (
                1.0 if q_seen is not None and (q_seen < LOW or q_seen > HIGH) else 0.0
            ),
        }
        return {name: float(self.weights[name] * values[name]) for name in COMPONENTS}

    def _score(self, answer: str, q: float, truth: Any) -> tuple[float, float]:
        """``(accuracy, brier)`` unweighted; ``(0, 0)`` when the answer cannot be checked."""
        if truth is None:
            return 0.0, 0.0
        try:
            parsed_answer = self.answer_parser(answer)
            parsed_truth = self.answer_parser(str(truth))
            correct = 1.0 if self.verifier(parsed_answer, parsed_truth) else 0.0
        except Exception:  # noqa: BLE001 - a failed check is not a wrong answer
            return 0.0, 0.0
        return correct, 1.0 - (correct - q) ** 2
