"""Trainer-side GRPO / OPMD / AsymRE: ``grpo_verl``, ``opmd_verl``, ``asymre_verl``.

Trinity-RFT 0.6 keeps, next to its grouped advantages, their older form computed in the trainer
on the collated batch (verl's ``DataProto``, grouped by ``uid``), deprecated there but still
registered and still named by configs. Here each is the grouped class with
``compute_in_trainer() -> True`` and only the arguments Trinity-RFT's trainer-side version
takes: the math is the grouped advantage's (one implementation), applied to the batch's
outcome scores (``token_level_rewards.sum(-1)``, or ``rewards``) grouped by task. Called with a
list of experiences, they behave as the grouped class.

Differences from Trinity-RFT's trainer-side code, all at the edges: a constant group gets
exactly 0 (not ``0 / (0 + epsilon)``'s float residue), and the metrics are the grouped class's
(Trinity-RFT's trainer-side versions report none).
"""

from __future__ import annotations

from typing import Any, Literal

from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.advantage_fn.asymre import ASYMREGroupAdvantage
from trinity.algorithm.advantage_fn.grpo import GRPOGroupedAdvantage
from trinity.algorithm.advantage_fn.opmd import OPMDGroupAdvantage
from trinity.algorithm.args import Field, GroupAdvantageArgs, PosFloat

__all__ = ["ASYMREAdvantageFn", "GRPOAdvantageFn", "OPMDAdvantageFn"]


@ADVANTAGE_FN.register_module("grpo_verl")
class GRPOAdvantageFn(GRPOGroupedAdvantage):
    """GRPO in the trainer: ``(r - mean_g) / (std_g + epsilon)``; a one-member group scores
    ``r / (1 + epsilon)`` (mean 0, std 1). See :class:`GRPOGroupedAdvantage`.

    Args:
        epsilon: added to the std.
    """

    class Args(GroupAdvantageArgs):
        """``advantage_fn_args`` of ``grpo_verl``."""

        epsilon: PosFloat = Field(1e-6, description="Added to the std before dividing.")

    algorithm_name = "grpo_verl"

    def __init__(self, epsilon: float = 1e-6, **kwargs: Any) -> None:
        super().__init__(epsilon=epsilon, **kwargs)

    @classmethod
    def compute_in_trainer(cls) -> bool:
        return True

    @classmethod
    def default_args(cls) -> dict:
        return {"epsilon": 1e-6}


@ADVANTAGE_FN.register_module("opmd_verl")
class OPMDAdvantageFn(OPMDGroupAdvantage):
    """OPMD in the trainer: ``r - b_g`` (group mean or ``tau * logavgexp(r / tau)``); a
    one-member group has baseline 0. See :class:`OPMDGroupAdvantage`.

    Args:
        opmd_baseline: ``"mean"`` or ``"logavgexp"``.
        tau: temperature of the ``"logavgexp"`` baseline (> 0).
    """

    class Args(GroupAdvantageArgs):
        """``advantage_fn_args`` of ``opmd_verl``."""

        opmd_baseline: Literal["mean", "logavgexp"] = Field(
            "mean", description="Group baseline: mean reward or tau * logavgexp(r / tau)."
        )
        tau: PosFloat = Field(1.0, description="Temperature of the logavgexp baseline.")

    algorithm_name = "opmd_verl"

    def __init__(self, opmd_baseline: str = "mean", tau: float = 1.0, **kwargs: Any) -> None:
        if not tau > 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        super().__init__(opmd_baseline=opmd_baseline, tau=tau, **kwargs)

    @classmethod
    def compute_in_trainer(cls) -> bool:
        return True


@ADVANTAGE_FN.register_module("asymre_verl")
class ASYMREAdvantageFn(ASYMREGroupAdvantage):
    """AsymRE in the trainer: ``r - (mean_g + baseline_shift)``; a one-member group has
    baseline 0. See :class:`ASYMREGroupAdvantage`.

    Args:
        baseline_shift: added to the group mean to form the baseline.
    """

    class Args(GroupAdvantageArgs):
        """``advantage_fn_args`` of ``asymre_verl``."""

        baseline_shift: float = Field(-0.1, description="Shift added to the group baseline.")

    algorithm_name = "asymre_verl"

    def __init__(self, baseline_shift: float = -0.1, **kwargs: Any) -> None:
        super().__init__(baseline_shift=baseline_shift, **kwargs)

    @classmethod
    def compute_in_trainer(cls) -> bool:
        return True
