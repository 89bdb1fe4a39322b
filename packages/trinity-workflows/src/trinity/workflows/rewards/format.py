"""Format reward: does the response follow the required layout (a regular expression)?"""

from __future__ import annotations

import re
from typing import Any

from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn

__all__ = ["THINK_ANSWER_PATTERN", "FormatReward"]

#: ``<think> … </think>`` followed by ``<answer> … </answer>`` and nothing after it.
THINK_ANSWER_PATTERN = r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$"


@REWARD_FUNCTIONS.register_module("format_reward")
class FormatReward(RewardFn):
    """``{"format_score": +score}`` when the whole response matches ``pattern``, else ``-score``.

    The penalty is symmetric with the bonus, as in DeepSeek-R1-style training, so a model that
    drops the required tags is pushed back rather than merely not rewarded.

    Args:
        pattern: a regular expression matched against the whole response (DOTALL).
        score: size of the bonus / penalty (default 0.1).
    """

    def __init__(self, pattern: str = THINK_ANSWER_PATTERN, score: float = 0.1) -> None:
        try:
            self.pattern = re.compile(pattern, re.DOTALL)
        except re.error as exc:
            raise ValueError(f"format_reward: invalid pattern {pattern!r}: {exc}") from exc
        self.score = float(score)

    def __call__(self, response: str, **kwargs: Any) -> dict[str, float]:  # type: ignore[override]
        matched = self.pattern.fullmatch(response or "") is not None
        return {"format_score": self.score if matched else -self.score}
