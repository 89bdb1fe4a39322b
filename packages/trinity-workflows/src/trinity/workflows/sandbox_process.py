"""One sandboxed run as a process: reading its output under caps, killing it, and decoding
how it ended into a :class:`~trinity.workflows.sandbox_config.SandboxResult`.

This module owns :class:`_Run` (wall-time enforcement, capped reads of stdout/stderr, clean-up
of every process of the run) and the low-level helpers both backends share: bwrap feature
probing, input-file checks, pidfd / signal plumbing, and result parsing (exit status, memory
errors, signal names). :class:`~trinity.workflows.sandbox.CodeSandbox` builds the command line
and hands the started process to :class:`_Run`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import math
import os
import re
import selectors
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional, Union

from trinity.workflows.sandbox_config import SandboxConfig, SandboxResult, SandboxUnavailableError

if TYPE_CHECKING:
    from trinity.workflows.sandbox import CodeSandbox

_BWRAP_INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: `apt install bubblewrap`, Fedora/RHEL: "
    '`dnf install bubblewrap`), or set the sandbox backend to "process" (weaker: resource '
    "limits only, no file-system or network isolation)"
)
#: Where programs look for executables and the locale they get (C.UTF-8 is built into glibc).
_SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
#: Inside the bwrap sandbox: the private tmpfs, the working directory, the read-only inputs.
_BOX_TMP = "/tmp"
_BOX_WORK = "/tmp/work"
_BOX_INPUT = "/tmp/.input"
_PROGRAM_NAME = "main.py"
#: Host files a Python program may reasonably need; bound read-only when they exist.
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/alternatives",
)
#: Top-level directories that merged-usr systems make symlinks into /usr.
_ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: Seconds to wait for a killed run to be reaped before escalating.
_KILL_GRACE_S = 2.0
_READ_CHUNK = 65536
_MARKER_ENV = "TRINITY_SANDBOX_RUN"
_MEMORY_PATTERNS = re.compile(
    r"^(MemoryError\b|.*\bCannot allocate memory\b|.*\bout of memory\b)", re.MULTILINE
)


class _Run:
    """One running sandbox: reads its output under the caps, enforces wall time, cleans up."""

    def __init__(
        self,
        box: CodeSandbox,
        cfg: SandboxConfig,
        proc: subprocess.Popen,
        start: float,
        started_fd: int,
        info_fd: int,
        token: str,
    ) -> None:
        self.box = box
        self.cfg = cfg
        self.proc = proc
        self.start = start
        self.started_fd = started_fd
        self.info_fd = info_fd
        self.token = token
        self.launcher = b""  # "S" once the program is about to start, then "R<wait status>\n"
        self.info = b""
        self.out = {"stdout": bytearray(), "stderr": bytearray()}
        self.total = 0
        self.truncated = False
        self.stop_reason: Optional[str] = None  # "timeout" | "output_limit"
        self.status: Optional[int] = None
        self.rusage: Any = None
        self.pidfd = _pidfd_open(proc.pid)

    # -------------------------------------------------------------- reading
    def collect(self) -> SandboxResult:
        sel = selectors.DefaultSelector()
        streams = {}
        for name in ("stdout", "stderr"):
            pipe = getattr(self.proc, name)
            os.set_blocking(pipe.fileno(), False)
            streams[pipe.fileno()] = name
            sel.register(pipe.fileno(), selectors.EVENT_READ, name)
        sel.register(self.started_fd, selectors.EVENT_READ, "started")
        os.set_blocking(self.started_fd, False)
        if self.info_fd >= 0:
            sel.register(self.info_fd, selectors.EVENT_READ, "info")
            os.set_blocking(self.info_fd, False)
        if self.pidfd is not None:
            sel.register(self.pidfd, selectors.EVENT_READ, "exit")
        deadline = self.start + self.cfg.wall_time_s
        exited = False
        try:
            while not exited and self.stop_reason is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.stop_reason = "timeout"
                    break
                wait = remaining if self.pidfd is not None else min(remaining, 0.02)
                for key, _ in sel.select(wait):
                    tag = key.data
                    if tag == "exit":
                        exited = True
                    elif tag in ("started", "info"):
                        chunk = _read_some(key.fd)
                        if chunk:
                            if tag == "started":
                                self.launcher += chunk
                            else:
                                self.info += chunk
                        else:
                            sel.unregister(key.fd)
                    else:
                        if not self._read_stream(key.fd, tag):
                            sel.unregister(key.fd)
                if self.pidfd is None and not exited:
                    exited = self._poll_exit()
        finally:
            sel.close()
        # Ended, or being ended: no process of the run may outlive this call.
        self._terminate()
        for fd, name in streams.items():
            while self.stop_reason != "output_limit" and self._read_stream(fd, name):
                pass
        with contextlib.suppress(OSError):
            while chunk := _read_some(self.started_fd):
                self.launcher += chunk
        return self._result()

    def _read_stream(self, fd: int, name: str) -> bool:
        """Read what is available; False at end of stream (or nothing more to read now)."""
        chunk = _read_some(fd)
        if not chunk:
            return False
        room = self.cfg.max_output_bytes - self.total
        if len(chunk) > room:
            self.out[name] += chunk[:room]
            self.total += room
            self.truncated = True
            self.stop_reason = self.stop_reason or "output_limit"
            return False
        self.out[name] += chunk
        self.total += len(chunk)
        return True

    def _poll_exit(self) -> bool:
        pid, status, rusage = os.wait4(self.proc.pid, os.WNOHANG)
        if pid == 0:
            return False
        self._reaped(status, rusage)
        return True

    def _reaped(self, status: int, rusage: Any) -> None:
        self.status = status
        self.rusage = rusage
        # Tell Popen the child is gone, so it never waits on (or signals) a recycled pid.
        self.proc.returncode = os.waitstatus_to_exitcode(status)

    # -------------------------------------------------------------- killing
    def _terminate(self) -> None:
        if self.cfg.backend == "bwrap":
            self._terminate_bwrap()
        else:
            self._terminate_process()

    def _terminate_bwrap(self) -> None:
        # Killing the sandbox's pid 1 makes the kernel kill every process of its pid namespace;
        # bwrap then reaps it and exits. Killing bwrap itself is the last resort: its
        # --die-with-parent still takes the namespace down, but pid 1 is left as an orphan.
        if self.status is None and not self._poll_exit():
            with contextlib.suppress(OSError):
                while chunk := _read_some(self.info_fd):
                    self.info += chunk
            child = _json_child_pid(self.info)
            if child is not None:
                _kill_child_of(child, self.proc.pid, signal.SIGKILL)
            if not self._wait(_KILL_GRACE_S):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self._wait(None)

    def _terminate_process(self) -> None:
        # The program's session/process group first (the leader is not reaped yet, so the group
        # id cannot have been recycled), then escapees that started their own session.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        _kill_marked(self.token, self.cfg.uid if self.box._as_root else os.geteuid())
        if self.status is None:
            self._wait(None)

    def _wait(self, timeout: Optional[float]) -> bool:
        if self.status is not None:
            return True
        if timeout is not None:
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                if self._poll_exit():
                    return True
                time.sleep(0.005)
            return False
        _, status, rusage = os.wait4(self.proc.pid, 0)
        self._reaped(status, rusage)
        return True

    def close(self) -> None:
        for fd in (self.started_fd, self.info_fd, self.pidfd):
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()

    # -------------------------------------------------------------- classifying
    def _result(self) -> SandboxResult:
        cfg = self.cfg
        stdout = self.out["stdout"].decode("utf-8", errors="replace")
        stderr = self.out["stderr"].decode("utf-8", errors="replace")
        cpu = 0.0
        if self.rusage is not None:
            cpu = self.rusage.ru_utime + self.rusage.ru_stime
        started = b"S" in self.launcher
        report = re.search(rb"R(-?\d+)\n", self.launcher)
        if report:  # the program's own wait status, from the sandbox's pid 1
            exit_code, sig = _decode_status(int(report.group(1)), bwrap=False)
        else:
            exit_code, sig = _decode_status(self.status, bwrap=cfg.backend == "bwrap")
        result = SandboxResult(
            status="ok",
            reason="exited 0",
            exit_code=exit_code,
            signal=sig,
            stdout=stdout,
            stderr=stderr,
            truncated=self.truncated,
            wall_time=time.monotonic() - self.start,
            cpu_time=cpu,
        )
        if not started:
            # The launcher never ran: bwrap (or the interpreter) failed, or hung while starting.
            detail = _last_line(stderr) or (
                "did not start in time"
                if self.stop_reason == "timeout"
                else f"exit code {exit_code}"
                if sig is None
                else f"killed by signal {_signal_name(sig)}"
            )
            result.status, result.reason = "sandbox_error", f"sandbox error: {detail}"
        elif self.stop_reason == "output_limit":
            result.status, result.reason = (
                "output_limit",
                f"output limit exceeded (more than {cfg.max_output_bytes} bytes)",
            )
        elif self.stop_reason == "timeout":
            result.status, result.reason = (
                "timeout",
                f"timeout after {_fmt(cfg.wall_time_s)}s (wall-time limit)",
            )
        elif exit_code == 0:
            pass
        elif sig == signal.SIGXCPU or (
            sig == signal.SIGKILL and cpu >= math.ceil(cfg.cpu_time_s) - 0.05
        ):
            result.status, result.reason = (
                "cpu_limit",
                f"CPU time limit exceeded ({_fmt(math.ceil(cfg.cpu_time_s))}s)",
            )
        elif _MEMORY_PATTERNS.search(stderr):
            result.status, result.reason = (
                "memory",
                f"memory limit exceeded ({cfg.memory_mb} MB): {_last_line(stderr)}",
            )
        elif sig is not None:
            result.status, result.reason = "killed", f"killed by signal {_signal_name(sig)}"
        else:
            last = _last_line(stderr)
            result.status = "error"
            result.reason = f"exit code {exit_code}" + (f": {last}" if last else "")
        return result


# ---------------------------------------------------------------------------------- helpers
@functools.cache
def _bwrap_features(bwrap: str) -> frozenset[str]:
    """Options this bwrap understands (``--size`` needs 0.5, ``--disable-userns`` 0.8)."""
    try:
        text = subprocess.run(
            [bwrap, "--help"],
            capture_output=True,
            text=True,
            timeout=10,
            env={"PATH": _SANDBOX_PATH},
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailableError(
            f"cannot run {bwrap} --help: {exc}; {_BWRAP_INSTALL_HINT}"
        ) from exc
    out = text.stdout + text.stderr
    return frozenset(opt for opt in ("--size", "--disable-userns") if opt in out)


def _check_files(files: Optional[Mapping[str, Union[str, bytes]]]) -> dict[str, bytes]:
    if files is None:
        return {}
    if not isinstance(files, Mapping):
        raise TypeError(
            f"files must be a mapping of relative path to content, got {type(files).__name__}"
        )
    out: dict[str, bytes] = {}
    for name, content in files.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"files: a file name must be a non-empty str, got {name!r}")
        norm = os.path.normpath(name)
        if os.path.isabs(name) or norm.startswith("..") or norm in (".", _PROGRAM_NAME):
            raise ValueError(
                f"files: {name!r} is not allowed; use a relative path inside the working "
                f"directory, without '..', other than {_PROGRAM_NAME!r} (the program itself)"
            )
        if isinstance(content, str):
            content = content.encode("utf-8")
        if not isinstance(content, bytes):
            raise TypeError(f"files[{name!r}] must be str or bytes, got {type(content).__name__}")
        out[norm] = content
    return out


def _write_file(path: str, data: bytes, mode: int = 0o644) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _remove_tree(path: str) -> None:
    """Remove a throwaway directory even if the program made parts of it unwritable."""

    def retry(func: Any, target: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(target), stat.S_IRWXU)
            os.chmod(target, stat.S_IRWXU)
        with contextlib.suppress(FileNotFoundError):
            func(target)

    shutil.rmtree(path, onerror=retry)


def _read_some(fd: int) -> bytes:
    try:
        return os.read(fd, _READ_CHUNK)
    except BlockingIOError:
        return b""
    except OSError as exc:
        if exc.errno in (errno.EBADF, errno.EIO):
            return b""
        raise


def _pidfd_open(pid: int) -> Optional[int]:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return opener(pid)
    except OSError:  # old kernel; fall back to polling
        return None


def _json_child_pid(info: bytes) -> Optional[int]:
    try:
        value = json.loads(info.decode("utf-8", errors="replace") or "null")
    except json.JSONDecodeError:
        match = re.search(rb'"child-pid"\s*:\s*(\d+)', info)
        return int(match.group(1)) if match else None
    if isinstance(value, dict) and isinstance(value.get("child-pid"), int):
        return value["child-pid"]
    return None


def _kill_child_of(pid: int, parent: int, sig: int) -> None:
    """Signal ``pid`` only if it is still ``parent``'s child (never a recycled pid)."""
    pidfd = _pidfd_open(pid)
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            ppid = next((line.split()[1] for line in fh if line.startswith("PPid:")), None)
        if ppid != str(parent):
            return
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
    except (OSError, StopIteration):
        pass
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _tasks_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
    return pids


def _count_tasks_of_uid(uid: int) -> int:
    """Processes + threads of ``uid`` (what ``RLIMIT_NPROC`` counts on the host)."""
    total = 0
    for pid in _tasks_of_uid(uid):
        with contextlib.suppress(OSError):
            total += len(os.listdir(f"/proc/{pid}/task"))
    return total


def _kill_marked(token: str, uid: int) -> None:
    """Kill processes of ``uid`` whose environment carries this run's marker (process backend)."""
    needle = f"{_MARKER_ENV}={token}".encode()
    for _ in range(5):  # a process may fork between the scan and the kill: rescan
        found = False
        for pid in _tasks_of_uid(uid):
            if pid == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    environ = fh.read()
            except OSError:
                continue
            if needle in environ.split(b"\0"):
                found = True
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if not found:
            return
        time.sleep(0.01)


def _decode_status(status: Optional[int], bwrap: bool) -> tuple[Optional[int], Optional[int]]:
    """(exit code, signal) from a wait status; bwrap reports a signal ``n`` as exit ``128 + n``."""
    if status is None:
        return None, None
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    code = os.WEXITSTATUS(status)
    if bwrap and code > 128 and (code - 128) in _SIGNAL_NUMBERS:
        return None, code - 128
    return code, None


_SIGNAL_NUMBERS = frozenset(int(s) for s in signal.Signals)


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def _last_line(text: str, limit: int = 200) -> str:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


def _fmt(seconds: float) -> str:
    return f"{seconds:g}"
