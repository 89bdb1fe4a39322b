"""``math_dapo_reward``: DAPO's math reward (https://arxiv.org/abs/2503.14476).

Two components, as Trinity-RFT's ``MathDAPORewardFn``:

* ``accuracy``: 1.0 when the final answer equals the reference, else 0.0. The answer is read
  after the last ``</think>``: the last ``\\boxed{}`` when there is one, else what math-verify
  finds as the final expression. Compared with math-verify (see :mod:`.math`), not with the
  string normalisation DAPO's reference code uses.
* ``format_score``: DAPO's *soft overlong punishment* when ``enable_overlong_penalty``: 0 up
  to ``max_response_length - cache_length`` response tokens, then falling linearly to
  ``-penalty_factor`` at ``max_response_length``, and ``-penalty_factor`` beyond. It teaches
  the policy to finish before the length limit without a cliff at the limit itself.

The workflow offers the response's token ids as ``response_token`` (every
:class:`~trinity.workflows.single_turn.SimpleWorkflow` does).
"""

from __future__ import annotations

from typing import Annotated, Any, Optional, Sequence

from trinity.common.config import ComponentArgs, Field, model_validator
from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.workflows.rewards.math import extract_boxed, is_equivalent

__all__ = ["MathDAPORewardFn", "overlong_penalty"]


def overlong_penalty(
    response_length: int, max_response_length: int, cache_length: int, penalty_factor: float
) -> float:
    """DAPO's soft overlong punishment of one response (a number in ``[-penalty_factor, 0]``).

    Args:
        response_length: tokens in the response.
        max_response_length: the length at (and past) which the full penalty applies.
        cache_length: the width of the linear ramp before ``max_response_length``.
        penalty_factor: the full penalty's size.
    """
    expected = max_response_length - cache_length
    if response_length <= expected:
        return 0.0
    if response_length > max_response_length:
        return -float(penalty_factor)
    return (expected - response_length) / cache_length * float(penalty_factor)


class _DAPOArgs(ComponentArgs):
    """``reward_fn_args`` of ``math_dapo_reward``."""

    enable_overlong_penalty: Optional[bool] = Field(
        None, description="Add DAPO's soft overlong punishment as format_score."
    )
    penalty_factor: Optional[Annotated[float, Field(ge=0.0)]] = Field(
        None, description="The full overlong penalty (needed with enable_overlong_penalty)."
    )
    max_response_length: Optional[Annotated[int, Field(gt=0)]] = Field(
        None, description="Response tokens at which the full penalty applies."
    )
    cache_length: Optional[Annotated[int, Field(gt=0)]] = Field(
        None, description="Width in tokens of the penalty's ramp before max_response_length."
    )

    @model_validator(mode="after")
    def _penalty_is_complete(self) -> Any:
        if not self.enable_overlong_penalty:
            return self
        missing = [
            name
            for name in ("penalty_factor", "max_response_length", "cache_length")
            if getattr(self, name) is None
        ]
        if missing:
            raise ValueError(
                f"enable_overlong_penalty is true, so {', '.join(missing)} must be set"
            )
        if self.max_response_length <= self.cache_length:  # type: ignore[operator]
            raise ValueError(
                f"max_response_length ({self.max_response_length}) must be greater than "
                f"cache_length ({self.cache_length})"
            )
        return self


@REWARD_FUNCTIONS.register_module("math_dapo_reward")
class MathDAPORewardFn(RewardFn):
    """DAPO's math reward: ``accuracy`` of the final answer and the overlong ``format_score``.

    Args:
        enable_overlong_penalty: add the soft overlong punishment (default off).
        penalty_factor: the full penalty.
        max_response_length: response tokens at which the full penalty applies.
        cache_length: the width of the ramp before ``max_response_length``.

    Raises:
        ValueError: the penalty is on and a setting is missing or out of range (also refused
            by config validation, naming ``reward_fn_args``).
    """

    Args = _DAPOArgs

    def __init__(
        self,
        enable_overlong_penalty: Optional[bool] = None,
        penalty_factor: Optional[float] = None,
        max_response_length: Optional[int] = None,
        cache_length: Optional[int] = None,
    ) -> None:
        args = _DAPOArgs.model_validate(
            {
                "enable_overlong_penalty": enable_overlong_penalty,
                "penalty_factor": penalty_factor,
                "max_response_length": max_response_length,
                "cache_length": cache_length,
            },
            strict=False,
        )
        self.enable_overlong_penalty = bool(args.enable_overlong_penalty)
        self.penalty_factor = args.penalty_factor
        self.max_response_length = args.max_response_length
        self.cache_length = args.cache_length

    def __call__(  # type: ignore[override]
        self,
        response: str,
        truth: Any = None,
        response_token: Optional[Sequence[int]] = None,
        **kwargs: Any,
    ) -> dict[str, float]:
        if truth is None:
            raise ValueError("math_dapo_reward needs the reference answer (format.response_key)")
        answer = (response or "").split("</think>")[-1]
        boxed = extract_boxed(answer)
        if boxed is not None:
            ok = is_equivalent(boxed, truth, bare=True)
        else:
            ok = is_equivalent(answer, truth)
        return {"accuracy": 1.0 if ok else 0.0, "format_score": self._penalty(response_token)}

    def _penalty(self, response_token: Optional[Sequence[int]]) -> float:
        if not self.enable_overlong_penalty:
            return 0.0
        if response_token is None:
            raise ValueError(
                "math_dapo_reward's overlong penalty needs the response's tokens "
                "(response_token=); this workflow does not pass them"
            )
        return overlong_penalty(
            len(response_token),
            self.max_response_length,  # type: ignore[arg-type]
            self.cache_length,  # type: ignore[arg-type]
            self.penalty_factor,  # type: ignore[arg-type]
        )
