"""SQL experience storage (SQLAlchemy 2 Core).

``path`` is either a SQLAlchemy URL (``sqlite:///buffer.db``, ``postgresql://user@host/db``,
``mysql+pymysql://...``: anything SQLAlchemy has a dialect for) or a plain file path, which
means a SQLite file there (its directory is created). Each storage is one table named after
the storage (``StorageConfig.name``), so several buffers can share a database.

A table holds experiences or tasks (Trinity-RFT's SQL task sets, ``storage_type: sql`` on a
task set). Experience rows (table ``<name>``)::

    id            INTEGER PRIMARY KEY AUTOINCREMENT   -- read order and reader position
    exp_bytes     BLOB / BYTEA                        -- Experience.serialize() bytes
    eid           VARCHAR(255)                        -- EID uid, for inspection / joins
    model_version INTEGER NULL                        -- for staleness queries
    reward        FLOAT NULL
    created_at    FLOAT                               -- unix time of the write

Task rows (the same ``id`` and ``created_at``, plus ``raw_task JSON``: the task set row as
written, e.g. ``{"question": ..., "answer": ...}``). Which kind a table is follows from what
was first written into it (Experiences, or dicts / :class:`~trinity.common.workflows.Task`
objects) and, for an existing table, from its columns; a reader of a task table returns
:class:`~trinity.common.workflows.Task` batches built as the task set reader builds them.

Crash safety: a write is one transaction (``engine.begin()``), so a writer killed mid-batch
leaves either the whole batch or none of it; SQLite runs in WAL mode so readers in other
processes see committed batches while a writer is active.

Where the database is opened: by the reader or writer itself (:class:`SQLStorage`), or, with
``wrap_in_ray`` set (the default) while Ray is initialized, by the storage's named Ray actor
``sql-<name>``, which owns the engine and runs each reader's and writer's statements
(:mod:`trinity.buffer.storage.sql_actor`); :func:`open_sql_storage` decides, as Trinity-RFT
0.6 does. Rows cross to the actor as plain values (experiences as their serialized bytes).

Closing: the storages of one URL in a process share one engine
(:mod:`~trinity.buffer.storage.sql_engine`). :meth:`SQLStorage.close` (called by
:meth:`SQLWriter.release` and :meth:`SQLReader.close`) lets go of it; when the last
storage of a SQLite file closes, the WAL is checkpointed into the database
(``PRAGMA wal_checkpoint(TRUNCATE)``) and the engine disposed, so SQLite removes its
``-wal`` and ``-shm`` side files and the database is one self-contained file again. Engines
still open when the process exits are closed the same way (``atexit``). A storage used after
it closed opens the engine again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from trinity.buffer.base import BufferWriter, EndOfStream, OfflineReader
from trinity.buffer.storage.errors import StorageConfigError
from trinity.buffer.storage.ray_actor import use_ray_actor
from trinity.buffer.storage.sql_engine import (  # noqa: F401  (_close_all_engines: at exit)
    _close_all_engines,
    _engine,
    _release_engine,
    sql_url,
)
from trinity.buffer.storage.sql_table import (
    EXPERIENCE_ROWS,
    TASK_ROWS,
    SQLStorage,
    rows_of,
    table_name,
)
from trinity.utils.log import get_logger

# Experience and the task rows' builder (torch) are imported where rows are encoded or decoded:
# the SQL actor (sql_actor.py) only stores and selects rows, and starts without torch.

__all__ = [
    "EXPERIENCE_ROWS",
    "TASK_ROWS",
    "SQLTaskStorage",
    "SQLStorage",
    "SQLReader",
    "SQLWriter",
    "open_sql_storage",
    "read_task_rows",
    "rows_of",
    "sql_url",
    "table_name",
]

logger = get_logger(__name__)


def open_sql_storage(
    storage_config: Any,
    use_ray: Optional[bool] = None,
    *,
    kind: Optional[str] = None,
    default_kind: str = EXPERIENCE_ROWS,
) -> Any:
    """The storage a reader or writer of ``storage_config`` uses: served by the named Ray actor
    ``sql-<name>`` (a :class:`~trinity.buffer.storage.sql_actor.SQLActorStorage`, with the
    methods of :class:`SQLStorage`) when
    :func:`~trinity.buffer.storage.ray_actor.use_ray_actor` says so (``use_ray``, else
    ``wrap_in_ray`` while Ray is initialized), else a :class:`SQLStorage` in this process.
    ``kind`` / ``default_kind``: as for :class:`SQLStorage`."""
    if use_ray_actor(storage_config, use_ray):
        from trinity.buffer.storage.sql_actor import SQLActorStorage

        return SQLActorStorage(storage_config, kind=kind, default_kind=default_kind)
    return SQLStorage(storage_config, kind=kind, default_kind=default_kind)


class SQLWriter(BufferWriter):
    """Writes experiences, or task rows (dicts / Tasks), into a SQL table, one transaction
    per :meth:`write`. ``use_ray``: where the database is opened (:func:`open_sql_storage`;
    ``None``: the storage's named Ray actor while Ray is up and ``wrap_in_ray`` is set)."""

    def __init__(self, storage_config: Any, use_ray: Optional[bool] = None) -> None:
        self.config = storage_config
        self.storage = open_sql_storage(storage_config, use_ray)

    def write(self, items: Sequence[Any]) -> None:
        self.storage.insert(list(items))

    def position(self) -> int:
        return self.storage.last_id()

    def truncate(self, position: Any) -> int:
        return self.storage.delete_after(int(position or 0))

    def release(self) -> int:
        """Done writing: close the storage (see :meth:`SQLStorage.close`)."""
        self.storage.close()
        return 0


def _experiences(rows: Sequence[tuple[int, bytes]]) -> list[Any]:
    """The experiences of ``(id, bytes)`` rows. ``eid.task`` comes back as a string, as
    Trinity-RFT 0.6's SQL storage returns it (its table keeps the task id as text); ``uid``,
    ``sid`` and grouping are unchanged by it."""
    from trinity.common.experience import Experience

    out = []
    for _, data in rows:
        exp = Experience.deserialize(data)
        exp.eid.task = str(exp.eid.task)
        out.append(exp)
    return out


def _reader_kind(storage_config: Any) -> str:
    """What a reader of a table that does not exist yet should expect: task rows for a task
    set (a workflow to run them, no experience schema), else experiences."""
    if getattr(storage_config, "schema_type", None) is None and getattr(
        storage_config, "default_workflow_type", None
    ):
        return TASK_ROWS
    return EXPERIENCE_ROWS


class SQLReader(OfflineReader):
    """Reads a SQL table in insertion order; position = last id read (checkpointable).

    With ``replay_buffer.enable`` a reader of experiences reads as Trinity-RFT 0.6's SQL
    storage does: each read takes the ``batch_size`` rows read least often, newest first among
    equals, and counts the read in the table (its ``consumed`` column), so rows come back
    once every row has been read as often; a table holding fewer than ``batch_size`` rows
    ends the read (or waits for a live writer). The counts live in the database, so they
    survive a restart and are shared by every reader of the table; a read is counted when it
    is made (a run resumed from an earlier checkpoint does not roll the counts back).

    A table of experiences gives Experience batches. A table of task rows gives
    :class:`~trinity.common.workflows.Task` batches built from the storage's task set settings
    (workflow, reward function, format, rollout arguments), as Trinity-RFT's SQL task reader
    does; a train task set (``is_eval`` unset) drops a final batch short of ``batch_size``,
    as every train task set does. A read that finds the table exhausted lets go of the
    database (:meth:`close`) before it ends; a later read opens it again. ``use_ray``: as for
    :class:`SQLWriter`.
    """

    def __init__(self, storage_config: Any, use_ray: Optional[bool] = None) -> None:
        self.storage = open_sql_storage(
            storage_config, use_ray, default_kind=_reader_kind(storage_config)
        )
        super().__init__(storage_config)
        replay = getattr(storage_config, "replay_buffer", None)
        self.replay = bool(getattr(replay, "enable", False))
        self._first_writer_logged = False
        if self.storage.kind == TASK_ROWS:
            if self.replay:
                raise StorageConfigError(
                    f"storage {self.name!r}: replay_buffer.enable reads experiences again; "
                    f"table {self.storage.table_name!r} holds task rows (allowed: "
                    "replay_buffer.enable: false for a task set)"
                )
            # a task set's saved read position (``index``), as a file task set honours it
            self.position = int(getattr(storage_config, "index", 0) or 0)

    def _start_position(self) -> int:
        return 0

    def _fetch(self, position: Any, limit: int) -> tuple[list[Any], int]:
        rows = self.storage.select_after(int(position), limit)
        if not rows:
            return [], int(position)
        if self.storage.kind == TASK_ROWS:
            from trinity.buffer.task_rows import row_to_task

            items = [row_to_task(row, row_id - 1, self.config) for row_id, row in rows]
            return items, rows[-1][0]
        return _experiences(rows), rows[-1][0]

    def _read(self, batch_size: int) -> list[Any]:
        if self.replay and self.storage.kind != TASK_ROWS:
            return self._read_replay(batch_size)
        try:
            items = super()._read(batch_size)
        except EndOfStream:
            items = []
        short = len(items) < batch_size
        if short and self.storage.kind != TASK_ROWS:
            items += self._wait_for_live_writer(batch_size - len(items))
        short = len(items) < batch_size
        if not items or (
            short and self.storage.kind == TASK_ROWS and not getattr(self.config, "is_eval", False)
        ):
            # exhausted: let go of the database (a SQL actor's too), as close() does; a later
            # read opens it again
            self.close()
            raise EndOfStream
        return items

    def _read_replay(self, batch_size: int) -> list[Any]:
        """One replay batch (see the class docstring); waits for more rows only while a
        writer marks the table live, up to ``max_read_timeout`` seconds."""
        timeout = float(getattr(self.config, "max_read_timeout", 1800) or 1800)
        start = time.monotonic()
        while True:
            rows = self.storage.select_least_read(batch_size)
            if rows:
                self.consumed += len(rows)
                return _experiences(rows)
            if time.monotonic() - start > timeout or not self.storage.live_writers(timeout):
                self.close()
                raise EndOfStream
            time.sleep(0.5)

    def _wait_for_live_writer(self, missing: int) -> list[Any]:
        """While another process marks this table as being written (a
        :class:`~trinity.buffer.storage.sql_live.LiveWriterMark`: mode ``serve``), wait for
        ``missing`` more experiences; give up after ``max_read_timeout`` seconds without a new
        row, or once no writer is left (then the read returns what there is, or ends)."""
        timeout = float(getattr(self.config, "max_read_timeout", 1800) or 1800)
        out: list[Any] = []
        last_progress = time.monotonic()
        warned = False
        while len(out) < missing:
            if not self.storage.live_writers(timeout) and not self._awaits_first_writer(
                time.monotonic() - last_progress, timeout
            ):
                # the writer is gone: take what it wrote last, then stop
                more, self.position = self._fetch(self.position, missing - len(out))
                self.consumed += len(more)
                return out + more
            more, self.position = self._fetch(self.position, missing - len(out))
            if more:
                out += more
                self.consumed += len(more)
                last_progress = time.monotonic()
                continue
            waited = time.monotonic() - last_progress
            if waited > timeout:
                logger.warning(
                    "storage %r: no new experience for %.0f s (max_read_timeout) while a "
                    "writer is marked live; the read ends with %d of %d",
                    self.name,
                    waited,
                    len(out),
                    missing,
                )
                return out
            if waited > 60 and not warned:
                warned = True
                logger.info(
                    "storage %r: waiting for %d more experiences from its live writer",
                    self.name,
                    missing - len(out),
                )
            time.sleep(0.5)
        return out

    def _awaits_first_writer(self, waited: float, timeout: float) -> bool:
        """Whether a read with no live writer still waits: only a reader that has read
        nothing from a table that is still empty, for at most ``max_read_timeout`` seconds.
        A trainer started before the service that writes its table (mode ``serve``, started
        in another terminal a moment later) would otherwise find it exhausted and end with
        no step trained; a table with rows and no writer stays a finished data set."""
        if self.consumed or self.position or waited > timeout or self.storage.count():
            return False
        if not self._first_writer_logged:
            self._first_writer_logged = True
            logger.info(
                "storage %r: table %r is empty and no writer marks it live yet; waiting up "
                "to %.0f s (max_read_timeout) for one (mode serve, an explorer job)",
                self.name,
                self.storage.table_name,
                timeout,
            )
        return True

    def close(self) -> None:
        """Done reading: close the storage (see :meth:`SQLStorage.close`)."""
        self.storage.close()


class SQLTaskStorage:
    """Trinity-RFT's name of a SQL table of task rows, for loading a data set into one:
    ``SQLTaskStorage.load_from_dataset(dataset, taskset_config)`` writes every row (in batches
    of ``batch_size``) into the table ``name`` of the database ``path``; a reader of that task
    set (``get_buffer_reader``) then reads them as tasks. Reading and writing otherwise go
    through :class:`SQLReader` / :class:`SQLWriter`."""

    def __init__(self, storage_config: Any) -> None:
        self.config = storage_config
        self.storage = SQLStorage(storage_config, kind=TASK_ROWS)

    def write(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append task rows (dicts) in one transaction."""
        self.storage.insert([dict(row) for row in rows])

    def close(self) -> None:
        self.storage.close()

    @classmethod
    def load_from_dataset(cls, dataset: Any, storage_config: Any) -> SQLTaskStorage:
        """Write the rows of ``dataset`` (any iterable of dicts, e.g. a ``datasets.Dataset``)
        into the task table; returns the storage."""
        storage = cls(storage_config)
        size = int(getattr(storage_config, "batch_size", 0) or 0) or 1000
        batch: list[Mapping[str, Any]] = []
        for row in dataset:
            batch.append(row)
            if len(batch) >= size:
                storage.write(batch)
                batch = []
        storage.write(batch)
        return storage


def read_task_rows(storage_config: Any) -> list[dict[str, Any]]:
    """Every task row of a SQL task table, in write order (a task set's ``path`` is the
    database and its ``name`` the table; read as :func:`open_sql_storage` says); an experience
    table is an error naming it."""
    storage = open_sql_storage(storage_config)
    try:
        if storage.kind != TASK_ROWS:
            found = "no table" if storage.kind is None else "a table of experiences"
            raise StorageConfigError(
                f"task set {storage.name!r}: {storage.url} has {found} named "
                f"{storage.table_name!r}; write the task rows first (get_buffer_writer with "
                "this task set's config, then writer.write([{...}, ...]))"
            )
        return [row for _, row in storage.select_after(0, None)]
    finally:
        storage.close()
