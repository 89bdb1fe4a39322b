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

Closing: the storages of one URL in a process share one engine. :meth:`SQLStorage.close`
(called by :meth:`SQLWriter.release` and :meth:`SQLReader.close`) lets go of it; when the last
storage of a SQLite file closes, the WAL is checkpointed into the database
(``PRAGMA wal_checkpoint(TRUNCATE)``) and the engine disposed, so SQLite removes its
``-wal`` and ``-shm`` side files and the database is one self-contained file again. Engines
still open when the process exits are closed the same way (``atexit``). A storage used after
it closed opens the engine again.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, TypeVar

from sqlalchemy import (
    JSON,
    Column,
    Engine,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    select,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from trinity.buffer.base import BufferWriter, EndOfStream, OfflineReader
from trinity.buffer.storage.errors import StorageConfigError
from trinity.buffer.task_rows import row_to_task
from trinity.common.experience import Experience
from trinity.utils.log import get_logger

__all__ = [
    "EXPERIENCE_ROWS",
    "TASK_ROWS",
    "SQLTaskStorage",
    "SQLStorage",
    "SQLReader",
    "SQLWriter",
    "read_task_rows",
    "sql_url",
    "table_name",
]

logger = get_logger(__name__)
T = TypeVar("T")

#: The two kinds of table (:attr:`SQLStorage.kind`).
EXPERIENCE_ROWS = "experience"
TASK_ROWS = "task"

_ENGINES: dict[tuple[int, str], Engine] = {}
#: open storages per engine; the engine is closed when its last storage closes
_USERS: dict[tuple[int, str], int] = {}
#: the database file each SQLite engine was last seen using (see :func:`_engine`)
_FILES: dict[tuple[int, str], Optional[tuple[int, int]]] = {}
_ENGINES_LOCK = threading.Lock()


def sql_url(path: str) -> str:
    """A SQLAlchemy URL for ``path``: URLs pass through, anything else is a SQLite file."""
    if not path:
        raise StorageConfigError("sql storage needs `path` (a database URL or a SQLite file)")
    if "://" in path:
        try:
            url = make_url(path)
        except Exception as exc:  # noqa: BLE001 - re-raised with the field named
            raise StorageConfigError(f"`path` {path!r} is not a valid database URL: {exc}") from exc
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            # like the plain-path form, create the database file's directory
            os.makedirs(os.path.dirname(os.path.abspath(url.database)), exist_ok=True)
        return path
    path = os.path.abspath(os.path.expanduser(path))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return f"sqlite:///{path}"


def table_name(storage_name: str) -> str:
    """A safe table name for a storage name (SQL identifiers cannot hold every character)."""
    name = re.sub(r"[^0-9A-Za-z_]", "_", storage_name or "experience_buffer")
    return name if not name[0].isdigit() else f"t_{name}"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL: readers do not block the writer and see only committed transactions; NORMAL sync
    # is still atomic against a killed process (only power loss can drop the last commit).
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def _is_sqlite_file(url: str) -> bool:
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:")


def _file_identity(url: str) -> Optional[tuple[int, int]]:
    """``(device, inode)`` of a SQLite URL's database file, ``None`` while it does not exist."""
    try:
        st = os.stat(make_url(url).database or "")
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _engine(url: str, use: bool = False) -> Engine:
    """One engine per URL per process (engines hold pools; forked children need their own).
    ``use``: count one more open storage of it (see :func:`_release_engine`).

    A SQLite file deleted (or replaced) since its engine connected is opened afresh: the
    pooled connections still hold the old file, so they are closed and new ones open the
    file now at that path."""
    key = (os.getpid(), url)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is not None and _is_sqlite_file(url):
            now = _file_identity(url)
            known = _FILES.get(key)
            if known is not None and now != known:
                engine.dispose()
            _FILES[key] = now
        if engine is None:
            parsed = make_url(url)
            kwargs: dict[str, Any] = {}
            if parsed.get_backend_name() == "sqlite":
                kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
            engine = create_engine(url, **kwargs)
            if _is_sqlite_file(url):
                event.listen(engine, "connect", _sqlite_pragmas)
                _FILES[key] = _file_identity(url)

                def _remember_file(_conn: Any, _record: Any, key: Any = key) -> None:
                    # the file this connection opened (SQLite creates it on first connect)
                    _FILES[key] = _file_identity(key[1])

                event.listen(engine, "connect", _remember_file)
            _ENGINES[key] = engine
        if use:
            _USERS[key] = _USERS.get(key, 0) + 1
        return engine


def _close_engine(url: str, engine: Engine) -> None:
    """Checkpoint a SQLite file's WAL into the database, then close the engine's connections:
    the last connection to close makes SQLite delete the ``-wal`` and ``-shm`` files."""
    try:
        if _is_sqlite_file(url):
            with engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    except Exception as exc:  # noqa: BLE001 - closing must not fail a run that is ending
        logger.debug("WAL checkpoint of %s failed: %s", url, exc)
    finally:
        engine.dispose()


def _release_engine(url: str) -> None:
    """One storage of ``url`` closed; the last one closes the engine (see :func:`_close_engine`)."""
    key = (os.getpid(), url)
    with _ENGINES_LOCK:
        users = _USERS.get(key, 0) - 1
        if users > 0:
            _USERS[key] = users
            return
        _USERS.pop(key, None)
        _FILES.pop(key, None)
        engine = _ENGINES.pop(key, None)
    if engine is not None:
        _close_engine(url, engine)


@atexit.register
def _close_all_engines() -> None:
    """Close this process's engines still open at exit (readers that were never closed)."""
    pid = os.getpid()
    with _ENGINES_LOCK:
        mine = [(key, engine) for key, engine in _ENGINES.items() if key[0] == pid]
        for key, _ in mine:
            _ENGINES.pop(key, None)
            _USERS.pop(key, None)
    for (_, url), engine in mine:
        _close_engine(url, engine)


def _table(metadata: MetaData, name: str, kind: str) -> Table:
    """The table layout of ``kind`` (see the module docstring)."""
    if kind == TASK_ROWS:
        payload = [Column("raw_task", JSON, nullable=False)]
    else:
        payload = [
            # a length makes MySQL use LONGBLOB (plain BLOB stops at 64 KiB); others ignore it
            Column("exp_bytes", LargeBinary(length=2**32 - 1), nullable=False),
            Column("eid", String(255)),
            Column("model_version", Integer, nullable=True),
            Column("reward", Float, nullable=True),
        ]
    return Table(
        name,
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        *payload,
        Column("created_at", Float),
        sqlite_autoincrement=True,  # ids never reused, so a reader position stays valid
    )


def _kind_of_items(items: Sequence[Any]) -> str:
    """``experience`` for Experiences, ``task`` for task rows (dicts or Tasks); mixed or other
    items are a ``TypeError`` naming what was found."""
    if all(isinstance(item, Experience) for item in items):
        return EXPERIENCE_ROWS
    if all(isinstance(item, Mapping) or hasattr(item, "raw_task") for item in items):
        return TASK_ROWS
    kinds = sorted({type(item).__name__ for item in items})
    raise TypeError(
        f"a SQL storage holds Experiences or task rows (dicts / Task objects), one kind per "
        f"table; got {', '.join(kinds)}"
    )


def _task_row(item: Any) -> dict[str, Any]:
    row = item if isinstance(item, Mapping) else (item.raw_task or {})
    return dict(row)


class SQLStorage:
    """One table of experiences or task rows: insert batches transactionally, select in id
    order.

    Args:
        storage_config: the storage (``name`` is the table, ``path`` the database).
        kind: ``"experience"`` or ``"task"`` when the caller needs that kind (another kind of
            existing table is an error); ``None`` takes the kind of the existing table, or
            decides at the first :meth:`insert` from what is written.
        default_kind: the kind a reader expects when no table exists yet (it reads an empty
            table of that kind until a writer creates one).
    """

    def __init__(
        self,
        storage_config: Any,
        kind: Optional[str] = None,
        default_kind: str = EXPERIENCE_ROWS,
    ) -> None:
        name = getattr(storage_config, "name", "") or "<unnamed>"
        path = getattr(storage_config, "path", None)
        if not path:
            raise StorageConfigError(
                f"storage {name!r}: storage_type 'sql' needs `path` (a database URL or a "
                "SQLite file path)"
            )
        self.name = name
        self.url = sql_url(path)
        self.max_retry_times = int(getattr(storage_config, "max_retry_times", 3))
        self.max_retry_interval = float(getattr(storage_config, "max_retry_interval", 1))
        self._engine: Engine | None = _engine(self.url, use=True)
        self.table_name = table_name(getattr(storage_config, "name", ""))
        self.metadata = MetaData()
        self._table: Optional[Table] = None
        self.default_kind = default_kind
        existing = self._existing_kind()
        if existing is not None and kind is not None and existing != kind:
            raise StorageConfigError(
                f"storage {name!r}: table {self.table_name!r} in {self.url} holds "
                f"{existing} rows, not {kind} rows; use another storage name"
            )
        self.kind: Optional[str] = existing or kind
        if self.kind is not None:
            self._create(self.kind)

    def _existing_kind(self) -> Optional[str]:
        """The kind of the table already in the database, or ``None`` when there is none."""

        def _do() -> Optional[str]:
            inspector = inspect(self.engine)
            if not inspector.has_table(self.table_name):
                return None
            columns = {column["name"] for column in inspector.get_columns(self.table_name)}
            return TASK_ROWS if "raw_task" in columns else EXPERIENCE_ROWS

        return self._retry(_do)

    def _create(self, kind: str) -> None:
        self.kind = kind
        self._table = _table(self.metadata, self.table_name, kind)
        self._retry(lambda: self.metadata.create_all(self.engine, checkfirst=True))

    @property
    def table(self) -> Table:
        """The table: of the kind a writer has created by now, else of ``default_kind``."""
        if self._table is None:
            self._create(self._existing_kind() or self.default_kind)
        return self._table  # type: ignore[return-value]

    def _undecided(self) -> bool:
        """No table yet, here or in the database (a writer elsewhere may have made one)."""
        return self._table is None and self._existing_kind() is None

    @property
    def engine(self) -> Engine:
        """The shared engine of this storage's URL (opened again after :meth:`close`)."""
        engine = self._engine
        if engine is None:
            engine = self._engine = _engine(self.url, use=True)
        return engine

    def close(self) -> None:
        """Let go of the engine; the last storage of a SQLite file to close checkpoints its
        WAL and closes every connection, so the ``-wal`` / ``-shm`` files go. Idempotent."""
        if self._engine is not None:
            self._engine = None
            _release_engine(self.url)

    def _retry(self, fn: Callable[[], T]) -> T:
        """Retry transient failures (a locked SQLite file, a dropped connection)."""
        for attempt in range(self.max_retry_times + 1):
            try:
                return fn()
            except OperationalError as exc:
                if attempt >= self.max_retry_times:
                    raise
                logger.warning(
                    "storage %r: SQL operation failed (%s), retry %d/%d",
                    self.name,
                    exc.orig,
                    attempt + 1,
                    self.max_retry_times,
                )
                time.sleep(self.max_retry_interval)
        raise AssertionError("unreachable")

    def insert(self, items: Sequence[Any]) -> None:
        """Insert Experiences or task rows (dicts / Tasks) in one transaction: all rows commit
        or none do. The first insert into a new table decides its kind."""
        if not items:
            return
        kind = _kind_of_items(items)
        if self.kind is None:
            self._create(kind)
        elif kind != self.kind:
            raise TypeError(
                f"storage {self.name!r}: table {self.table_name!r} holds {self.kind} rows; "
                f"cannot write {kind} rows into it"
            )
        now = time.time()
        if kind == TASK_ROWS:
            rows = [{"raw_task": _task_row(item), "created_at": now} for item in items]
        else:
            rows = [
                {
                    "exp_bytes": exp.serialize(),
                    "eid": exp.eid.uid,
                    "model_version": exp.model_version,
                    "reward": exp.reward,
                    "created_at": now,
                }
                for exp in items
            ]

        def _do() -> None:
            with self.engine.begin() as conn:
                conn.execute(insert(self.table), rows)

        self._retry(_do)

    def select_after(self, last_id: int, limit: Optional[int]) -> list[tuple[int, Any]]:
        """Up to ``limit`` (``None``: all) committed rows with ``id > last_id``, in id order:
        ``(id, experience bytes)`` or ``(id, task row dict)``."""
        table = self.table
        payload = table.c.raw_task if self.kind == TASK_ROWS else table.c.exp_bytes
        stmt = select(table.c.id, payload).where(table.c.id > last_id).order_by(table.c.id)
        if limit is not None:
            stmt = stmt.limit(limit)
        decode = dict if self.kind == TASK_ROWS else bytes

        def _do() -> list[tuple[int, Any]]:
            with self.engine.connect() as conn:
                return [(int(r[0]), decode(r[1])) for r in conn.execute(stmt)]

        return self._retry(_do)

    def last_id(self) -> int:
        """The largest row id (0 for an empty table, or none yet)."""
        if self._undecided():
            return 0

        def _do() -> int:
            with self.engine.connect() as conn:
                found = conn.execute(select(func.max(self.table.c.id))).scalar_one()
                return int(found or 0)

        return self._retry(_do)

    def delete_after(self, last_id: int) -> int:
        """Delete the rows with ``id > last_id`` in one transaction; returns how many."""
        if self._undecided():
            return 0

        def _do() -> int:
            with self.engine.begin() as conn:
                result = conn.execute(delete(self.table).where(self.table.c.id > last_id))
                return int(result.rowcount or 0)

        return self._retry(_do)

    def count(self) -> int:
        """Rows in the table."""
        if self._undecided():
            return 0
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(self.table)).scalar_one())


class SQLWriter(BufferWriter):
    """Writes experiences, or task rows (dicts / Tasks), into a SQL table, one transaction
    per :meth:`write`."""

    def __init__(self, storage_config: Any) -> None:
        self.config = storage_config
        self.storage = SQLStorage(storage_config)

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

    A table of experiences gives Experience batches. A table of task rows gives
    :class:`~trinity.common.workflows.Task` batches built from the storage's task set settings
    (workflow, reward function, format, rollout arguments), as Trinity-RFT's SQL task reader
    does; a train task set (``is_eval`` unset) drops a final batch short of ``batch_size``,
    as every train task set does.
    """

    def __init__(self, storage_config: Any) -> None:
        self.storage = SQLStorage(storage_config, default_kind=_reader_kind(storage_config))
        super().__init__(storage_config)
        if self.storage.kind == TASK_ROWS:
            # a task set's saved read position (``index``), as a file task set honours it
            self.position = int(getattr(storage_config, "index", 0) or 0)

    def _start_position(self) -> int:
        return 0

    def _fetch(self, position: Any, limit: int) -> tuple[list[Any], int]:
        rows = self.storage.select_after(int(position), limit)
        if not rows:
            return [], int(position)
        if self.storage.kind == TASK_ROWS:
            items = [row_to_task(row, row_id - 1, self.config) for row_id, row in rows]
            return items, rows[-1][0]
        return [Experience.deserialize(data) for _, data in rows], rows[-1][0]

    def _read(self, batch_size: int) -> list[Any]:
        try:
            items = super()._read(batch_size)
        except EndOfStream:
            items = []
        short = len(items) < batch_size
        if short and self.storage.kind != TASK_ROWS:
            items += self._wait_for_live_writer(batch_size - len(items))
        if not items:
            raise EndOfStream
        short = len(items) < batch_size
        if short and self.storage.kind == TASK_ROWS and not getattr(self.config, "is_eval", False):
            raise EndOfStream
        return items

    def _wait_for_live_writer(self, missing: int) -> list[Any]:
        """While another process marks this table as being written (a
        :class:`~trinity.buffer.storage.sql_live.LiveWriterMark`: mode ``serve``), wait for
        ``missing`` more experiences; give up after ``max_read_timeout`` seconds without a new
        row, or once no writer is left (then the read returns what there is, or ends)."""
        from trinity.buffer.storage.sql_live import live_writers

        timeout = float(getattr(self.config, "max_read_timeout", 1800) or 1800)
        out: list[Any] = []
        last_progress = time.monotonic()
        warned = False
        while len(out) < missing:
            if not live_writers(self.storage, max_age=timeout):
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
    database and its ``name`` the table); an experience table is an error naming it."""
    storage = SQLStorage(storage_config)
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
