"""The launcher's error for bad input found before a run starts anything."""

from __future__ import annotations

__all__ = ["LaunchInputError"]


class LaunchInputError(ValueError):
    """The run's input cannot work (found before anything was started); the command line
    reports it as bad input (exit status 2), without a traceback."""
