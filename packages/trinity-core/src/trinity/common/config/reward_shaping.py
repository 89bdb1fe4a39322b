"""``RewardShapingConfig``: one rule of the ``reward_shaping_mapper`` experience operator.

Trinity-RFT's dataclass, so ``OperatorConfig(name="reward_shaping_mapper", args={
"reward_shaping_configs": [RewardShapingConfig(...), ...]})`` works as in its tests; the
mapper accepts the same rules as plain dicts (what a YAML config gives).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from trinity.common.constants import OpType

__all__ = ["RewardShapingConfig"]


@dataclass
class RewardShapingConfig:
    """``reward = reward <op_type> weight * exp.info[stats_key]``.

    Args:
        stats_key: key of ``Experience.info`` holding the statistic.
        op_type: :class:`~trinity.common.constants.OpType` or its name
            (``ADD``/``SUB``/``MUL``/``DIV``, case-insensitive).
        weight: factor applied to the statistic.

    Raises:
        ValueError: ``op_type`` is not one of the four names.
    """

    stats_key: str = ""
    op_type: Union[OpType, str] = OpType.ADD
    weight: float = 1.0

    def __post_init__(self) -> None:
        name = self.op_type.value if isinstance(self.op_type, OpType) else str(self.op_type)
        try:
            self.op_type = OpType(name.upper())
        except ValueError:
            raise ValueError(
                f"RewardShapingConfig.op_type is {self.op_type!r}; expected one of "
                f"{[op.value for op in OpType]}"
            ) from None
        self.weight = float(self.weight)
