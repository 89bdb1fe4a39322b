"""Replay priority functions of the priority queue (``replay_buffer.priority_fn``).

The priority queue (:class:`trinity.buffer.storage.priority_queue.PriorityReplayQueue`) ranks
*items*: each item is the list of experiences one write put in (Trinity-RFT 0.6's unit; its
explorer writes one list per explore step). A priority function maps an item to
``(priority, keep)``: the queue reads the highest priorities first, and drops an item whose
function says not to keep it, both when it is written and when it comes back from its reuse
cooldown. The signature is Trinity-RFT 0.6's, so a function written for it (a subclass of
:class:`PriorityFunction` registered in :data:`PRIORITY_FUNC`) works here unchanged.

The experiences of an item share a model version and a use count (the queue counts each read
of an item on every experience of it), so the functions read them from the first one:
:func:`item_model_version` and :func:`item_use_count`. Also importable from
:mod:`trinity.buffer.storage.queue` (Trinity-RFT's path).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from trinity.utils.registry import Registry

if TYPE_CHECKING:  # the queue actor's FIFO holds payloads and needs no torch
    from trinity.common.experience import Experience

__all__ = [
    "PRIORITY_FN",
    "PRIORITY_FUNC",
    "PriorityFunction",
    "LinearDecayPriority",
    "LinearDecayUseCountControlPriority",
    "build_priority_fn",
    "item_model_version",
    "item_use_count",
]

#: Registry of replay priority functions (``replay_buffer.priority_fn``).
PRIORITY_FN: Registry[type[PriorityFunction]] = Registry("priority_fn")
#: Trinity-RFT's name of :data:`PRIORITY_FN`.
PRIORITY_FUNC = PRIORITY_FN


def item_model_version(item: Sequence[Experience]) -> float:
    """The model version of an item: its first experience's ``model_version``, else its
    ``info["model_version"]`` (where Trinity-RFT code records it), else 0."""
    exp = item[0]
    if exp.model_version is not None:
        return float(exp.model_version)
    value = (exp.info or {}).get("model_version")
    return float(value) if isinstance(value, (int, float)) else 0.0


def item_use_count(item: Sequence[Experience]) -> int:
    """How often an item has been read: its first experience's ``info["use_count"]`` (0 when
    unset; the queue raises it on every experience of the item at each read)."""
    value = (item[0].info or {}).get("use_count", 0)
    return int(value) if isinstance(value, (int, float)) else 0


class PriorityFunction(ABC):
    """Maps an item (one write's experiences) to ``(priority, keep)``.

    ``keep=False`` drops the item instead of (re)inserting it — how a function limits reuse.
    Built with :meth:`default_config` updated by ``replay_buffer.priority_fn_args``, as keyword
    arguments (:func:`build_priority_fn`).
    """

    def __init__(self, **kwargs: Any) -> None:
        return None

    @abstractmethod
    def __call__(self, item: list[Experience]) -> tuple[float, bool]:
        """Priority of ``item`` (non-empty; its experiences share model version and use count)
        and whether to keep it."""

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """The arguments used where ``priority_fn_args`` gives none."""
        return {}


def build_priority_fn(name: str, args: Optional[dict[str, Any]] = None) -> PriorityFunction:
    """The registered priority function ``name``, built from its :meth:`default_config`
    updated by ``args``; an unknown name raises ``KeyError`` naming it."""
    cls = PRIORITY_FN[name]
    kwargs = dict(cls.default_config())
    kwargs.update(args or {})
    return cls(**kwargs)


@PRIORITY_FN.register_module("linear_decay")
class LinearDecayPriority(PriorityFunction):
    """``model_version - decay * use_count``: prefer items from newer policies and those used
    less; always kept (reuse is bounded only by the cooldown and eviction)."""

    def __init__(self, decay: float = 2.0, **kwargs: Any) -> None:
        self.decay = float(decay)

    def __call__(self, item: list[Experience]) -> tuple[float, bool]:
        return float(item_model_version(item) - self.decay * item_use_count(item)), True

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"decay": 2.0}


@PRIORITY_FN.register_module("decay_limit_randomization")
class LinearDecayUseCountControlPriority(PriorityFunction):
    """Linear decay plus Gaussian noise ``sigma`` (breaks ties at random) and a reuse limit:
    an item read ``use_count_limit`` times is dropped (``<= 0`` means no limit)."""

    def __init__(
        self, decay: float = 2.0, use_count_limit: int = 3, sigma: float = 0.0, **kwargs: Any
    ) -> None:
        self.decay = float(decay)
        self.use_count_limit = int(use_count_limit)
        self.sigma = float(sigma)

    def __call__(self, item: list[Experience]) -> tuple[float, bool]:
        use_count = item_use_count(item)
        priority = float(item_model_version(item) - self.decay * use_count)
        if self.sigma > 0:
            priority += random.gauss(0.0, self.sigma)
        keep = self.use_count_limit <= 0 or use_count < self.use_count_limit
        return priority, keep

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"decay": 2.0, "use_count_limit": 3, "sigma": 0.0}
