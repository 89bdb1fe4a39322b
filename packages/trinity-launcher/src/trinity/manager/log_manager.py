"""Trinity-RFT 0.6's ``trinity.manager.log_manager``: follow the log files of a directory.

:class:`LogManager` tracks every file of ``log_dir`` (``keyword``: only files whose name holds
it) with a :class:`LogFileTracker` each, and prints through ``print``: when a file starts being
tracked, its last ``last_n_lines`` lines (and, with ``search_pattern``, each matching line with
five lines of context either side) and a "Started tracking" line; later, the lines appended at
``min_level`` or above. A file that shrinks or is replaced (log rotation) is read again from
its new content. ``trinity log`` (:mod:`trinity.launcher.log_follow`) is the command line's
follower; this class is the API code written for Trinity-RFT imports.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Optional

from trinity.launcher.log_follow import LEVELS, level_of

__all__ = ["LogFileTracker", "LogManager"]

_CYAN, _GREEN, _YELLOW, _RED, _BLUE, _MAGENTA = (
    "\033[96m",
    "\033[92m",
    "\033[93m",
    "\033[91m",
    "\033[94m",
    "\033[95m",
)
_RESET = "\033[0m"


def _priority(level: Optional[str]) -> int:
    """Rank of a level name (``WARN`` / ``FATAL`` read as ``WARNING`` / ``CRITICAL``)."""
    level = (level or "DEBUG").upper()
    level = {"WARN": "WARNING", "FATAL": "CRITICAL"}.get(level, level)
    return LEVELS.index(level) if level in LEVELS else 0


class LogFileTracker:
    """One followed file: where reading stopped, and which lines to show."""

    def __init__(
        self,
        filepath: str,
        min_level: int = 0,
        color_output: bool = True,
        last_n_lines: int = 0,
        search_pattern: Optional[str] = None,
    ) -> None:
        self.filepath = filepath
        self.min_level = min_level
        self.color_output = color_output
        self.last_n_lines = last_n_lines
        self.search_pattern = search_pattern
        self.file: Optional[IO[str]] = None
        self.file_size = 0
        self.inode: Optional[int] = None
        self._shown = True  # a line without a level goes with the record before it

    def _paint(self, color: str, text: str) -> str:
        return f"{color}{text}{_RESET}" if self.color_output else text

    def format_output(self, line: str) -> str:
        """``[file name] line``."""
        return f"{self._paint(_BLUE, f'[{Path(self.filepath).name}]')} {line}"

    def _search(self, lines: list[str]) -> None:
        pattern = self.search_pattern or ""
        print(self._paint(_CYAN, f"[INFO] Searching for {pattern!r} in {self.filepath}"))
        for i, line in enumerate(lines):
            if pattern not in line:
                continue
            print(self._paint(_MAGENTA, f"[{self.filepath}:{i + 1}]"))
            for j in range(max(0, i - 5), min(len(lines), i + 6)):
                mark = self._paint(_MAGENTA, ">> ") if j == i else "   "
                print(mark + self.format_output(lines[j]))
        print(self._paint(_CYAN, f"[INFO] Search of {self.filepath} done; following new lines"))

    def open_file(self) -> bool:
        """Open the file: search it, print its last lines, then read on from its end."""
        try:
            if self.file is not None:
                self.file.close()
            self.file = open(self.filepath, encoding="utf-8", errors="replace")
            self.inode = os.fstat(self.file.fileno()).st_ino
            if self.search_pattern or self.last_n_lines > 0:
                lines = [line.rstrip("\n") for line in self.file]
                if self.search_pattern:
                    self._search(lines)
                for line in deque(lines, maxlen=max(self.last_n_lines, 0)):
                    print(self.format_output(line))
            self.file.seek(0, os.SEEK_END)
            self.file_size = self.file.tell()
            return True
        except OSError as exc:
            print(self._paint(_RED, f"[ERROR] Cannot open {self.filepath}: {exc}"))
            return False

    def check_rotation(self) -> bool:
        """Whether the file was replaced (another inode), truncated, or removed."""
        try:
            stat = os.stat(self.filepath)
        except FileNotFoundError:
            return True
        if stat.st_ino != self.inode or stat.st_size < self.file_size:
            print(self._paint(_CYAN, f"[INFO] Detected file rotation: {self.filepath}"))
            return True
        return False

    def read_new_lines(self) -> list[str]:
        """The complete lines appended since the last read (after a rotation: none, the file
        is opened again and its last lines printed)."""
        if self.file is None or self.check_rotation():
            self.open_file()
            return []
        lines = []
        while True:
            pos = self.file.tell()
            line = self.file.readline()
            if not line:
                break
            if not line.endswith("\n"):  # an unfinished last line waits for its end
                self.file.seek(pos)
                break
            lines.append(line.rstrip("\n"))
        self.file_size = self.file.tell()
        return lines

    def should_display(self, line: str) -> bool:
        """Whether ``line`` passes ``min_level`` (a line without a level follows the one
        before it, e.g. a traceback its error)."""
        level = level_of(line)
        if level is not None:
            self._shown = _priority(level) >= self.min_level
        return self._shown

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class LogManager:
    """Tracks the log files of ``log_dir`` (see the module docstring)."""

    def __init__(
        self,
        log_dir: str,
        keyword: Optional[str] = None,
        min_level: str = "DEBUG",
        scan_interval: float = 0.5,
        last_n_lines: int = 0,
        search_pattern: Optional[str] = None,
        color_output: bool = True,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.keyword = keyword
        self.min_level_name = min_level.upper()
        self.min_level_priority = _priority(self.min_level_name)
        self.scan_interval = scan_interval
        self.last_n_lines = last_n_lines
        self.search_pattern = search_pattern
        self.color_output = color_output
        self.trackers: dict[str, LogFileTracker] = {}
        self.running = False
        self.lock = threading.Lock()

    def _paint(self, color: str, text: str) -> str:
        return f"{color}{text}{_RESET}" if self.color_output else text

    def find_log_files(self) -> set[str]:
        """The files of ``log_dir`` whose names hold ``keyword`` (absolute paths)."""
        try:
            return {
                str(p.resolve())
                for p in self.log_dir.iterdir()
                if p.is_file() and (self.keyword is None or self.keyword in p.name)
            }
        except OSError as exc:
            print(self._paint(_RED, f"[ERROR] Cannot list {self.log_dir}: {exc}"))
            return set()

    def scan_new_files(self) -> None:
        """Start tracking new files, stop tracking removed ones."""
        current = self.find_log_files()
        with self.lock:
            for path in sorted(current - set(self.trackers)):
                tracker = LogFileTracker(
                    path,
                    self.min_level_priority,
                    self.color_output,
                    self.last_n_lines,
                    self.search_pattern,
                )
                if tracker.open_file():
                    self.trackers[path] = tracker
                    print(self._paint(_GREEN, f"[INFO] Started tracking: {path}"))
            for path in sorted(set(self.trackers) - current):
                self.trackers.pop(path).close()
                print(self._paint(_YELLOW, f"[INFO] Stopped tracking: {path}"))

    def poll(self) -> None:
        """Print the new lines of every tracked file that pass the level filter."""
        with self.lock:
            trackers = list(self.trackers.values())
        for tracker in trackers:
            for line in tracker.read_new_lines():
                if tracker.should_display(line):
                    print(tracker.format_output(line))

    def monitor(self) -> None:
        """Follow the directory until :meth:`stop` (or Ctrl+C)."""
        self.running = True
        print(self._paint(_CYAN, f"Following the logs of {self.log_dir} (Ctrl+C to stop)"))
        last_scan = 0.0
        try:
            while self.running:
                if time.monotonic() - last_scan >= self.scan_interval:
                    self.scan_new_files()
                    last_scan = time.monotonic()
                self.poll()
                time.sleep(0.1)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop following and close every file."""
        self.running = False
        with self.lock:
            for tracker in self.trackers.values():
                tracker.close()
            self.trackers.clear()
