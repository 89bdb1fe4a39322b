"""``trinity.data.operators``: the guide's older path of :mod:`trinity.buffer.operators`."""

from trinity.buffer.operators import (
    EXPERIENCE_OPERATORS,
    DataJuicerOperator,
    ExperienceOperator,
    create_operators,
)

__all__ = ["EXPERIENCE_OPERATORS", "DataJuicerOperator", "ExperienceOperator", "create_operators"]
