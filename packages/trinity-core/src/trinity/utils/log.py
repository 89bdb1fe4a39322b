"""Logging for all Trinity packages: one ``trinity`` logger tree, configured once."""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["get_logger", "set_level"]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_configured = False


def _configure_root() -> None:
    global _configured
    if _configured:
        return
    root = logging.getLogger("trinity")
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
        root.addHandler(handler)
    root.setLevel(os.environ.get("TRINITY_LOG_LEVEL", "INFO").upper())
    _configured = True


def get_logger(name: str) -> logging.Logger:
    """Return a logger under the ``trinity`` tree (level from ``TRINITY_LOG_LEVEL``)."""
    _configure_root()
    if not name.startswith("trinity"):
        name = f"trinity.{name}"
    return logging.getLogger(name)


def set_level(level: int | str) -> None:
    """Set the level of every Trinity logger."""
    _configure_root()
    logging.getLogger("trinity").setLevel(level.upper() if isinstance(level, str) else level)
