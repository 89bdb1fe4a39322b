"""Batch-key names of training backends and their Trinity names (Trinity-RFT's ``key_mapper``).

verl names the policy-loss inputs ``log_prob``, ``old_log_probs``, ``ref_log_prob`` and
``response_mask``; Trinity's losses name them ``logprob``, ``old_logprob``, ``ref_logprob`` and
``action_mask``. Code written for Trinity-RFT calls a loss with verl's names
(``loss_fn(log_prob=..., **data.batch)``), so :class:`~trinity.algorithm.PolicyLossFn` renames
keyword arguments through the mapper of its ``backend`` before the loss sees them.
"""

from __future__ import annotations

__all__ = ["ALL_MAPPERS", "KeyMapper"]


class KeyMapper:
    """Two-way rename between a backend's batch keys and Trinity's.

    Args:
        to_trinity_map: backend key -> Trinity key; keys not in it keep their name.
    """

    def __init__(self, to_trinity_map: dict[str, str]) -> None:
        self.to_trinity_map = dict(to_trinity_map)
        self.from_trinity_map = {v: k for k, v in self.to_trinity_map.items()}

    def to_trinity(self, key: str) -> str:
        """The Trinity name of a backend key."""
        return self.to_trinity_map.get(key, key)

    def from_trinity(self, key: str) -> str:
        """The backend name of a Trinity key."""
        return self.from_trinity_map.get(key, key)


#: Mapper per ``backend`` (the policy loss's ``backend`` argument).
ALL_MAPPERS: dict[str, KeyMapper] = {
    "verl": KeyMapper(
        {
            "log_prob": "logprob",
            "old_log_probs": "old_logprob",
            "ref_log_prob": "ref_logprob",
            "response_mask": "action_mask",
            "advantages": "advantages",
        }
    ),
}
