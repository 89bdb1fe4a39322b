"""Entropy losses (``ENTROPY_LOSS_FN``): ``default``, ``mix``, ``none``."""

# The package is its module: the names (and ``__all__``) are those of ``entropy_loss_fn.py``, stated once.
from trinity.algorithm.entropy_loss_fn import entropy_loss_fn as _module
from trinity.algorithm.entropy_loss_fn.entropy_loss_fn import *  # noqa: F403

__all__ = list(_module.__all__)
