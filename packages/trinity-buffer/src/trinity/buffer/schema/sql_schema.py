"""Row model of the SQL experience storage (Trinity-RFT's ``ExperienceModel``).

Our SQL storage keeps each experience as its safetensors/JSON serialization plus a few
queryable columns (see :class:`trinity.buffer.storage.sql_table.SQLStorage`). This model is that
row in Python: :meth:`ExperienceModel.from_experience` / :meth:`~ExperienceModel.to_experience`
convert losslessly, which is what code written for Trinity-RFT uses it for. It is not an ORM
class: Trinity-RFT's per-field columns (``prompt``, ``response``, ...) are not stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from trinity.common.experience import Experience
from trinity.utils.registry import Registry

__all__ = ["SQL_SCHEMA", "ExperienceModel"]

#: SQL row models by schema name (``experience``).
SQL_SCHEMA: Registry[type] = Registry("sql_schema")


@SQL_SCHEMA.register_module("experience")
@dataclass
class ExperienceModel:
    """One row of an experience table.

    Attributes:
        exp_bytes: :meth:`Experience.serialize` output (the whole experience).
        eid: ``Experience.eid.uid``.
        model_version: version of the policy that generated it (``None`` if unknown).
        reward: the scalar reward (``None`` if unset).
        id: the row id once stored (``None`` before).
    """

    exp_bytes: bytes
    eid: str = ""
    model_version: Optional[int] = None
    reward: Optional[float] = None
    id: Optional[int] = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_experience(cls, experience: Experience) -> ExperienceModel:
        """The row that stores ``experience``."""
        return cls(
            exp_bytes=experience.serialize(),
            eid=experience.eid.uid,
            model_version=experience.model_version,
            reward=experience.reward,
        )

    def to_experience(self) -> Experience:
        """The stored experience (a new object, equal field by field)."""
        return Experience.deserialize(self.exp_bytes)

    def to_row(self) -> dict[str, Any]:
        """Column values as :class:`~trinity.buffer.storage.sql_table.SQLStorage` inserts them."""
        return {
            "exp_bytes": self.exp_bytes,
            "eid": self.eid,
            "model_version": self.model_version,
            "reward": self.reward,
        }
