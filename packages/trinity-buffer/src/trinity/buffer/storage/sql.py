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
"""

from __future__ import annotations

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


def _engine(url: str) -> Engine:
    """One engine per URL per process (engines hold pools; forked children need their own)."""
    key = (os.getpid(), url)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            parsed = make_url(url)
            kwargs: dict[str, Any] = {}
            if parsed.get_backend_name() == "sqlite":
                kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
            engine = create_engine(url, **kwargs)
            if parsed.get_backend_name() == "sqlite" and parsed.database not in (
                None,
                "",
                ":memory:",
            ):
                event.listen(engine, "connect", _sqlite_pragmas)
            _ENGINES[key] = engine
        return engine


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
        self.engine = _engine(self.url)
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
