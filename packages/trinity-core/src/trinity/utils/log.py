"""Logging for all Trinity packages: one ``trinity`` logger tree, configured once.

The ``trinity`` logger's own handler writes to whatever ``sys.stderr`` is when a record is
emitted (not the stream at import), so a launcher that points ``sys.stderr`` at the run's log
file for the length of a run (see ``trinity.launcher.logs``) sends Trinity's records there too.

:class:`DedupFilter` keeps a console readable: a warning whose message template was already
shown is dropped and counted (a warning on every step shows once; the count is reported at the
end of the run). :func:`setup_worker_process` is the ``worker_process_setup_hook`` of every Ray
worker of a run: each distinct Python warning is shown once per process.
"""

from __future__ import annotations

import contextvars
import logging
import os
import sys
import threading
import warnings
from logging.handlers import RotatingFileHandler
from typing import Any, Optional

from trinity.common.constants import LOG_DIR_ENV_VAR, LOG_LEVEL_ENV_VAR, LOG_NODE_IP_ENV_VAR

__all__ = [
    "DedupFilter",
    "StderrHandler",
    "get_logger",
    "set_level",
    "setup_worker_process",
    "show_warnings_once",
]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_DATE_FORMAT = "%H:%M:%S"
_configured = False


class StderrHandler(logging.StreamHandler):
    """A stream handler on the current ``sys.stderr`` (looked up at each record)."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # logging.StreamHandler.__init__ assigns it
        pass


class DedupFilter(logging.Filter):
    """Drops a warning whose message template was already let through, and counts it.

    A record's key is its logger name, level and *unformatted* message (``record.msg``), so
    ``logger.warning("slow step %d", step)`` shows once however many steps are slow; Python
    warnings routed through logging (``py.warnings``, whose template is always ``"%s"``) key on
    their text instead. Records below ``min_level`` (INFO progress) and from ``max_level`` up
    (errors) always pass. Attach it to a console handler, not to a log file's: the file keeps
    every line, the console shows each distinct warning once.

    Args:
        min_level: the lowest level that is de-duplicated (WARNING).
        max_level: the level from which records always pass (ERROR).
    """

    def __init__(self, min_level: int = logging.WARNING, max_level: int = logging.ERROR) -> None:
        super().__init__()
        self.min_level = min_level
        self.max_level = max_level
        self._lock = threading.Lock()
        #: key -> (first message as shown, times it was dropped)
        self._seen: dict[tuple[str, int, str], list[Any]] = {}

    @staticmethod
    def _key(record: logging.LogRecord) -> tuple[str, int, str]:
        template = str(record.msg)
        if record.name == "py.warnings" or template == "%s":
            template = record.getMessage()
        return (record.name, record.levelno, template)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.min_level <= record.levelno < self.max_level:
            return True
        key = self._key(record)
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                self._seen[key] = [record.getMessage(), 0]
                return True
            seen[1] += 1
            return False

    def suppressed(self) -> list[tuple[str, int]]:
        """``(first message, times dropped)`` of every warning that repeated, most first."""
        with self._lock:
            rows = [(msg, count) for msg, count in self._seen.values() if count]
        return sorted(rows, key=lambda row: -row[1])

    def reset(self) -> None:
        with self._lock:
            self._seen.clear()


def _level_from_env() -> str:
    return os.environ.get(LOG_LEVEL_ENV_VAR, "INFO").upper() or "INFO"


def _configure_root() -> None:
    global _configured
    if _configured:
        return
    root = logging.getLogger("trinity")
    if not root.handlers:
        handler = StderrHandler()
        handler.setFormatter(logging.Formatter(_FORMAT, datefmt=_DATE_FORMAT))
        root.addHandler(handler)
    root.setLevel(_level_from_env())
    _configured = True


#: the logger of this process's Ray actor, once code in it asked for one (``in_ray_actor``),
#: and of the current context (an async actor's tasks); Trinity-RFT's names, which its tests
#: reset (``_ray_logger_ctx.set(None)``, ``_ray_logger = None``) between cases
_ray_logger: Optional[logging.Logger] = None
_ray_logger_ctx: contextvars.ContextVar[Optional[logging.Logger]] = contextvars.ContextVar(
    "ray_logger", default=None
)
_FILE_FORMAT = "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"


def get_logger(
    name: Optional[str] = None, level: Optional[int | str] = None, in_ray_actor: bool = False
) -> logging.Logger:
    """Return a logger under the ``trinity`` tree (level from ``TRINITY_LOG_LEVEL``).

    Trinity-RFT 0.6's arguments: ``level`` sets this logger's level; ``in_ray_actor=True``,
    called inside a Ray actor, makes it the actor's logger: with ``TRINITY_LOG_DIR`` set it
    also writes to ``<that directory>/<name>.log`` (under a directory per node IP with
    ``TRINITY_LOG_NODE_IP`` set), and every later ``get_logger`` call in the actor's process
    returns it, so the modules the actor uses log into its file. Outside an actor
    ``in_ray_actor`` has no effect.
    """
    actor_logger = _ray_logger_ctx.get() or _ray_logger
    if actor_logger is not None:
        return actor_logger
    _configure_root()
    full = "trinity" if not name else name if name.startswith("trinity") else f"trinity.{name}"
    logger = logging.getLogger(full)
    if level is not None:
        logger.setLevel(level.upper() if isinstance(level, str) else level)
    if in_ray_actor and name and _in_ray_actor():
        _become_actor_logger(logger, name, level)
    return logger


def _in_ray_actor() -> bool:
    try:
        import ray
    except ImportError:  # pragma: no cover - ray ships with every run's environment
        return False
    try:
        return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
    except Exception:  # noqa: BLE001 - no runtime context: not an actor
        return False


def _become_actor_logger(logger: logging.Logger, name: str, level: Optional[int | str]) -> None:
    global _ray_logger
    if level is None:
        logger.setLevel(_level_from_env())
    log_dir = os.environ.get(LOG_DIR_ENV_VAR)
    if log_dir:
        if os.environ.get(LOG_NODE_IP_ENV_VAR, "0") != "0":
            import ray

            log_dir = os.path.join(log_dir, ray.util.get_node_ip_address())
        os.makedirs(log_dir, exist_ok=True)
        handler = RotatingFileHandler(
            os.path.join(log_dir, f"{name}.log"), maxBytes=64 << 20, encoding="utf-8"
        )
        handler.setFormatter(logging.Formatter(_FILE_FORMAT, datefmt=_DATE_FORMAT))
        logger.addHandler(handler)
    _ray_logger = logger
    _ray_logger_ctx.set(logger)


def set_level(level: int | str) -> None:
    """Set the level of every Trinity logger."""
    _configure_root()
    logging.getLogger("trinity").setLevel(level.upper() if isinstance(level, str) else level)


def show_warnings_once() -> None:
    """Show each distinct Python warning once in this process (the ``"once"`` action).

    Appended after the filters already installed, so what they decide stands (Python's defaults
    keep ignoring ``DeprecationWarning`` outside ``__main__``); every other warning shows the
    first time its text is seen instead of once per code location -- a warning raised on each
    step from several lines shows once.
    """
    warnings.filterwarnings("once", append=True)


def setup_worker_process() -> None:
    """``worker_process_setup_hook`` of a run's Ray workers (engines, runners, trainer ranks).

    Runs in each worker process before its actor is built: configures the ``trinity`` logger
    (level from ``TRINITY_LOG_LEVEL``, which the run's ``runtime_env`` sets) and shows each
    distinct Python warning once. Worker output goes where Ray sends it: to the driver, which
    writes it to the run's log file (or the console with ``--verbose``). Automatic full garbage
    collections pause while the actor imports and builds, until it freezes its start-up heap
    (:func:`trinity.utils.gc_heap.pause_collection_during_startup`).
    """
    from trinity.utils.gc_heap import pause_collection_during_startup

    pause_collection_during_startup()
    _configure_root()
    show_warnings_once()
