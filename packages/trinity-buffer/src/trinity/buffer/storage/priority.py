"""Replay priority functions of the priority queue (``replay_buffer.priority_fn``).

A priority function maps an experience and how often it was read to ``(priority, keep)``; the
priority queue (:class:`trinity.buffer.storage.queue.PriorityReplayQueue`) reads the highest
priorities first and drops an experience whose function says not to keep it. Also importable
from :mod:`trinity.buffer.storage.queue` (Trinity-RFT's path).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from trinity.utils.registry import Registry

if TYPE_CHECKING:  # the queue actor's FIFO holds payloads and needs no torch
    from trinity.common.experience import Experience

__all__ = [
    "PRIORITY_FN",
    "PRIORITY_FUNC",
    "PriorityFunction",
    "LinearDecayPriority",
    "LinearDecayUseCountControlPriority",
]

#: Registry of replay priority functions (``replay_buffer.priority_fn``).
PRIORITY_FN: Registry[type[PriorityFunction]] = Registry("priority_fn")
#: Trinity-RFT's name of :data:`PRIORITY_FN`.
PRIORITY_FUNC = PRIORITY_FN


# --------------------------------------------------------------------------------------
# Priority functions
# --------------------------------------------------------------------------------------


class PriorityFunction(ABC):
    """Maps an experience and its use count to ``(priority, keep)``.

    ``keep=False`` drops the experience instead of (re)inserting it — how a function limits
    reuse. Constructed with ``replay_buffer.priority_fn_args`` as keyword arguments.
    """

    def __init__(self, **kwargs: Any) -> None:
        return None

    @abstractmethod
    def __call__(self, exp: Experience, use_count: int) -> tuple[float, bool]:
        """Priority of ``exp`` after it has been read ``use_count`` times."""


def _version(exp: Experience) -> float:
    """The model version of ``exp``: ``exp.model_version``, else ``info["model_version"]``
    (where Trinity-RFT code records it), else 0."""
    if exp.model_version is not None:
        return float(exp.model_version)
    value = (exp.info or {}).get("model_version")
    return float(value) if isinstance(value, (int, float)) else 0.0


@PRIORITY_FN.register_module("linear_decay")
class LinearDecayPriority(PriorityFunction):
    """``model_version - decay * use_count``: prefer experiences from newer policies and those
    used less; always kept (reuse is bounded only by the cooldown and eviction)."""

    def __init__(self, decay: float = 2.0, **kwargs: Any) -> None:
        self.decay = float(decay)

    def __call__(self, exp: Experience, use_count: int) -> tuple[float, bool]:
        return _version(exp) - self.decay * use_count, True


@PRIORITY_FN.register_module("decay_limit_randomization")
class LinearDecayUseCountControlPriority(PriorityFunction):
    """Linear decay plus Gaussian noise ``sigma`` (breaks ties at random) and a reuse limit:
    an experience read ``use_count_limit`` times is dropped (``<= 0`` means no limit)."""

    def __init__(
        self, decay: float = 2.0, use_count_limit: int = 3, sigma: float = 0.0, **kwargs: Any
    ) -> None:
        self.decay = float(decay)
        self.use_count_limit = int(use_count_limit)
        self.sigma = float(sigma)

    def __call__(self, exp: Experience, use_count: int) -> tuple[float, bool]:
        priority = _version(exp) - self.decay * use_count
        if self.sigma > 0:
            priority += random.gauss(0.0, self.sigma)
        keep = self.use_count_limit <= 0 or use_count < self.use_count_limit
        return priority, keep
