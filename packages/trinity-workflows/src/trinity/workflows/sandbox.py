"""Run untrusted Python (model-written programs) in a separate, locked-down process.

A code reward executes whatever the policy wrote. During RL the policy is *optimised* against
that reward, so hostile behaviour (infinite loops, fork bombs, huge allocations, killing the
trainer, reading secrets, exiting early to fake a pass) is not hypothetical: any hole it finds
is reinforced. :class:`CodeSandbox` therefore runs each program under hard limits and reports
*why* a run failed, so a reward can score it 0 and the workflow can log the reason.

Two backends:

``"bwrap"`` (default, recommended)
    `bubblewrap <https://github.com/containers/bubblewrap>`_ puts the program in fresh user,
    pid, network, IPC, UTS and cgroup namespaces with a minimal read-only root (``/usr``, the
    merged-usr symlinks, a few files of ``/etc``, the interpreter's prefix), fresh ``/dev`` and
    ``/proc``, and a size-bounded private tmpfs on ``/tmp`` whose ``/tmp/work`` is the working
    directory. Hence: no network (only an isolated loopback), nothing of the host writable and
    most of it invisible (the repository, ``/root``, ``/home``), no host processes visible or
    killable, no inherited environment, and every process of a run dies with the namespace
    before :meth:`CodeSandbox.run` returns. ``/``, ``/dev`` (so also ``/dev/shm``: no POSIX
    semaphores, hence no ``multiprocessing`` locks) are read-only. When the caller is root,
    bwrap itself runs as an unprivileged uid (``uid``, default 65534 "nobody"): root ignores
    ``RLIMIT_NPROC`` and must never be the sandboxed user.

``"process"`` (explicit opt-in, **weaker**)
    A plain child process in its own session with the same resource limits, a scrubbed
    environment, a throwaway working directory and, when the caller is root, the unprivileged
    uid. It has **no file-system, network or process isolation**: the program can read
    whatever that uid can read, write wherever that uid can write (the disk is bounded only per
    file, by ``RLIMIT_FSIZE``), open network connections, and signal every process of that uid
    (other sandboxes included, and the caller itself when the caller is not root, since the
    program then runs as the caller's uid); a process that leaves the session (``setsid`` +
    double fork) is hunted down by an environment marker only on a best-effort basis. Use it
    only where bwrap cannot run (no user namespaces) and the programs are not adversarial.

Limits (both backends, see :class:`SandboxConfig`): CPU time (``RLIMIT_CPU``, SIGXCPU then
SIGKILL), wall time (the parent kills the run), address space (``RLIMIT_AS``: Python raises
``MemoryError``), output size (stdout + stderr read with a cap, the run is killed on overflow),
file size (``RLIMIT_FSIZE``), open files, and processes/threads (``RLIMIT_NPROC``).

``RLIMIT_NPROC`` counts *all* processes of a uid. With bwrap the limit is set inside the
sandbox's own user namespace, which the kernel (Linux >= 5.14, per-namespace "ucounts")
counts separately, so a fork bomb in one run cannot starve concurrent runs of the same uid (on
older kernels it can, until the run's limits end it). The process backend counts every process
of the uid on the host instead.
"""

from __future__ import annotations

import asyncio
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
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, Optional, Union

from trinity.utils.log import get_logger

__all__ = [
    "BACKENDS",
    "STATUSES",
    "CodeSandbox",
    "SandboxConfig",
    "SandboxResult",
    "SandboxStatus",
    "SandboxUnavailableError",
]

#: The ways a run can end. ``ok``: exit code 0; ``error``: nonzero exit (an exception);
#: ``timeout``: wall-time limit; ``cpu_limit``: CPU-time limit; ``memory``: address-space
#: limit (``MemoryError``); ``output_limit``: more than ``max_output_bytes`` of output;
#: ``killed``: ended by another signal; ``sandbox_error``: the sandbox itself failed to start.
SandboxStatus = Literal[
    "ok", "error", "timeout", "cpu_limit", "memory", "output_limit", "killed", "sandbox_error"
]
STATUSES: tuple[str, ...] = (
    "ok",
    "error",
    "timeout",
    "cpu_limit",
    "memory",
    "output_limit",
    "killed",
    "sandbox_error",
)
BACKENDS: tuple[str, ...] = ("bwrap", "process")

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

# Runs as the unprivileged user before any untrusted code. It copies the inputs into the working
# directory (bwrap) and starts the program with the resource limits applied, after telling the
# parent "started" with a byte on an inherited pipe that the program never gets (so a program
# cannot fake "the sandbox failed to start").
#
# In "init" mode (bwrap, --as-pid-1) it stays as pid 1 of the sandbox's pid namespace: it reaps
# every process, and when the program exits it reports the program's raw wait status on that
# pipe and exits, which makes the kernel kill whatever else is left in the namespace. bwrap's own
# pid 1 is not used because bwrap's monitor exits as soon as *that* pid 1 reports the program's
# exit, without reaping it: the namespace is torn down only after the caller has returned and
# pid 1 is left as an orphan. This way bwrap exits only after pid 1 (and so every process of the
# run) is gone, and its wait status carries the run's CPU time. pid 1 is protected from the
# program: the kernel drops signals with the default action sent to a namespace's init from
# inside it (SIGINT is reset to default for that), and it is made non-dumpable so the program
# cannot ptrace it or open its /proc/1/fd to forge the report. RLIMIT_NPROC is applied inside
# bwrap's own user namespace, which the kernel counts separately for each sandbox.
_LAUNCHER = """\
import os, resource as r, signal, sys
a = sys.argv
fd, init = int(a[1]), a[2] == "init"
if a[3]:
    import shutil
    shutil.copytree(a[3], ".", dirs_exist_ok=True)
cpu, mem, fsize, nofile, nproc = (int(x) for x in a[4:9])
def lim(kind, soft, hard):
    cur = r.getrlimit(kind)[1]
    if cur != r.RLIM_INFINITY:
        soft, hard = min(soft, cur), min(hard, cur)
    r.setrlimit(kind, (soft, hard))
def start():
    lim(r.RLIMIT_CORE, 0, 0)
    lim(r.RLIMIT_CPU, cpu, cpu + 1)
    lim(r.RLIMIT_AS, mem, mem)
    lim(r.RLIMIT_FSIZE, fsize, fsize)
    lim(r.RLIMIT_NOFILE, nofile, nofile)
    lim(r.RLIMIT_NPROC, nproc, nproc)
    os.write(fd, b"S")
    os.close(fd)
    os.execv(a[9], a[9:])
if not init:
    start()
signal.signal(signal.SIGINT, signal.SIG_DFL)
import ctypes
if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:
    raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
child = os.fork()
if child == 0:
    try:
        start()
    finally:
        os._exit(127)
while True:
    try:
        pid, status = os.waitpid(-1, 0)
    except InterruptedError:
        continue
    if pid == child:
        break
os.write(fd, b"R%d\\n" % status)
code = os.waitstatus_to_exitcode(status)
os._exit(code if code >= 0 else 128 - code)
"""
_MEMORY_PATTERNS = re.compile(
    r"^(MemoryError\b|.*\bCannot allocate memory\b|.*\bout of memory\b)", re.MULTILINE
)


logger = get_logger(__name__)


class SandboxUnavailableError(RuntimeError):
    """The sandbox cannot run on this machine (bwrap missing, interpreter unusable, ...)."""


# ---------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class SandboxConfig:
    """Limits and backend of :class:`CodeSandbox` (every field settable from YAML).

    Attributes:
        backend: ``"bwrap"`` (namespaces, recommended) or ``"process"`` (rlimits only,
            weaker; see the module docs).
        python: interpreter that runs the programs. It must be executable by the sandbox user
            (a pyenv/venv interpreter under ``/root`` is not); the default is the system one.
        cpu_time_s: CPU seconds per process (``RLIMIT_CPU``, rounded up to whole seconds).
        wall_time_s: real seconds for the whole run, after which the parent kills it.
        memory_mb: address space per process (``RLIMIT_AS``).
        max_output_bytes: stdout + stderr kept; more kills the run (``output_limit``).
        max_file_bytes: largest file a process may write (``RLIMIT_FSIZE``).
        workdir_mb: size of the sandbox's private ``/tmp`` (bwrap), bounding the total a
            program can write (many files, each under ``max_file_bytes``).
        max_processes: processes + threads a run may have, the program included
            (``RLIMIT_NPROC``; bounds fork bombs).
        max_open_files: ``RLIMIT_NOFILE``.
        uid / gid: unprivileged ids a root caller drops to (never 0).
        bwrap_path: the bubblewrap executable (a name looked up on ``PATH`` or a path).
        ro_paths: extra host paths made visible read-only inside bwrap (e.g. a data dir).
        temp_root: where throwaway directories are created (default: the system temp dir).
    """

    backend: str = "bwrap"
    python: str = "/usr/bin/python3"
    cpu_time_s: float = 5.0
    wall_time_s: float = 10.0
    memory_mb: int = 512
    max_output_bytes: int = 64 * 1024
    max_file_bytes: int = 16 * 1024 * 1024
    workdir_mb: int = 64
    max_processes: int = 32
    max_open_files: int = 256
    uid: int = 65534
    gid: int = 65534
    bwrap_path: str = "bwrap"
    ro_paths: tuple[str, ...] = ()
    temp_root: Optional[str] = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(
                f"SandboxConfig.backend must be one of {', '.join(map(repr, BACKENDS))}, "
                f"got {self.backend!r}"
            )
        for name in ("cpu_time_s", "wall_time_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"SandboxConfig.{name} must be a number > 0, got {value!r}")
        minimums = {
            "memory_mb": 32,  # an interpreter needs ~20 MB of address space just to start
            "max_output_bytes": 1,
            "max_file_bytes": 1,
            "workdir_mb": 1,
            "max_processes": 1,
            "max_open_files": 16,
            "uid": 1,
            "gid": 1,
        }
        for name, low in minimums.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"SandboxConfig.{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.python, str) or not self.python:
            raise ValueError(
                f"SandboxConfig.python must be an interpreter path, got {self.python!r}"
            )
        paths = (self.ro_paths,) if isinstance(self.ro_paths, str) else self.ro_paths
        paths = tuple(paths or ())
        for path in paths:
            if not isinstance(path, str) or not os.path.isabs(path):
                raise ValueError(
                    f"SandboxConfig.ro_paths entries must be absolute paths, got {path!r}"
                )
        object.__setattr__(self, "ro_paths", paths)

    @classmethod
    def from_mapping(
        cls, values: Optional[Mapping[str, Any]] = None, **overrides: Any
    ) -> SandboxConfig:
        """A config from a YAML mapping; unknown keys are refused, naming the allowed ones."""
        merged = {**dict(values or {}), **overrides}
        allowed = {f.name for f in fields(cls)}
        unknown = sorted(set(merged) - allowed)
        if unknown:
            raise ValueError(
                f"unknown sandbox setting(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(allowed))}"
            )
        return cls(**merged)

    @classmethod
    def coerce(
        cls, value: Union[SandboxConfig, Mapping[str, Any], None], **overrides: Any
    ) -> SandboxConfig:
        """A config from a config, a mapping or ``None`` (the defaults), plus overrides."""
        if isinstance(value, SandboxConfig):
            return replace(value, **overrides) if overrides else value
        if value is None or isinstance(value, Mapping):
            return cls.from_mapping(value, **overrides)
        raise TypeError(
            f"sandbox settings must be a SandboxConfig or a mapping, got {type(value).__name__}"
        )


# ---------------------------------------------------------------------------------- result
@dataclass
class SandboxResult:
    """What one run did.

    Attributes:
        status: one of :data:`STATUSES`.
        reason: a short human-readable explanation (``"timeout after 2s (wall-time limit)"``,
            ``"exit code 1: ZeroDivisionError: division by zero"``).
        exit_code: the exit status when the program exited (``None`` when a signal ended it).
        signal: the number of the signal that ended the program, if any (SIGXCPU for the CPU
            soft limit, SIGKILL for the hard limit or when the parent killed the run).
        stdout / stderr: the output, decoded as UTF-8 (invalid bytes replaced), at most
            ``max_output_bytes`` together.
        truncated: output was cut at ``max_output_bytes``.
        wall_time: seconds from start to end of the run.
        cpu_time: user + system CPU seconds of the run's processes (those reaped before the
            run ended; a run the parent killed may report less).
        workdir: the host throwaway directory of the run (already removed on return).
    """

    status: str
    reason: str
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    wall_time: float = 0.0
    cpu_time: float = 0.0
    workdir: str = ""

    @property
    def ok(self) -> bool:
        """The program exited with status 0 within every limit."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly summary (without the output), for ``Experience.info``."""
        return {
            "status": self.status,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "wall_time": round(self.wall_time, 3),
            "cpu_time": round(self.cpu_time, 3),
        }


# ---------------------------------------------------------------------------------- sandbox
class CodeSandbox:
    """Runs Python programs under :class:`SandboxConfig`'s isolation and limits.

    Construction checks that the backend can work here (bwrap installed, the interpreter
    runnable by the sandbox user) by running one tiny program, cached per configuration, so a
    broken setup fails loudly once instead of scoring every sample 0.

    Thread-safe: :meth:`run` keeps no state between calls (each run gets its own process tree
    and throwaway directory), so many threads or :meth:`run_async` calls may share one sandbox.

    Example::

        sandbox = CodeSandbox(SandboxConfig(wall_time_s=2))
        result = sandbox.run("print(int(input()) * 2)", stdin="21\\n")
        assert result.ok and result.stdout == "42\\n"
    """

    _checked: set[tuple] = set()
    _checked_lock = threading.Lock()

    def __init__(
        self, config: Union[SandboxConfig, Mapping[str, Any], None] = None, **overrides: Any
    ):
        self.config = SandboxConfig.coerce(config, **overrides)
        self._as_root = os.geteuid() == 0
        self._python = self._resolve_python()
        self._bwrap: Optional[str] = None
        self._bwrap_features: frozenset[str] = frozenset()
        if self.config.backend == "bwrap":
            self._bwrap = self._resolve_bwrap()
            self._bwrap_features = _bwrap_features(self._bwrap)
            if "--size" not in self._bwrap_features:
                logger.warning(
                    "%s does not support --size (bubblewrap < 0.5): the sandbox's /tmp is "
                    "bounded only per file (max_file_bytes), not in total",
                    self._bwrap,
                )
        self._self_check()

    # ------------------------------------------------------------------ public API
    def run(
        self,
        code: str,
        stdin: Union[str, bytes] = "",
        files: Optional[Mapping[str, Union[str, bytes]]] = None,
    ) -> SandboxResult:
        """Run ``code`` as ``main.py`` in a fresh sandbox and return what happened.

        Args:
            code: the Python program.
            stdin: the program's standard input.
            files: extra files placed next to ``main.py`` (``{"data/x.txt": "..."}``; relative
                paths without ``..``), writable by the program.

        Never raises for anything the program does; a sandbox that cannot start gives
        ``status="sandbox_error"``. Every process of the run has exited when this returns,
        and the throwaway directory is removed.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        if not isinstance(stdin, (str, bytes)):
            raise TypeError(f"stdin must be str or bytes, got {type(stdin).__name__}")
        return self._execute(self.config, code, stdin, _check_files(files))

    async def run_async(
        self,
        code: str,
        stdin: Union[str, bytes] = "",
        files: Optional[Mapping[str, Union[str, bytes]]] = None,
    ) -> SandboxResult:
        """:meth:`run` in a worker thread, so the event loop keeps serving other samples.

        Cancelling the awaiting task does not stop the run early; it still ends within
        ``wall_time_s`` and cleans up after itself.
        """
        return await asyncio.to_thread(self.run, code, stdin, files)

    # ------------------------------------------------------------------ checks
    def _resolve_python(self) -> str:
        python = self.config.python
        found = shutil.which(python) if not os.path.isabs(python) else python
        if not found or not os.path.isfile(found):
            raise SandboxUnavailableError(
                f"sandbox python {python!r} does not exist; set SandboxConfig.python (sandbox."
                "python in reward_fn_args) to an interpreter the sandbox user can run, e.g. "
                "/usr/bin/python3"
            )
        # The real file: inside bwrap only its prefix is mounted, not the symlink's directory.
        return os.path.realpath(found)

    def _resolve_bwrap(self) -> str:
        found = shutil.which(self.config.bwrap_path)
        if not found:
            raise SandboxUnavailableError(
                f"the bwrap sandbox backend needs bubblewrap, but {self.config.bwrap_path!r} "
                f"was not found on PATH: {_BWRAP_INSTALL_HINT}"
            )
        return found

    def _self_check(self) -> None:
        key = (self.config, self._python, self._bwrap, os.geteuid())
        with self._checked_lock:
            if key in self._checked:
                return
        # A generous wall time: the first start of an interpreter may be slow on a busy host.
        probe = replace(self.config, wall_time_s=max(self.config.wall_time_s, 10.0))
        outcome = self._execute(probe, "import sys\nprint(sys.version_info[0])\n", "", {})
        if not outcome.ok or outcome.stdout.strip() != "3":
            who = f"uid {self.config.uid}" if self._as_root else f"uid {os.geteuid()}"
            detail = outcome.reason if not outcome.ok else f"printed {outcome.stdout!r}"
            hint = ""
            if self.config.backend == "bwrap":
                hint = (
                    " (bwrap needs unprivileged user namespaces: check "
                    "/proc/sys/user/max_user_namespaces and, on Ubuntu, "
                    'kernel.apparmor_restrict_unprivileged_userns; or use backend "process")'
                )
            raise SandboxUnavailableError(
                f"the {self.config.backend!r} sandbox cannot run {self._python} as {who}: "
                f"{detail}{hint}. The interpreter must be Python 3 and executable by that user "
                "(SandboxConfig.python; a pyenv/venv interpreter under /root is not)."
            )
        with self._checked_lock:
            self._checked.add(key)

    # ------------------------------------------------------------------ running
    def _execute(
        self, cfg: SandboxConfig, code: str, stdin: Union[str, bytes], files: dict[str, bytes]
    ) -> SandboxResult:
        workdir = tempfile.mkdtemp(prefix="trinity-sandbox-", dir=cfg.temp_root)
        try:
            result = self._run_in(cfg, workdir, code, stdin, files)
        finally:
            _remove_tree(workdir)
        result.workdir = workdir
        return result

    def _run_in(
        self,
        cfg: SandboxConfig,
        workdir: str,
        code: str,
        stdin: Union[str, bytes],
        files: dict[str, bytes],
    ) -> SandboxResult:
        src = os.path.join(workdir, "src")
        os.mkdir(src)
        _write_file(os.path.join(src, _PROGRAM_NAME), code.encode("utf-8"))
        for rel, data in files.items():
            path = os.path.join(src, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write_file(path, data)
        stdin_path = os.path.join(workdir, "stdin")
        _write_file(stdin_path, stdin.encode("utf-8") if isinstance(stdin, str) else stdin, 0o600)
        if self._as_root:
            # The sandbox user reads the inputs (bwrap binds them) or works in them (process).
            os.chmod(workdir, 0o711)
            for root, _dirs, names in os.walk(src):
                os.chown(root, cfg.uid, cfg.gid)
                for name in names:
                    os.chown(os.path.join(root, name), cfg.uid, cfg.gid)

        token = uuid.uuid4().hex
        started_r, started_w = os.pipe()
        info_r = info_w = -1
        if cfg.backend == "bwrap":
            info_r, info_w = os.pipe()
            argv = self._bwrap_argv(cfg, src, started_w, info_w)
            env = {"PATH": _SANDBOX_PATH}
            cwd = "/"
        else:
            argv = self._launcher_argv(cfg, started_w, copy_from="", cwd=src)
            env = {
                "PATH": _SANDBOX_PATH,
                "HOME": src,
                "TMPDIR": src,
                "LC_ALL": "C.UTF-8",
                "MALLOC_ARENA_MAX": "2",
                _MARKER_ENV: token,
            }
            cwd = src
        popen_kwargs: dict[str, Any] = {}
        if self._as_root:
            popen_kwargs = {"user": cfg.uid, "group": cfg.gid, "extra_groups": []}
        pass_fds = (started_w,) if info_w < 0 else (started_w, info_w)
        start = time.monotonic()
        try:
            with open(stdin_path, "rb") as stdin_file:
                proc = subprocess.Popen(
                    argv,
                    stdin=stdin_file,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=pass_fds,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,
                    **popen_kwargs,
                )
        except OSError as exc:
            for fd in (started_r, started_w, info_r, info_w):
                if fd >= 0:
                    os.close(fd)
            return SandboxResult(
                status="sandbox_error",
                reason=f"sandbox error: cannot start {argv[0]}: {exc}",
                wall_time=time.monotonic() - start,
            )
        os.close(started_w)
        if info_w >= 0:
            os.close(info_w)
        run = _Run(self, cfg, proc, start, started_r, info_r, token)
        try:
            return run.collect()
        finally:
            run.close()

    def _launcher_argv(
        self, cfg: SandboxConfig, started_fd: int, copy_from: str, cwd: str
    ) -> list[str]:
        flags = ["-s", "-E", "-B"]  # no user site, ignore PYTHON* env, write no .pyc
        nproc = cfg.max_processes
        if cfg.backend == "bwrap":
            nproc += 1  # the launcher, staying as the sandbox's pid 1, counts too
        elif not self._as_root:
            # The host count includes every process and thread of this user already running.
            nproc += _count_tasks_of_uid(os.geteuid())
        limits = [
            math.ceil(cfg.cpu_time_s),
            cfg.memory_mb * 1024 * 1024,
            cfg.max_file_bytes,
            cfg.max_open_files,
            nproc,
        ]
        return [
            self._python,
            *flags,
            "-c",
            _LAUNCHER,
            str(started_fd),
            "init" if cfg.backend == "bwrap" else "exec",
            copy_from,
            *(str(x) for x in limits),
            self._python,
            *flags,
            os.path.join(cwd, _PROGRAM_NAME) if cfg.backend == "process" else _PROGRAM_NAME,
        ]

    def _bwrap_argv(self, cfg: SandboxConfig, src: str, started_fd: int, info_fd: int) -> list[str]:
        assert self._bwrap is not None
        # --as-pid-1: the launcher is the sandbox's init (see _LAUNCHER for why not bwrap's).
        argv = [self._bwrap, "--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session"]
        if "--disable-userns" in self._bwrap_features:
            # No nested user namespaces inside the sandbox: less kernel attack surface.
            argv += ["--unshare-user", "--disable-userns"]
        argv += ["--hostname", "sandbox", "--ro-bind", "/usr", "/usr"]
        for name in _ROOT_LINKS:
            path = "/" + name
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
        for path in _ETC_FILES:
            argv += ["--ro-bind-try", path, path]
        prefix = os.path.dirname(os.path.dirname(self._python))
        if not (prefix + "/").startswith("/usr/"):
            argv += ["--ro-bind", prefix, prefix]
        for path in cfg.ro_paths:
            argv += ["--ro-bind", path, path]
        argv += ["--dev", "/dev", "--proc", "/proc"]
        if "--size" in self._bwrap_features:
            argv += ["--size", str(cfg.workdir_mb * 1024 * 1024)]
        argv += ["--tmpfs", _BOX_TMP, "--dir", _BOX_WORK, "--ro-bind", src, _BOX_INPUT]
        # bwrap builds the root and /dev on tmpfs mounts of unbounded size: make them read-only
        # so that only the size-bounded /tmp is writable (device nodes still work).
        argv += ["--remount-ro", "/dev", "--remount-ro", "/"]
        argv += ["--chdir", _BOX_WORK, "--clearenv"]
        for key, value in (
            ("PATH", _SANDBOX_PATH),
            ("HOME", _BOX_WORK),
            ("TMPDIR", _BOX_WORK),
            ("LC_ALL", "C.UTF-8"),
            # glibc reserves 64 MB of address space per malloc arena; keep threads within AS.
            ("MALLOC_ARENA_MAX", "2"),
        ):
            argv += ["--setenv", key, value]
        argv += ["--info-fd", str(info_fd), "--"]
        return argv + self._launcher_argv(cfg, started_fd, copy_from=_BOX_INPUT, cwd=_BOX_WORK)


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
