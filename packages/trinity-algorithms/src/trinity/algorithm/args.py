"""Building blocks of the components' argument declarations (their ``Args`` models).

Each built-in component declares the keys of its config ``*_args`` mapping once, as a class
attribute ``Args`` (a :class:`~trinity.common.config.ComponentArgs` model): validation
(:func:`trinity.algorithm.resolve.check_algorithm_args`), the Studio's forms and the docs read
it. Defaults there are the component's effective defaults (its ``default_args()``, tested to
agree). A plugin component may do the same, or rely on a typed ``__init__`` without
``**kwargs``; see :mod:`trinity.common.config._args`.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from trinity.common.config import ComponentArgs, Field, LossAggMode, model_validator

__all__ = [
    "ComponentArgs",
    "Field",
    "LossAggMode",
    "NonNegFloat",
    "PosFloat",
    "Probability",
    "PosInt",
    "NonNegInt",
    "PolicyLossArgs",
    "ClipRangeArgs",
    "GroupAdvantageArgs",
    "StdLevel",
    "SampleStrategyArgs",
]

NonNegFloat = Annotated[float, Field(ge=0.0)]
PosFloat = Annotated[float, Field(gt=0.0)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]
PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
StdLevel = Literal["group", "batch", "none"]


class PolicyLossArgs(ComponentArgs):
    """What every policy loss accepts: the backend and the loss aggregation."""

    backend: str = Field("verl", description="Training backend; set by the trainer.")
    loss_agg_mode: LossAggMode = Field(
        "token-mean", description="How per-token losses are reduced (see aggregate_loss)."
    )


class ClipRangeArgs(PolicyLossArgs):
    """The ratio clip of PPO-style losses: ``[1 - low, 1 + high]``."""

    clip_range: Optional[NonNegFloat] = Field(
        0.2, description="Symmetric clip epsilon, used for a side not given explicitly."
    )
    clip_range_low: Optional[NonNegFloat] = Field(None, description="Lower clip epsilon.")
    clip_range_high: Optional[NonNegFloat] = Field(
        None, description="Upper clip epsilon (clip-higher: > low)."
    )

    @model_validator(mode="after")
    def _one_range_per_side(self) -> ClipRangeArgs:
        if self.clip_range is None and (
            self.clip_range_low is None or self.clip_range_high is None
        ):
            raise ValueError("set clip_range, or both clip_range_low and clip_range_high")
        return self


class GroupAdvantageArgs(ComponentArgs):
    """Group advantages (one group = the runs of one task)."""

    zero_singletons: bool = Field(
        False, description="Give one-member groups advantage 0 instead of verl's value."
    )


class SampleStrategyArgs(ComponentArgs):
    """What every sample strategy accepts (run settings the trainer also passes)."""

    train_batch_size: Optional[PosInt] = Field(
        None, description="Experiences per train step; set from buffer.train_batch_size."
    )
    batch_size: Optional[PosInt] = Field(None, description="Alias of train_batch_size.")
    experience_buffer_name: str = Field(
        "experience_buffer", description="Which reader is the main one."
    )
