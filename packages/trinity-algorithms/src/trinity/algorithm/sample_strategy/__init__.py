"""Sample strategies (``SAMPLE_STRATEGY``): how the trainer draws each batch from its buffers."""

# The package is its module: the names (and ``__all__``) are those of ``sample_strategy.py``, stated once.
from trinity.algorithm.sample_strategy import sample_strategy as _module
from trinity.algorithm.sample_strategy.sample_strategy import *  # noqa: F403

__all__ = list(_module.__all__)
