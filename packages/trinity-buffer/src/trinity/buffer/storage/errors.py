"""Errors raised by experience storages: defined in :mod:`trinity.buffer.errors` (beside
:mod:`trinity.buffer.base`, which raises them too) and re-exported here, their documented path."""

from trinity.buffer.errors import *  # noqa: F403  (the names of its __all__, imported next)
from trinity.buffer.errors import __all__  # noqa: F401  (one list: the two cannot drift)
