"""AsymRE advantage (``"asymre"``): reward minus a shifted group mean.

Asymmetric REINFORCE: ``A_i = r_i - (mean_g + baseline_shift)``. A negative shift (default
-0.1) lowers the baseline, so the update leans towards reinforcing good samples over pushing
down bad ones, which stabilizes off-policy training.
"""

from __future__ import annotations

from typing import Any, Optional

from torch import Tensor

from trinity.algorithm.advantage_fn._vectorized import (
    VectorizedGroupAdvantage,
    group_baselines,
)
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.advantage_fn.functional import asymre_advantages, group_stats
from trinity.algorithm.args import Field, GroupAdvantageArgs

__all__ = ["ASYMREGroupAdvantage"]


@ADVANTAGE_FN.register_module("asymre")
class ASYMREGroupAdvantage(VectorizedGroupAdvantage):
    """AsymRE group advantage.

    Args:
        baseline_shift: added to the group mean to form the baseline.

    Metrics: ``group_baseline`` and ``reward_mean`` (means over groups). A constant group gets
    ``-baseline_shift``; a one-member group 0 (Trinity-RFT: the raw reward,
    ``zero_singletons=False``).
    """

    class Args(GroupAdvantageArgs):
        """``advantage_fn_args`` of ``asymre``."""

        baseline_shift: float = Field(-0.1, description="Shift added to the group baseline.")

    algorithm_name = "asymre"

    def __init__(self, baseline_shift: float = -0.1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.baseline_shift = float(baseline_shift)

    def vector_advantages(
        self, rewards: Tensor, group_index: Tensor, num_groups: int, exps: Optional[list]
    ) -> tuple[Tensor, Optional[Tensor], dict[str, float]]:
        stats = group_stats(rewards, group_index, num_groups)
        adv = asymre_advantages(
            rewards,
            group_index,
            baseline_shift=self.baseline_shift,
            zero_singletons=self.zero_singletons,
            stats=stats,
        )
        if not num_groups:
            return adv, None, {}
        baseline = group_baselines(rewards, adv, group_index, stats.count)
        return (
            adv,
            None,
            {"group_baseline": baseline, "reward_mean": stats.mean},
        )

    @classmethod
    def default_args(cls) -> dict:
        return {"baseline_shift": -0.1}
