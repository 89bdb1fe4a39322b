"""OPMD advantage (``"opmd"``): reward minus a group baseline (mean or soft-max).

Online Policy Mirror Descent (Trinity-RFT's algorithm guide uses it as the example of a
:class:`~trinity.algorithm.advantage_fn.GroupAdvantage`): ``A_i = r_i - b_g`` where ``b_g`` is
the group's mean reward, or ``tau * log(mean(exp(r / tau)))`` (``"logavgexp"``), the baseline
of the KL-regularized objective with temperature ``tau``.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from torch import Tensor

from trinity.algorithm.advantage_fn._vectorized import (
    VectorizedGroupAdvantage,
    group_baselines,
)
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.advantage_fn.functional import group_stats, opmd_advantages
from trinity.algorithm.args import Field, GroupAdvantageArgs, PosFloat

__all__ = ["OPMDGroupAdvantage"]


@ADVANTAGE_FN.register_module("opmd")
class OPMDGroupAdvantage(VectorizedGroupAdvantage):
    """OPMD group advantage.

    Args:
        opmd_baseline: ``"mean"`` or ``"logavgexp"``.
        tau: temperature of the ``"logavgexp"`` baseline (> 0).

    Metrics: ``group_baseline`` (mean over groups). A one-member group has baseline 0, as in the
    guide (its advantage is its reward; ``zero_singletons=True`` gives it 0).
    """

    class Args(GroupAdvantageArgs):
        """``advantage_fn_args`` of ``opmd``."""

        opmd_baseline: Literal["mean", "logavgexp"] = Field(
            "mean", description="Group baseline: mean reward or tau * logavgexp(r / tau)."
        )
        tau: PosFloat = Field(1.0, description="Temperature of the logavgexp baseline.")

    algorithm_name = "opmd"

    def __init__(self, opmd_baseline: str = "mean", tau: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if opmd_baseline not in ("mean", "logavgexp"):
            raise ValueError(f"opmd_baseline must be 'mean' or 'logavgexp', got {opmd_baseline!r}")
        self.opmd_baseline = opmd_baseline
        self.tau = float(tau)

    def vector_advantages(
        self, rewards: Tensor, group_index: Tensor, num_groups: int, exps: Optional[list]
    ) -> tuple[Tensor, Optional[Tensor], dict[str, float]]:
        stats = group_stats(rewards, group_index, num_groups)
        adv = opmd_advantages(
            rewards,
            group_index,
            baseline=self.opmd_baseline,
            tau=self.tau,
            zero_singletons=self.zero_singletons,
            stats=stats,
        )
        # every member of a group has the same baseline: average (reward - advantage) per group
        baseline = group_baselines(rewards, adv, group_index, stats.count)
        return adv, None, {"group_baseline": baseline} if num_groups else {}

    @classmethod
    def default_args(cls) -> dict:
        return {"opmd_baseline": "mean", "tau": 1.0}
