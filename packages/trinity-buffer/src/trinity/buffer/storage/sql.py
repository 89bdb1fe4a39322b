"""SQL experience storage (SQLAlchemy 2 Core).

``path`` is either a SQLAlchemy URL (``sqlite:///buffer.db``, ``postgresql://user@host/db``,
``mysql+pymysql://...``: anything SQLAlchemy has a dialect for) or a plain file path, which
means a SQLite file there (its directory is created). Each storage is one table named after
the storage (``StorageConfig.name``), so several buffers can share a database.

Row layout (table ``<name>``)::

    id            INTEGER PRIMARY KEY AUTOINCREMENT   -- read order and reader position
    exp_bytes     BLOB / BYTEA                        -- Experience.serialize() bytes
    eid           VARCHAR(255)                        -- EID uid, for inspection / joins
    model_version INTEGER NULL                        -- for staleness queries
    reward        FLOAT NULL
    created_at    FLOAT                               -- unix time of the write

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
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import (
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
    select,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from trinity.buffer.base import BufferWriter, OfflineReader
from trinity.buffer.storage.errors import StorageConfigError
from trinity.common.experience import Experience
from trinity.utils.log import get_logger

__all__ = ["SQLStorage", "SQLReader", "SQLWriter", "sql_url", "table_name"]

logger = get_logger(__name__)
T = TypeVar("T")

_ENGINES: dict[tuple[int, str], Engine] = {}
#: open storages per engine; the engine is closed when its last storage closes
_USERS: dict[tuple[int, str], int] = {}
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


def _engine(url: str, use: bool = False) -> Engine:
    """One engine per URL per process (engines hold pools; forked children need their own).
    ``use``: count one more open storage of it (see :func:`_release_engine`)."""
    key = (os.getpid(), url)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            parsed = make_url(url)
            kwargs: dict[str, Any] = {}
            if parsed.get_backend_name() == "sqlite":
                kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
            engine = create_engine(url, **kwargs)
            if _is_sqlite_file(url):
                event.listen(engine, "connect", _sqlite_pragmas)
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


class SQLStorage:
    """One experience table: insert batches transactionally, select in id order."""

    def __init__(self, storage_config: Any) -> None:
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
        self.metadata = MetaData()
        self.table = Table(
            table_name(getattr(storage_config, "name", "")),
            self.metadata,
            Column("id", Integer, primary_key=True, autoincrement=True),
            # a length makes MySQL use LONGBLOB (plain BLOB stops at 64 KiB); others ignore it
            Column("exp_bytes", LargeBinary(length=2**32 - 1), nullable=False),
            Column("eid", String(255)),
            Column("model_version", Integer, nullable=True),
            Column("reward", Float, nullable=True),
            Column("created_at", Float),
            sqlite_autoincrement=True,  # ids never reused, so a reader position stays valid
        )
        self._retry(lambda: self.metadata.create_all(self.engine, checkfirst=True))

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

    def insert(self, exps: Sequence[Experience]) -> None:
        """Insert ``exps`` in one transaction: all rows commit or none do."""
        if not exps:
            return
        now = time.time()
        rows = [
            {
                "exp_bytes": exp.serialize(),
                "eid": exp.eid.uid,
                "model_version": exp.model_version,
                "reward": exp.reward,
                "created_at": now,
            }
            for exp in exps
        ]

        def _do() -> None:
            with self.engine.begin() as conn:
                conn.execute(insert(self.table), rows)

        self._retry(_do)

    def select_after(self, last_id: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` committed rows with ``id > last_id``, in id order."""
        stmt = (
            select(self.table.c.id, self.table.c.exp_bytes)
            .where(self.table.c.id > last_id)
            .order_by(self.table.c.id)
            .limit(limit)
        )

        def _do() -> list[tuple[int, bytes]]:
            with self.engine.connect() as conn:
                return [(int(r[0]), bytes(r[1])) for r in conn.execute(stmt)]

        return self._retry(_do)

    def last_id(self) -> int:
        """The largest row id (0 for an empty table)."""

        def _do() -> int:
            with self.engine.connect() as conn:
                found = conn.execute(select(func.max(self.table.c.id))).scalar_one()
                return int(found or 0)

        return self._retry(_do)

    def delete_after(self, last_id: int) -> int:
        """Delete the rows with ``id > last_id`` in one transaction; returns how many."""

        def _do() -> int:
            with self.engine.begin() as conn:
                result = conn.execute(delete(self.table).where(self.table.c.id > last_id))
                return int(result.rowcount or 0)

        return self._retry(_do)

    def count(self) -> int:
        """Rows in the table."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(self.table)).scalar_one())


class SQLWriter(BufferWriter):
    """Writes experiences into a SQL table, one transaction per :meth:`write`."""

    def __init__(self, storage_config: Any) -> None:
        self.config = storage_config
        self.storage = SQLStorage(storage_config)

    def write(self, exps: Sequence[Experience]) -> None:
        self.storage.insert(list(exps))

    def position(self) -> int:
        return self.storage.last_id()

    def truncate(self, position: Any) -> int:
        return self.storage.delete_after(int(position or 0))

    def release(self) -> int:
        """Done writing: close the storage (see :meth:`SQLStorage.close`)."""
        self.storage.close()
        return 0


class SQLReader(OfflineReader):
    """Reads a SQL table in insertion order; position = last id read (checkpointable)."""

    def __init__(self, storage_config: Any) -> None:
        self.storage = SQLStorage(storage_config)
        super().__init__(storage_config)

    def _start_position(self) -> int:
        return 0

    def _fetch(self, position: Any, limit: int) -> tuple[list[Experience], int]:
        rows = self.storage.select_after(int(position), limit)
        if not rows:
            return [], int(position)
        return [Experience.deserialize(data) for _, data in rows], rows[-1][0]

    def close(self) -> None:
        """Done reading: close the storage (see :meth:`SQLStorage.close`)."""
        self.storage.close()
