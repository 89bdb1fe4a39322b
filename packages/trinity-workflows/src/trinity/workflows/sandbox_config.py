"""The sandbox's policy and outcome types: what a run may do, and how it ended.

This module owns :class:`SandboxConfig` (backend and every limit: wall/CPU time, memory,
output, file size, open files, processes; validated with errors naming the field),
:class:`SandboxResult` (status, exit code or signal, captured output, the reason in words),
the status and backend names, and :class:`SandboxUnavailableError`. Running a program is
:mod:`trinity.workflows.sandbox` (the backends) and :mod:`trinity.workflows.sandbox_process`
(one run: output caps, killing, decoding how it ended).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, Optional, Union

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
