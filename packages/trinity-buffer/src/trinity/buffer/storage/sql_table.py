"""The SQL table of one storage (:class:`SQLStorage`) and its rows: what a reader or writer
in this process, or the storage's Ray actor (:mod:`trinity.buffer.storage.sql_actor`), runs
against the database. The readers and writers, and where the database is opened, are
:mod:`trinity.buffer.storage.sql` (see it for the table layout and closing)."""

from __future__ import annotations

import re
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
    delete,
    func,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.exc import OperationalError

from trinity.buffer.storage.errors import StorageConfigError
from trinity.buffer.storage.sql_engine import (  # noqa: F401  (_close_all_engines: at exit)
    _close_all_engines,
    _engine,
    _release_engine,
    sql_url,
)
from trinity.utils.log import get_logger

# Experience and the task rows' builder (torch) are imported where rows are encoded or decoded:
# the SQL actor (sql_actor.py) only stores and selects rows, and starts without torch.

__all__ = ["EXPERIENCE_ROWS", "TASK_ROWS", "SQLStorage", "rows_of", "table_name"]

logger = get_logger(__name__)
T = TypeVar("T")

#: The two kinds of table (:attr:`SQLStorage.kind`).
EXPERIENCE_ROWS = "experience"
TASK_ROWS = "task"


def table_name(storage_name: str) -> str:
    """A safe table name for a storage name (SQL identifiers cannot hold every character)."""
    name = re.sub(r"[^0-9A-Za-z_]", "_", storage_name or "experience_buffer")
    return name if not name[0].isdigit() else f"t_{name}"


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
            # how often a replay reader has read the row (replay_buffer.enable; 0.6's column)
            Column("consumed", Integer, nullable=False, server_default="0"),
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
    from trinity.common.experience import Experience

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


def rows_of(items: Sequence[Any]) -> tuple[str, list[dict[str, Any]]]:
    """The kind of ``items`` (Experiences, or task rows: dicts / Tasks) and the table rows
    :meth:`SQLStorage.insert_rows` inserts for them (plain values: an experience as its
    ``serialize()`` bytes)."""
    kind = _kind_of_items(items)
    now = time.time()
    if kind == TASK_ROWS:
        return kind, [{"raw_task": _task_row(item), "created_at": now} for item in items]
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
    return kind, rows


def sql_name_and_path(storage_config: Any) -> tuple[str, str]:
    """A SQL storage's display name and its ``path``, refusing a storage without one."""
    name = getattr(storage_config, "name", "") or "<unnamed>"
    path = getattr(storage_config, "path", None)
    if not path:
        raise StorageConfigError(
            f"storage {name!r}: storage_type 'sql' needs `path` (a database URL or a "
            "SQLite file path)"
        )
    return name, path


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
        name, path = sql_name_and_path(storage_config)
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
            if "raw_task" in columns:
                return TASK_ROWS
            if "consumed" not in columns:
                # an experience table written before replay reads existed: add the column
                # (every row read 0 times), so replay reads and inserts see one layout
                quoted = self.engine.dialect.identifier_preparer.quote(self.table_name)
                with self.engine.begin() as conn:
                    conn.execute(
                        text(f"ALTER TABLE {quoted} ADD COLUMN consumed INTEGER NOT NULL DEFAULT 0")
                    )
            return EXPERIENCE_ROWS

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
        if items:
            self.insert_rows(*rows_of(items))

    def insert_rows(self, kind: str, rows: list[dict[str, Any]]) -> str:
        """Insert rows made by :func:`rows_of` in one transaction (the first insert into a new
        table decides its kind); returns the table's kind."""
        if self.kind is None:
            self._create(kind)
        elif kind != self.kind:
            raise TypeError(
                f"storage {self.name!r}: table {self.table_name!r} holds {self.kind} rows; "
                f"cannot write {kind} rows into it"
            )
        if rows:

            def _do() -> None:
                with self.engine.begin() as conn:
                    conn.execute(insert(self.table), rows)

            self._retry(_do)
        return kind

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

    def select_least_read(self, limit: int) -> list[tuple[int, bytes]]:
        """A replay read (Trinity-RFT 0.6's order): the ``limit`` experience rows read least
        often, newest first among equals, as ``(id, experience bytes)``; each row returned
        has its read count raised by one in the same transaction. Fewer rows than ``limit``
        in the table: ``[]`` and nothing counted (a replay batch is whole or not at all)."""
        if self._undecided():
            return []
        table = self.table
        stmt = (
            select(table.c.id, table.c.exp_bytes)
            .order_by(table.c.consumed.asc(), table.c.id.desc())
            .limit(limit)
        )
        if self.engine.dialect.name != "sqlite":
            stmt = stmt.with_for_update()

        def _do() -> list[tuple[int, bytes]]:
            with self.engine.begin() as conn:
                rows = [(int(r[0]), bytes(r[1])) for r in conn.execute(stmt)]
                if len(rows) < limit:
                    return []
                ids = [row_id for row_id, _ in rows]
                conn.execute(
                    update(table).where(table.c.id.in_(ids)).values(consumed=table.c.consumed + 1)
                )
                return rows

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

    # the marks of writers in other processes (sql_live.py; the SQL actor runs these too)
    def live_writers(self, max_age: float) -> int:
        """Writers marking this table as being written, refreshed within ``max_age`` s."""
        from trinity.buffer.storage import sql_live

        return sql_live.live_writers(self, max_age)

    def add_live_mark(self, writer: str) -> None:
        from trinity.buffer.storage import sql_live

        sql_live.add_mark(self, writer)

    def beat_live_mark(self, writer: str) -> None:
        from trinity.buffer.storage import sql_live

        sql_live.beat_mark(self, writer)

    def remove_live_mark(self, writer: str) -> None:
        from trinity.buffer.storage import sql_live

        sql_live.remove_mark(self, writer)
