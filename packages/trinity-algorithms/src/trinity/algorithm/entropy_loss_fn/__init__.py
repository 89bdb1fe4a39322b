"""Entropy losses (``ENTROPY_LOSS_FN``): ``default``, ``mix``, ``none``."""

from trinity.algorithm.entropy_loss_fn.entropy_loss_fn import (
    ENTROPY_LOSS_FN,
    DefaultEntropyLossFn,
    DummyEntropyLossFn,
    EntropyLossFn,
    MixEntropyLossFn,
    entropy_from_logits,
)

__all__ = [
    "ENTROPY_LOSS_FN",
    "DefaultEntropyLossFn",
    "DummyEntropyLossFn",
    "EntropyLossFn",
    "MixEntropyLossFn",
    "entropy_from_logits",
]
