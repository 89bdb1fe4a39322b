"""Where a run's output goes: our progress on the console, everything else in the run's log.

A run started from the command line is wrapped in a :class:`ConsoleSession`:

* **default** -- file descriptors 1 and 2 of the driver (and ``sys.stdout`` / ``sys.stderr``)
  point at ``<checkpoint_job_dir>/log/run.log`` for the length of the run. Everything that is
  not Trinity's own output lands there: vLLM, Ray (Ray forwards each worker's output to the
  driver, ``(VLLMEngine pid=...)``-prefixed, so engine actors, workflow runners, trainer ranks
  and their subprocesses all end up in that one file, in time order), verl's and transformers'
  prints and progress bars, C-level warnings. The console keeps Trinity's output, written to
  the saved original descriptors: the config summary, the progress bar or summary lines
  (:mod:`trinity.launcher.progress`), Trinity's warnings and errors, each distinct warning
  once (:class:`~trinity.utils.log.DedupFilter`; how often each repeated is printed at the
  end), and the final line.
* ``--verbose`` -- nothing is redirected: engine and worker output is on the console as it
  would be without Trinity; Trinity's records still go to ``run.log`` as well.
* ``--log-level LEVEL`` -- the lowest level of Trinity's records on the console (default
  ``INFO``: the driver's few lines of its own, such as a resumed run's starting point; vLLM's
  INFO lines are not Trinity's and stay in the file); the log file gets ``log.level`` of the
  config or this level, whichever is lower.

Ray workers get :func:`worker_runtime_env` through ``ray.init`` (every actor inherits it): the
run's environment (plugin directories, ``TRINITY_LOG_LEVEL``, ``TRINITY_LOG_DIR``), vLLM's log
level (``VLLM_LOGGING_LEVEL``) and :func:`trinity.utils.log.setup_worker_process` as the
worker setup hook (each distinct Python warning once per process).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import IO, Any, Optional

from trinity.common.config import Config
from trinity.common.constants import LOG_LEVEL_ENV_VAR
from trinity.utils.log import DedupFilter, get_logger, show_warnings_once

__all__ = [
    "LOG_FILE_NAME",
    "WORKER_SETUP_HOOK",
    "ConsoleSession",
    "active_session",
    "console_err",
    "console_out",
    "run_log_dir",
    "worker_env_vars",
    "worker_runtime_env",
]

#: the file under ``<checkpoint_job_dir>/log/`` that holds a run's engine and worker output
LOG_FILE_NAME = "run.log"
#: the Ray ``worker_process_setup_hook`` of a run's worker processes
WORKER_SETUP_HOOK = "trinity.utils.log.setup_worker_process"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_RAY_COLOR_ENV = "RAY_COLOR_PREFIX"
_active: Optional[ConsoleSession] = None


def run_log_dir(config: Config) -> str:
    """``log.save_dir`` of a checked config, else ``<checkpoint_job_dir>/log``."""
    if config.log.save_dir:
        return config.log.save_dir
    return os.path.join(config.checkpoint_job_dir or config.get_checkpoint_job_dir(), "log")


def _lower(a: str, b: str) -> str:
    return a if logging.getLevelName(a) <= logging.getLevelName(b) else b


def worker_env_vars(config: Config) -> dict[str, str]:
    """Environment of every Ray worker of the run (engines, runners, trainer ranks).

    The run's own variables (``config.get_envs()``; empty ones left out so a worker keeps what
    it inherits) and vLLM's log level (``VLLM_LOGGING_LEVEL``: the run's level unless set in
    the environment). ``TRINITY_LOG_LEVEL`` is the file level of the active
    :class:`ConsoleSession` when there is one (``--log-level DEBUG`` reaches the workers).
    """
    envs = {k: v for k, v in config.get_envs().items() if v}
    level = str(config.log.level).upper()
    if _active is not None:
        level = _lower(level, _active.file_level)
    envs[LOG_LEVEL_ENV_VAR] = level
    envs["VLLM_LOGGING_LEVEL"] = os.environ.get("VLLM_LOGGING_LEVEL", level)
    return envs


def worker_runtime_env(config: Config) -> dict[str, Any]:
    """The Ray ``runtime_env`` of a run (``ray.init``): :func:`worker_env_vars` and the setup
    hook. Actors that pass their own ``env_vars`` keep these (Ray merges ``env_vars`` and
    inherits the hook)."""
    return {"env_vars": worker_env_vars(config), "worker_process_setup_hook": WORKER_SETUP_HOOK}


def active_session() -> Optional[ConsoleSession]:
    """The :class:`ConsoleSession` of the run in progress, if any."""
    return _active


def console_out() -> IO[str]:
    """The console's standard output (``sys.stdout`` when no session redirects it)."""
    return _active.out if _active is not None else sys.stdout


def console_err() -> IO[str]:
    """The console's standard error (``sys.stderr`` when no session redirects it)."""
    return _active.err if _active is not None else sys.stderr


def _fd_of(stream: Any) -> Optional[int]:
    try:
        return int(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None


class _ConsoleHandler(logging.Handler):
    """Trinity's records on the console: above a live progress bar when one is shown."""

    def __init__(self, session: ConsoleSession) -> None:
        super().__init__()
        self.session = session

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "console", True) is False:  # ``extra={"console": False}``: log only
            return
        try:
            text = self.format(record)
            live = self.session.live_console
            if live is not None:
                live.print(text, markup=False, highlight=False, soft_wrap=True)
            else:
                self.session.err.write(text + "\n")
                self.session.err.flush()
        except Exception:  # pragma: no cover - logging must not raise
            self.handleError(record)


class ConsoleSession:
    """The console and log file of one run (see the module docstring); a context manager.

    Args:
        log_dir: where ``run.log`` is written (created).
        verbose: leave engine and worker output on the console.
        level: the lowest level of Trinity's records on the console (``INFO``).
        file_level: the config's ``log.level``; the file gets this or ``level``, the lower.
    """

    def __init__(
        self,
        log_dir: str,
        *,
        verbose: bool = False,
        level: Optional[str] = None,
        file_level: str = "INFO",
    ) -> None:
        self.log_dir = os.path.abspath(log_dir)
        self.log_path = os.path.join(self.log_dir, LOG_FILE_NAME)
        self.verbose = verbose
        self.level = (level or "INFO").upper()
        for name, value in (("--log-level", self.level), ("log.level", file_level.upper())):
            if value not in LEVELS:
                raise ValueError(f"{name}: {value!r} is not a level; allowed: {', '.join(LEVELS)}")
        self.file_level = _lower(file_level.upper(), self.level)
        self.dedup = DedupFilter()
        #: a ``rich`` console showing a live bar (set by the progress display while it runs)
        self.live_console: Any = None
        self.out: IO[str] = sys.stdout
        self.err: IO[str] = sys.stderr
        self._log: Optional[IO[str]] = None
        self._saved_fds: dict[int, int] = {}
        self._saved_env: dict[str, Optional[str]] = {}
        self._saved_streams: tuple[Any, Any] = (sys.stdout, sys.stderr)
        self._saved_logging: list[tuple[logging.Logger, list[logging.Handler], int, bool]] = []
        self._saved_filters: list[Any] = []
        self._handlers: list[logging.Handler] = []

    @property
    def redirected(self) -> bool:
        """Whether engine and worker output goes to the log file (not ``verbose``)."""
        return not self.verbose

    def __enter__(self) -> ConsoleSession:
        global _active
        if _active is not None:
            raise RuntimeError("a ConsoleSession is already active in this process")
        os.makedirs(self.log_dir, exist_ok=True)
        self._log = open(  # noqa: SIM115 - closed in __exit__
            self.log_path, "a", buffering=1, encoding="utf-8", errors="replace"
        )
        self._saved_streams = (sys.stdout, sys.stderr)
        if self.redirected:
            self._redirect()
        self._configure_logging()
        _active = self
        return self

    def _redirect(self) -> None:
        assert self._log is not None
        consoles = []
        for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
            stream.flush()
            saved = os.dup(fd)
            self._saved_fds[fd] = saved
            if _fd_of(stream) == fd:  # the process's own descriptor: keep a console on a copy
                consoles.append(
                    open(  # noqa: SIM115 - closed in _restore
                        saved,
                        "w",
                        buffering=1,
                        encoding=getattr(stream, "encoding", None) or "utf-8",
                        errors="replace",
                        closefd=False,
                    )
                )
            else:  # already a Python-level stream (a test's capture): write to it
                consoles.append(stream)
        self.out, self.err = consoles
        for fd in (1, 2):
            os.dup2(self._log.fileno(), fd)
        sys.stdout = sys.stderr = self._log
        # Ray prefixes forwarded worker lines with colour codes unless told not to: a file
        # wants plain text (read when each line is printed, so setting it now is enough)
        self._saved_env = {_RAY_COLOR_ENV: os.environ.get(_RAY_COLOR_ENV)}
        os.environ.setdefault(_RAY_COLOR_ENV, "0")

    def _configure_logging(self) -> None:
        assert self._log is not None
        file_handler = logging.StreamHandler(self._log)
        file_handler.setLevel(self.file_level)
        file_handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%m-%d %H:%M:%S"))
        console = _ConsoleHandler(self)
        console.setLevel(self.level)
        console.addFilter(self.dedup)
        console.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
        self._handlers = [file_handler, console]
        get_logger("trinity")  # the tree exists (its default handler is replaced below)
        for name in ("trinity", "py.warnings"):
            logger = logging.getLogger(name)
            self._saved_logging.append(
                (logger, list(logger.handlers), logger.level, logger.propagate)
            )
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            logger.addHandler(file_handler)
            logger.addHandler(console)
            logger.propagate = False
        logging.getLogger("trinity").setLevel(self.file_level)
        self._saved_filters = list(warnings.filters)
        logging.captureWarnings(True)
        show_warnings_once()

    def __exit__(self, *exc: Any) -> None:
        global _active
        _active = None
        self.live_console = None
        logging.captureWarnings(False)
        warnings.filters[:] = self._saved_filters
        getattr(warnings, "_filters_mutated", lambda: None)()  # "once" registries start over
        for logger, handlers, level, propagate in self._saved_logging:
            for handler in self._handlers:
                logger.removeHandler(handler)
            for handler in handlers:
                logger.addHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
        self._saved_logging = []
        self._restore()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _restore(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # pragma: no cover - a closed stream
                pass
        for fd, saved in self._saved_fds.items():
            os.dup2(saved, fd)
        for stream in (self.out, self.err):
            if stream not in self._saved_streams:
                stream.close()  # closefd=False: the descriptor is closed below
        for saved in self._saved_fds.values():
            os.close(saved)
        self._saved_fds = {}
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env = {}
        sys.stdout, sys.stderr = self._saved_streams
        self.out, self.err = self._saved_streams

    def report(self) -> list[str]:
        """The end-of-run lines: warnings that repeated (and how often), where the log is."""
        lines = []
        repeated = self.dedup.suppressed()
        if repeated:
            total = sum(count for _, count in repeated)
            lines.append(
                f"{len(repeated)} warning(s) repeated {total} more time(s), shown once above:"
            )
            for message, count in repeated[:10]:
                first = message.splitlines()[0] if message else ""
                lines.append(f"  {count}x more: {first[:160]}")
        where = "engine and worker output" if self.redirected else "Trinity's log"
        lines.append(f"Logs ({where}): {self.log_path}")
        return lines
