"""File experience storage: JSON lines or a parquet dataset, crash-safe.

The format follows ``path``:

* ``*.jsonl`` / ``*.json`` — one JSON object per experience, appended to one file;
* ``*.parquet`` — a dataset *directory* of immutable part files (``part-00000001.parquet``,
  ...); an existing single parquet file at that path is read as-is;
* anything else — a directory holding ``<storage name>.jsonl``.

Every record stores the experience as :meth:`Experience.serialize` bytes (base64 in JSON, a
binary column in parquet), plus readable ``eid`` / ``model_version`` / ``reward`` columns.

JSONL line::

    {"batch": "<hex id>", "i": 0, "n": 4, "eid": "...", "model_version": 3, "reward": 1.0,
     "exp": "<base64 of Experience.serialize()>"}

Why this is crash-safe (a killed writer never leaves a half batch visible):

* JSONL: a batch is encoded first and appended with ``O_APPEND`` writes under an exclusive
  ``flock``; each line names its batch and the batch size, and readers only hand out a batch
  once all ``n`` lines are there. A torn tail (a line without its newline, or a batch with
  missing lines) is ignored by readers and truncated away by the next writer before it
  appends. Lines without ``batch`` (hand-made files) count as batches of one.
* Parquet: a batch is written to a hidden temporary file and ``os.replace``-d to its final
  name, which is atomic; readers list only final names. Part numbers are assigned under a
  directory lock at rename time, so parts appear in increasing name order and a reader's
  position (the name of the part it is in) never skips one.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from trinity.buffer.base import BufferWriter, OfflineReader
from trinity.buffer.storage.errors import StorageConfigError
from trinity.common.experience import Experience

__all__ = [
    "FileReader",
    "FileWriter",
    "JsonlFile",
    "ParquetDataset",
    "resolve_file_path",
    "PARQUET_SCHEMA",
]

#: Columns of a parquet part written by :class:`ParquetDataset`.
PARQUET_SCHEMA = pa.schema(
    [
        pa.field("exp", pa.binary(), nullable=False),
        pa.field("eid", pa.string()),
        pa.field("model_version", pa.int64()),
        pa.field("reward", pa.float64()),
    ]
)

_PART_RE = re.compile(r"^part-(\d+)\.parquet$")
_CHUNK = 8 << 20


def resolve_file_path(storage_config: Any) -> tuple[str, str]:
    """``(format, path)`` for a file storage: ``("jsonl", file)`` or ``("parquet", dir or
    file)``; raises :class:`StorageConfigError` naming ``path`` when it is missing."""
    name = getattr(storage_config, "name", "") or "<unnamed>"
    path = getattr(storage_config, "path", None)
    if not path:
        raise StorageConfigError(
            f"storage {name!r}: storage_type 'file' needs `path` (a .jsonl file, a .parquet "
            "dataset directory or a directory)"
        )
    path = os.path.abspath(os.path.expanduser(str(path)))
    lower = path.lower()
    if lower.endswith((".jsonl", ".json")):
        return "jsonl", path
    if lower.endswith(".parquet"):
        return "parquet", path
    safe = re.sub(r"[^0-9A-Za-z_.-]", "_", getattr(storage_config, "name", "") or "experiences")
    return "jsonl", os.path.join(path, f"{safe}.jsonl")


# --------------------------------------------------------------------------------------
# JSONL
# --------------------------------------------------------------------------------------


def _encode_batch(exps: Sequence[Experience]) -> bytes:
    batch_id = uuid.uuid4().hex
    n = len(exps)
    lines = []
    for i, exp in enumerate(exps):
        record = {
            "batch": batch_id,
            "i": i,
            "n": n,
            "eid": exp.eid.uid,
            "model_version": exp.model_version,
            "reward": exp.reward,
            "exp": base64.b64encode(exp.serialize()).decode("ascii"),
        }
        lines.append(json.dumps(record, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode("utf-8")


def _parse_groups(data: bytes, base: int) -> tuple[list[tuple[int, int, list[bytes]]], int]:
    """Complete batches in ``data`` (file bytes starting at offset ``base``).

    Returns ``([(start, end, [exp bytes...]), ...], good_end)``. A group's ``start`` is the end
    of the previous complete group (garbage between them — a crashed writer's partial batch —
    belongs to the next group and is skipped with it); ``good_end`` is the end of the last
    complete group (``base`` if none). Only lines ending in a newline are considered.
    """
    groups: list[tuple[int, int, list[bytes]]] = []
    good_end = base
    cur_id: Optional[str] = None
    cur: list[bytes] = []
    cur_n = 0
    pos = 0
    while True:
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        line = data[pos:nl]
        pos = nl + 1
        try:
            rec = json.loads(line)
            payload = base64.b64decode(rec["exp"], validate=True)
            batch_id = rec.get("batch")
            n, i = int(rec.get("n", 1)), int(rec.get("i", 0))
        except Exception:  # noqa: BLE001 - a torn or foreign line: drop the group it is in
            cur_id, cur = None, []
            continue
        if batch_id is None:  # a hand-made line: a batch of one
            batch_id, n, i = f"@{base + pos}", 1, 0
        if batch_id != cur_id or i != len(cur):
            cur_id, cur, cur_n = batch_id, [], n
            if i != 0:  # the start of this batch is missing
                cur_id = None
                continue
        cur.append(payload)
        if len(cur) == cur_n:
            groups.append((good_end, base + pos, cur))
            good_end = base + pos
            cur_id, cur = None, []
    return groups, good_end


class JsonlFile:
    """A JSONL experience file: locked atomic appends, torn-tail repair, batch-wise reads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: Optional[int] = None

    @contextmanager
    def _locked(self) -> Iterator[int]:
        if self._fd is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield self._fd
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _good_end(self, fd: int) -> int:
        """End of the last complete batch (scans the file; only run on a suspected tear)."""
        size, pos, good = os.fstat(fd).st_size, 0, 0
        chunk = _CHUNK
        while pos < size:
            data = os.pread(fd, min(chunk, size - pos), pos)
            _, end = _parse_groups(data, pos)
            if end == pos:
                if pos + len(data) >= size:
                    break  # the rest is a torn tail
                chunk *= 2  # one batch bigger than the chunk: read more at once
                continue
            good, pos, chunk = end, end, _CHUNK
        return good

    def repair(self) -> int:
        """Truncate a torn tail left by a killed writer; returns the bytes removed."""
        with self._locked() as fd:
            return self._repair(fd, full=True)

    def _repair(self, fd: int, full: bool) -> int:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        if not full and os.pread(fd, 1, size - 1) == b"\n":
            return 0  # fast path: the file ends on a line boundary
        good = self._good_end(fd)
        if good < size:
            os.ftruncate(fd, good)
        return size - good

    def append(self, exps: Sequence[Experience]) -> None:
        """Append one batch, all lines in one locked write (a reader sees all or none)."""
        if not exps:
            return
        data = _encode_batch(exps)
        with self._locked() as fd:
            self._repair(fd, full=False)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]

    def read_groups(self, offset: int) -> tuple[list[tuple[int, int, list[bytes]]], int]:
        """Complete batches from ``offset`` on (at least one if there is one)."""
        if not os.path.exists(self.path):
            return [], offset
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            chunk = _CHUNK
            while offset < size:
                f.seek(offset)
                data = f.read(min(chunk, size - offset))
                groups, end = _parse_groups(data, offset)
                if groups or offset + len(data) >= size:
                    return groups, end
                chunk *= 2
        return [], offset

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# --------------------------------------------------------------------------------------
# Parquet
# --------------------------------------------------------------------------------------


class ParquetDataset:
    """A directory of immutable parquet parts, each one atomic batch (or one plain file)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._cache: Optional[tuple[str, list[bytes]]] = None

    @property
    def single_file(self) -> bool:
        return os.path.isfile(self.path)

    def parts(self) -> list[str]:
        """Final part names in write order (temporary files are invisible)."""
        if self.single_file:
            return [os.path.basename(self.path)]
        if not os.path.isdir(self.path):
            return []
        return sorted(n for n in os.listdir(self.path) if _PART_RE.match(n))

    def append(self, exps: Sequence[Experience]) -> None:
        """Write one batch as a new part: temp file, fsync, then atomic rename."""
        if not exps:
            return
        if self.single_file:
            raise StorageConfigError(
                f"`path` {self.path!r} is a single parquet file, which cannot be appended to; "
                "point `path` at a new *.parquet directory to write experiences"
            )
        os.makedirs(self.path, exist_ok=True)
        table = pa.Table.from_pydict(
            {
                "exp": [e.serialize() for e in exps],
                "eid": [e.eid.uid for e in exps],
                "model_version": [e.model_version for e in exps],
                "reward": [e.reward for e in exps],
            },
            schema=PARQUET_SCHEMA,
        )
        tmp = os.path.join(self.path, f".tmp-{os.getpid()}-{uuid.uuid4().hex}.parquet")
        try:
            pq.write_table(table, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            lock_fd = os.open(os.path.join(self.path, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                existing = [int(m.group(1)) for n in self.parts() if (m := _PART_RE.match(n))]
                seq = max(existing, default=0) + 1
                os.replace(tmp, os.path.join(self.path, f"part-{seq:08d}.parquet"))
            finally:
                os.close(lock_fd)  # closing releases the flock
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def clean_stale_tmp(self) -> int:
        """Remove temporary files of dead writers (their batches never became visible)."""
        removed = 0
        if not os.path.isdir(self.path):
            return 0
        for name in os.listdir(self.path):
            m = re.match(r"^\.tmp-(\d+)-", name)
            if m and not _pid_alive(int(m.group(1))):
                try:
                    os.unlink(os.path.join(self.path, name))
                    removed += 1
                except FileNotFoundError:
                    pass
        return removed

    def load(self, part: str) -> list[bytes]:
        """The serialized experiences of one part."""
        if self._cache is not None and self._cache[0] == part:
            return self._cache[1]
        full = self.path if self.single_file else os.path.join(self.path, part)
        table = pq.read_table(full)
        if "exp" not in table.column_names:
            raise StorageConfigError(
                f"parquet file {full!r} has no 'exp' column of serialized experiences "
                f"(columns: {table.column_names}); it was not written by a file storage"
            )
        rows = [bytes(x) for x in table.column("exp").to_pylist()]
        self._cache = (part, rows)
        return rows


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --------------------------------------------------------------------------------------
# Reader / writer
# --------------------------------------------------------------------------------------


class FileWriter(BufferWriter):
    """Appends batches to a JSONL file or a parquet dataset (see the module docstring)."""

    def __init__(self, storage_config: Any) -> None:
        self.config = storage_config
        self.format, self.path = resolve_file_path(storage_config)
        if self.format == "jsonl":
            self._jsonl: Optional[JsonlFile] = JsonlFile(self.path)
            self._jsonl.repair()  # a previous writer may have been killed mid-batch
            self._parquet: Optional[ParquetDataset] = None
        else:
            self._jsonl = None
            self._parquet = ParquetDataset(self.path)
            self._parquet.clean_stale_tmp()

    def write(self, exps: Sequence[Experience]) -> None:
        exps = list(exps)
        if self._jsonl is not None:
            self._jsonl.append(exps)
        else:
            assert self._parquet is not None
            self._parquet.append(exps)

    def position(self) -> Any:
        """jsonl: the file's size (after a torn tail is repaired); parquet: the part names."""
        if self._jsonl is not None:
            self._jsonl.repair()
            return os.path.getsize(self.path) if os.path.exists(self.path) else 0
        assert self._parquet is not None
        return self._parquet.parts()

    def truncate(self, position: Any) -> int:
        if self._jsonl is not None:
            if not os.path.exists(self.path):
                return 0
            with self._jsonl._locked() as fd:
                size = os.fstat(fd).st_size
                end = int(position or 0)
                if size <= end:
                    return 0
                groups, _ = _parse_groups(os.pread(fd, size - end, end), end)
                os.ftruncate(fd, end)
                removed = sum(len(lines) for _, _, lines in groups)
                return removed
        assert self._parquet is not None
        keep = set(position or [])
        removed = 0
        for part in self._parquet.parts():
            if part not in keep:
                removed += len(self._parquet.load(part))
                os.unlink(os.path.join(self.path, part))
        return removed

    def release(self) -> int:
        if self._jsonl is not None:
            self._jsonl.close()
        return 0


class FileReader(OfflineReader):
    """Reads a file storage batch-wise in write order; only complete batches are visible.

    Position (checkpointable): ``{"offset": byte offset of the current batch, "skip": records
    of it already read}`` for JSONL, ``{"part": part name, "skip": n}`` for parquet.
    """

    def __init__(self, storage_config: Any) -> None:
        self.format, self.path = resolve_file_path(storage_config)
        self._jsonl = JsonlFile(self.path) if self.format == "jsonl" else None
        self._parquet = ParquetDataset(self.path) if self.format == "parquet" else None
        self._groups: dict[int, tuple[int, list[bytes]]] = {}  # start -> (end, payloads)
        super().__init__(storage_config)

    def _start_position(self) -> dict[str, Any]:
        if self.format == "jsonl":
            return {"offset": 0, "skip": 0}
        return {"part": "", "skip": 0}

    def _jsonl_group(self, offset: int) -> Optional[tuple[int, list[bytes]]]:
        group = self._groups.get(offset)
        if group is None:
            assert self._jsonl is not None
            groups, _ = self._jsonl.read_groups(offset)
            self._groups = {start: (end, payloads) for start, end, payloads in groups}
            group = self._groups.get(offset)
        return group

    def _parquet_part(self, part: str) -> Optional[tuple[str, list[bytes]]]:
        """The part named ``part`` or, for ``""``/a finished name, the next one after it."""
        assert self._parquet is not None
        names = self._parquet.parts()
        if part in names:
            return part, self._parquet.load(part)
        later = [n for n in names if n > part]  # "": the first; "name~": the one after
        return (later[0], self._parquet.load(later[0])) if later else None

    def _fetch(self, position: Any, limit: int) -> tuple[list[Experience], dict[str, Any]]:
        pos = dict(position)
        out: list[bytes] = []
        while len(out) < limit:
            if self.format == "jsonl":
                group = self._jsonl_group(int(pos["offset"]))
                if group is None:
                    break
                end, payloads = group
            else:
                found = self._parquet_part(str(pos["part"]))
                if found is None:
                    break
                pos["part"], payloads = found
            skip = int(pos["skip"])
            take = payloads[skip : skip + limit - len(out)]
            out.extend(take)
            pos["skip"] = skip + len(take)
            if pos["skip"] >= len(payloads):
                if self.format == "jsonl":
                    pos = {"offset": end, "skip": 0}
                else:
                    # past this part: names are fixed-width, so "name~" sorts after it and
                    # before the next part, which may not exist yet
                    pos = {"part": pos["part"] + "~", "skip": 0}
        return [Experience.deserialize(b) for b in out], pos
