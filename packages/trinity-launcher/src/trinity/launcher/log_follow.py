"""``trinity log``: read and follow a run's log files (Trinity-RFT 0.6's command and options).

A run writes its logs under ``log.save_dir`` (default ``<checkpoint_job_dir>/log``; ``--config``
finds it, ``--log-dir`` names it). The command prints the last ``--last-n-lines`` lines of each
``*.log`` file there (``--keyword``: only files whose name holds it) and then follows them as
they grow, new files included, until Ctrl+C. ``--level`` hides records below that level; a line
without a level of its own (a traceback, a continued message) goes with the record before it.
``--search-pattern`` instead searches the files as they are and prints every line containing
the pattern, then exits. With several files each line is prefixed by its file's name.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Optional

__all__ = ["LogFollower", "LogFollowError", "add_log_parser", "log_dir_of_config", "log_main"]

#: the levels, lowest first (a record's level is the first of these words on its line)
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_LEVEL_RE = re.compile(r"\b(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b")
_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL"}
_COLORS = {"DEBUG": "\033[2m", "WARNING": "\033[33m", "ERROR": "\033[31m", "CRITICAL": "\033[1;31m"}
_RESET = "\033[0m"


class LogFollowError(ValueError):
    """Bad options: what is wrong and what is allowed (exit status 2)."""


def log_dir_of_config(path: str) -> str:
    """The log directory of the run a config file describes (``log.save_dir``, else
    ``<checkpoint_job_dir>/log``), without starting anything."""
    from trinity.common.config import load_config
    from trinity.launcher.logs import run_log_dir

    return run_log_dir(load_config(path))


def level_of(line: str) -> Optional[str]:
    """The level a log line names (``None``: a line without one)."""
    match = _LEVEL_RE.search(line[:120])
    if match is None:
        return None
    word = match.group(1)
    return _ALIASES.get(word, word)


@dataclass
class _Tail:
    """One followed file: where reading stopped, the partial last line, the last level."""

    path: Path
    offset: int = 0
    partial: str = ""
    shown: bool = True  # whether the last record passed the level filter


@dataclass
class LogFollower:
    """Prints the log files of ``log_dir`` (see the module docstring)."""

    log_dir: str
    keyword: Optional[str] = None
    level: str = "INFO"
    last_n_lines: int = 0
    color: bool = True
    out: IO[str] = field(default_factory=lambda: sys.stdout)
    poll_s: float = 0.2

    def __post_init__(self) -> None:
        level = self.level.upper()
        if level not in LEVELS:
            raise LogFollowError(f"--level {self.level!r}; allowed: {', '.join(LEVELS)}")
        self.level = level
        if self.last_n_lines < 0:
            raise LogFollowError(f"--last-n-lines {self.last_n_lines}; allowed: 0 or more")
        if not os.path.isdir(self.log_dir):
            raise LogFollowError(
                f"{self.log_dir}: no such log directory (a run writes its logs to "
                "log.save_dir, default <checkpoint_job_dir>/log)"
            )
        self._tails: dict[Path, _Tail] = {}

    # ------------------------------------------------------------------ files
    def files(self) -> list[Path]:
        """The ``*.log`` files of the directory (and below), ``keyword`` in their names."""
        found = sorted(p for p in Path(self.log_dir).rglob("*.log") if p.is_file())
        return [p for p in found if not self.keyword or self.keyword in p.name]

    def _name(self, path: Path) -> str:
        return str(path.relative_to(self.log_dir))

    def _emit(self, tail: _Tail, line: str, many: bool) -> None:
        level = level_of(line)
        if level is not None:
            tail.shown = LEVELS.index(level) >= LEVELS.index(self.level)
        if not tail.shown:
            return
        prefix = f"[{self._name(tail.path)}] " if many else ""
        color = _COLORS.get(level or "", "") if self.color else ""
        self.out.write(f"{prefix}{color}{line}{_RESET if color else ''}\n")

    # ------------------------------------------------------------------ search
    def search(self, pattern: str) -> int:
        """Print every line of the files that contains ``pattern``; returns how many."""
        files, count = self.files(), 0
        for path in files:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if pattern in line:
                        prefix = f"[{self._name(path)}] " if len(files) > 1 else ""
                        self.out.write(f"{prefix}{line.rstrip(chr(10))}\n")
                        count += 1
        self.out.flush()
        return count

    # ------------------------------------------------------------------ follow
    def start(self) -> None:
        """Print the last ``last_n_lines`` lines of each file; later reads start at its end."""
        files = self.files()
        for path in files:
            tail = self._tails[path] = _Tail(path, offset=path.stat().st_size)
            if self.last_n_lines:
                with open(path, encoding="utf-8", errors="replace") as f:
                    last = deque(f, maxlen=self.last_n_lines)
                for line in last:
                    self._emit(tail, line.rstrip("\n"), len(files) > 1)
        self.out.flush()

    def poll(self) -> int:
        """Print what was appended since the last poll (new files from their start); returns
        the number of lines read."""
        files, read = self.files(), 0
        many = len(files) > 1
        for path in files:
            tail = self._tails.get(path)
            if tail is None:  # a file that appeared while following
                tail = self._tails[path] = _Tail(path)
            size = path.stat().st_size
            if size < tail.offset:  # truncated or replaced: read it again
                tail.offset, tail.partial = 0, ""
            if size == tail.offset:
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                f.seek(tail.offset)
                chunk = f.read()
                tail.offset = f.tell()
            lines = (tail.partial + chunk).split("\n")
            tail.partial = lines.pop()  # an unfinished last line waits for its end
            for line in lines:
                self._emit(tail, line, many)
                read += 1
        if read:
            self.out.flush()
        return read

    def follow(self, stop: Optional[threading.Event] = None) -> None:
        """:meth:`start`, then :meth:`poll` until ``stop`` is set (Ctrl+C on the command line)."""
        stop = stop or threading.Event()
        self.start()
        while not stop.is_set():
            self.poll()
            stop.wait(self.poll_s)


def add_log_parser(sub: argparse._SubParsersAction) -> None:
    """The ``trinity log`` sub-command's options (Trinity-RFT 0.6's names)."""
    log = sub.add_parser(
        "log",
        help="print and follow a run's log files",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    log.add_argument("--log-dir", "-d", default="", help="the log directory (wins over --config)")
    log.add_argument("--config", "-c", default="", help="a run's config: its log directory")
    log.add_argument("--keyword", "-k", default=None, help="only files whose name holds it")
    log.add_argument("--level", "-l", default="INFO", help="lowest level shown (INFO)")
    log.add_argument(
        "--last-n-lines", "-n", type=int, default=0, help="lines of each file shown first (0)"
    )
    log.add_argument(
        "--search-pattern",
        "-p",
        default=None,
        help="print the lines holding it in the files as they are, then exit",
    )
    log.add_argument("--no-color", action="store_true", help="no colours by level")


def log_main(args: argparse.Namespace) -> int:
    """``trinity log``: exit status 0, or 2 for bad options (the message on stderr)."""
    try:
        if not args.log_dir and not args.config:
            raise LogFollowError("give --log-dir DIR or --config CONFIG (its run's log directory)")
        log_dir = args.log_dir or log_dir_of_config(args.config)
        follower = LogFollower(
            log_dir,
            keyword=args.keyword,
            level=args.level,
            last_n_lines=args.last_n_lines,
            color=not args.no_color and sys.stdout.isatty(),
        )
    except (LogFollowError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.search_pattern is not None:
        follower.search(args.search_pattern)
        return 0
    try:
        follower.follow()
    except KeyboardInterrupt:
        pass
    return 0
