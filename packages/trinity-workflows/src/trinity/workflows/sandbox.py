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
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Optional, Union

from trinity.utils.log import get_logger

# The policy/result types and the process plumbing live in sandbox_config / sandbox_process;
# re-exported here so that ``from trinity.workflows.sandbox import SandboxConfig`` etc. work.
from trinity.workflows.sandbox_config import (  # noqa: F401
    BACKENDS,
    STATUSES,
    SandboxConfig,
    SandboxResult,
    SandboxStatus,
    SandboxUnavailableError,
)
from trinity.workflows.sandbox_process import (  # noqa: F401
    _BOX_INPUT,
    _BOX_TMP,
    _BOX_WORK,
    _BWRAP_INSTALL_HINT,
    _ETC_FILES,
    _KILL_GRACE_S,
    _MARKER_ENV,
    _MEMORY_PATTERNS,
    _PROGRAM_NAME,
    _READ_CHUNK,
    _ROOT_LINKS,
    _SANDBOX_PATH,
    _bwrap_features,
    _check_files,
    _count_tasks_of_uid,
    _decode_status,
    _fmt,
    _json_child_pid,
    _kill_child_of,
    _kill_marked,
    _last_line,
    _pidfd_open,
    _read_some,
    _remove_tree,
    _Run,
    _signal_name,
    _tasks_of_uid,
    _write_file,
)

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


logger = get_logger(__name__)


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
