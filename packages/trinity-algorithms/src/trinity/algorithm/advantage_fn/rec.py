"""REC advantage (``"rec"``): reward minus the mean of the group's kept members.

The advantage of Trinity-RFT's REC algorithm (paired with the ``rec`` policy loss): a GRPO-like
group baseline whose optional ``drop="balance"`` first discards random below-mean members until
a group has no more of them than at-or-above-mean ones, so an update is not dominated by
pushing probabilities down. See
:func:`~trinity.algorithm.advantage_fn.functional.rec_advantages`.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from torch import Tensor

from trinity.algorithm.advantage_fn._vectorized import VectorizedGroupAdvantage
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.advantage_fn.functional import rec_advantages
from trinity.algorithm.args import Field, GroupAdvantageArgs, PosFloat

__all__ = ["RECGroupedAdvantage"]

_DROPS = (None, "balance")


@ADVANTAGE_FN.register_module("rec")
class RECGroupedAdvantage(VectorizedGroupAdvantage):
    """REC group advantage.

    Args:
        epsilon: added to the std with ``std_normalize``.
        std_normalize: divide by the kept members' population std.
        drop: ``None`` or ``"balance"`` (drop random negatives down to the positives' count).

    Dropped experiences stay in the step with advantage 0 (as Trinity-RFT: they still count in
    token-mean denominators). The random choice uses torch's global generator. Metrics per
    group: ``drop_balance`` (share dropped), ``reward_mean`` / ``reward_std`` (the baseline and
    scale used: 0 / 1 for a one-member group).
    """

    class Args(GroupAdvantageArgs):
        """``advantage_fn_args`` of ``rec``."""

        epsilon: PosFloat = Field(1e-6, description="Added to the std before dividing.")
        std_normalize: Optional[bool] = Field(
            False, description="Divide by the kept members' population std."
        )
        drop: Optional[Literal["balance"]] = Field(
            None, description="null, or balance: drop random negatives down to the positives."
        )

    algorithm_name = "rec"

    def __init__(
        self,
        epsilon: float = 1e-6,
        std_normalize: Optional[bool] = False,
        drop: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if drop not in _DROPS:
            raise ValueError(f"drop must be None or 'balance', got {drop!r}")
        self.epsilon = float(epsilon)
        self.std_normalize = bool(std_normalize)
        self.drop = drop

    def vector_advantages(
        self, rewards: Tensor, group_index: Tensor, num_groups: int, exps: Optional[list]
    ) -> tuple[Tensor, Optional[Tensor], dict[str, Any]]:
        result = rec_advantages(
            rewards,
            group_index,
            epsilon=self.epsilon,
            std_normalize=self.std_normalize,
            drop_balance=self.drop == "balance",
            zero_singletons=self.zero_singletons,
            num_groups=num_groups,
        )
        if not num_groups:
            return result.advantages, None, {}
        metrics = {
            "drop_balance": result.drop_frac,
            "reward_mean": result.mean,
            "reward_std": result.std,
        }
        return result.advantages, None, metrics

    @classmethod
    def default_args(cls) -> dict:
        return {"epsilon": 1e-6, "std_normalize": False, "drop": None}
