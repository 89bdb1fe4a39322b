"""Integrity of step checkpoints: a manifest of checksums written with each one, checked at
resume, and the error a save that hit a full disk raises.

Why: the "latest" marker is written last, so a *kill* while saving leaves the previous
checkpoint; but a file can still be damaged after the marker was written (a disk that filled
up under a copy, a truncated transfer, a flaky network file system). Resuming from such a
checkpoint fails deep inside the engine's loader, or worse, loads garbage. The manifest lets
a resume see the damage before anything starts and take the newest earlier checkpoint that is
intact instead (:func:`resolve_checkpoint`; the policy is in
:func:`trinity.launcher.checkpoint.resume_checkpoint`).

The manifest, ``global_step_N/checksums.json`` (:data:`MANIFEST_FILE`), holds every file of
the step directory written before it (relative POSIX path -> size in bytes and SHA-256). Files
added later (``actor/huggingface/`` of ``trainer.save_hf_checkpoint: last``) are not in it and
are not checked. A step directory without one was written by an older release and is
accepted as before.

Cost: every byte of the checkpoint is read back once at save (from the page cache, mostly)
and once at resume, in 1 MiB chunks, on up to :data:`HASH_THREADS` threads (``hashlib``
releases the GIL, and verl writes one shard per rank, so the files hash in parallel).
SHA-256 runs at about 1-2 GB/s per core on CPUs with SHA extensions, so a 100 GB FSDP
checkpoint (a 7B model with its optimizer state) costs some 15-60 s next to the minutes its
write takes. A resume first compares sizes (no reading), so a truncated file is found at once.
"""

from __future__ import annotations

import errno as errno_codes
import hashlib
import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional

from trinity.launcher.errors import LaunchInputError
from trinity.utils.log import get_logger

__all__ = [
    "CHUNK_SIZE",
    "HASH_THREADS",
    "MANIFEST_FILE",
    "CheckpointSaveError",
    "Resolution",
    "build_manifest",
    "describe_os_error",
    "file_sha256",
    "manifest_bytes",
    "os_error_in",
    "resolve_checkpoint",
    "resume_step",
    "save_failure",
    "step_numbers",
    "verify_checkpoint",
]

logger = get_logger(__name__)

#: in ``global_step_N/``: relative path -> size and SHA-256 of every file written before it
MANIFEST_FILE = "checksums.json"
#: how much of a file is hashed at a time (bounded memory, few system calls)
CHUNK_SIZE = 1 << 20
#: at most this many files are hashed at once
HASH_THREADS = max(1, min(8, os.cpu_count() or 1))
_MANIFEST_VERSION = 1
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
#: a step directory of an older release (no manifest) counts as complete only with this file,
#: which the checkpointer writes after the engines' files
_TRAINER_STATE_FILE = "trainer_state.json"


class CheckpointSaveError(OSError):
    """A step checkpoint could not be written (a full disk, most often). The partial step
    directory was removed and the previous checkpoint stays the latest; the message names
    both. ``errno`` is the OS error's (``errno.ENOSPC``: the disk is full), ``filename`` the
    step directory."""

    def __init__(
        self, message: str, *, path: Optional[str] = None, errno: Optional[int] = None
    ) -> None:
        super().__init__(message)
        self.errno = errno
        self.filename = path

    def __str__(self) -> str:
        return str(self.args[0])


def os_error_in(exc: BaseException) -> Optional[OSError]:
    """The OS error behind ``exc``: itself, its ``cause`` (Ray wraps a worker's error in a
    ``RayTaskError``) or its ``__cause__`` / ``__context__`` chain (``None``: there is none)."""
    seen: set[int] = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None:
            return current
        current = getattr(current, "cause", None) or current.__cause__ or current.__context__
    return None


def describe_os_error(exc: OSError) -> str:
    """``"No space left on device (ENOSPC, <file>)"``: what went wrong, for a message."""
    parts = (errno_codes.errorcode.get(exc.errno or -1, ""), str(exc.filename or ""))
    detail = ", ".join(p for p in parts if p)
    return f"{exc.strerror or exc}" + (f" ({detail})" if detail else "")


# ---------------------------------------------------------------------- the manifest
def file_sha256(path: str) -> tuple[int, str]:
    """The size and SHA-256 of the file at ``path``, read :data:`CHUNK_SIZE` bytes at a
    time (the size counted from what was read, so both describe the same bytes)."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _files(step_dir: str) -> list[str]:
    """The relative POSIX paths of the files under ``step_dir`` (the manifest and temporary
    files of an atomic write left out), in a fixed order."""
    out: list[str] = []
    for root, dirs, names in os.walk(step_dir):
        dirs.sort()
        for name in sorted(names):
            rel = os.path.relpath(os.path.join(root, name), step_dir).replace(os.sep, "/")
            if rel in (MANIFEST_FILE, f"{MANIFEST_FILE}.tmp") or not os.path.isfile(
                os.path.join(step_dir, rel)
            ):
                continue
            out.append(rel)
    return out


def build_manifest(step_dir: str) -> dict[str, Any]:
    """The manifest of ``step_dir`` as it is now: every file's size and SHA-256 (see the
    module docstring for the cost). Raises ``OSError`` when a file cannot be read."""
    files = _files(step_dir)
    paths = [os.path.join(step_dir, rel) for rel in files]
    with ThreadPoolExecutor(max_workers=min(HASH_THREADS, max(1, len(paths)))) as pool:
        digests = list(pool.map(file_sha256, paths))
    return {
        "version": _MANIFEST_VERSION,
        "algorithm": "sha256",
        "files": {
            rel: {"size": size, "sha256": digest}
            for rel, (size, digest) in zip(files, digests, strict=True)
        },
    }


def manifest_bytes(step_dir: str) -> bytes:
    """The content of ``step_dir``'s :data:`MANIFEST_FILE` (:func:`build_manifest`, timed)."""
    started = time.perf_counter()
    manifest = build_manifest(step_dir)
    logger.info(
        "Checksums of %s: %d files, %.1f MB in %.1f s",
        step_dir,
        len(manifest["files"]),
        sum(f["size"] for f in manifest["files"].values()) / 1e6,
        time.perf_counter() - started,
    )
    return json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8")


def verify_checkpoint(step_dir: str) -> Optional[list[str]]:
    """What is wrong with ``step_dir`` against its manifest: ``[]`` it is intact, ``None``
    it has no manifest (an older release wrote it), else one ``"<file>: <what>"`` per problem
    (missing, another size, another SHA-256, unreadable). Sizes are compared first: when one
    differs, nothing is hashed (the checkpoint is damaged either way, and a big one would
    take minutes to read)."""
    path = os.path.join(step_dir, MANIFEST_FILE)
    try:
        with open(path, "rb") as f:
            files = dict(json.loads(f.read())["files"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{MANIFEST_FILE}: unreadable ({exc})"]
    problems: list[str] = []
    for rel, entry in sorted(files.items()):
        try:
            size = os.path.getsize(os.path.join(step_dir, rel))
        except FileNotFoundError:
            problems.append(f"{rel}: missing")
            continue
        except OSError as exc:
            problems.append(f"{rel}: unreadable ({exc.strerror or exc})")
            continue
        if size != int(entry["size"]):
            problems.append(f"{rel}: {size} bytes, {int(entry['size'])} when saved (truncated?)")
    if problems:
        return problems
    names = sorted(files)

    def check(rel: str) -> Optional[str]:
        try:
            _, digest = file_sha256(os.path.join(step_dir, rel))
        except OSError as exc:
            return f"{rel}: unreadable ({exc.strerror or exc})"
        if digest != files[rel]["sha256"]:
            return f"{rel}: content changed since it was saved (SHA-256 differs)"
        return None

    with ThreadPoolExecutor(max_workers=min(HASH_THREADS, max(1, len(names)))) as pool:
        return [p for p in pool.map(check, names) if p is not None]


# ---------------------------------------------------------------------- which checkpoint
def step_numbers(job_dir: str) -> list[int]:
    """The N of every ``global_step_N`` directory in ``job_dir``, ascending."""
    try:
        names = os.listdir(job_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(
        int(m.group(1))
        for name in names
        if (m := _STEP_DIR.match(name)) and os.path.isdir(os.path.join(job_dir, name))
    )


@dataclass
class Resolution:
    """The checkpoint a resume can load (:func:`resolve_checkpoint`).

    Attributes:
        step: the newest intact step at or before the marked one (``None``: none is).
        damaged: ``(step dir, problems)`` of each newer one that is not, newest first.
        unverified: step dirs accepted without a manifest (an older release wrote them).
    """

    step: Optional[int] = None
    damaged: list[tuple[str, list[str]]] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)


def resolve_checkpoint(job_dir: str, marked: int) -> Resolution:
    """The newest checkpoint of ``job_dir`` a resume can load, starting at the ``marked``
    one (the "latest" marker's) and going back, with what is wrong with each newer one.

    A step directory is intact when it verifies against its manifest. One without a manifest
    (an older release) is accepted when it is the marked one (the marker was written after
    it) or holds ``trainer_state.json`` (an earlier one, whose save got past the engines'
    files). Directories after the marked one are saves that never completed: never taken.
    """
    found = Resolution()
    for step in sorted((s for s in step_numbers(job_dir) if s <= marked), reverse=True):
        step_dir = os.path.join(job_dir, f"global_step_{step}")
        problems = verify_checkpoint(step_dir)
        if problems is None:
            if step == marked or os.path.isfile(os.path.join(step_dir, _TRAINER_STATE_FILE)):
                found.unverified.append(step_dir)
                found.step = step
                return found
            problems = [f"{_TRAINER_STATE_FILE}: missing (a save that did not complete)"]
        if not problems:
            found.step = step
            return found
        found.damaged.append((step_dir, problems))
    return found


def resume_step(job_dir: str, marked: int, marker_name: str, way_out: str) -> Optional[int]:
    """:func:`resolve_checkpoint` as a resume applies it: a warning naming each damaged step
    directory and what is wrong with which file, another when an earlier step is taken.
    ``marker_name`` and ``way_out`` are the checkpointer's (for the messages).

    Raises:
        LaunchInputError: the marked checkpoint is damaged and no earlier one is intact.
    """
    found = resolve_checkpoint(job_dir, marked)
    for directory in found.unverified:
        logger.debug("%s has no %s (an older release wrote it)", directory, MANIFEST_FILE)
    for directory, problems in found.damaged:
        logger.warning("Checkpoint %s is damaged: %s", directory, "; ".join(problems))
    if found.step is None and found.damaged:
        directory, problems = found.damaged[0]
        others = [d for d, _ in found.damaged[1:]]
        raise LaunchInputError(
            f"checkpoint {directory} is damaged ({'; '.join(problems)}) and no earlier "
            f"checkpoint in {job_dir} is intact"
            + (f" ({', '.join(others)} damaged too)" if others else "")
            + f": restore the files from a copy, or {way_out}"
        )
    if found.step is None:
        logger.warning("%s names global_step_%d, which does not exist", marker_name, marked)
    elif found.step != marked:
        logger.warning(
            "Resuming from global_step_%d, the newest intact checkpoint, instead of the "
            "latest, global_step_%d (damaged); the steps after it are trained again",
            found.step,
            marked,
        )
    return found.step


def save_failure(step_dir: str, exc: Exception, previous: Optional[int], marker: str) -> Exception:
    """The error a failed save of ``step_dir`` raises (its partial files already removed):
    a :class:`CheckpointSaveError` naming the directory, the OS error and the checkpoint that
    stays the latest (``previous``, per ``marker``) when an OS error is behind ``exc``;
    ``exc`` itself otherwise (logged with the same facts)."""
    stays = (
        f"global_step_{previous} stays the latest checkpoint ({marker})"
        if previous is not None
        else "there is no earlier checkpoint (a resume starts from the beginning)"
    )
    os_error = os_error_in(exc)
    if os_error is None:
        logger.error("Saving %s failed; its partial files were removed, %s", step_dir, stays)
        return exc
    return CheckpointSaveError(
        f"could not write checkpoint {step_dir}: {describe_os_error(os_error)}; its partial "
        f"files were removed and {stays}; free space on that disk (or lower "
        "trainer.max_checkpoints_to_keep), then the same command resumes",
        path=step_dir,
        errno=os_error.errno,
    )
