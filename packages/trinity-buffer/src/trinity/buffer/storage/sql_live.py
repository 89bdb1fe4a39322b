"""Which SQL experience tables a writer in another process is still filling.

A SQL table read in mode ``train`` is normally a finished data set: a read that finds it
exhausted ends the run. When another process is writing it as the trainer reads (mode
``serve`` committing live traffic, Trinity-RFT's explorer and trainer jobs), the reader must
wait for new rows instead. That writer says so with a :class:`LiveWriterMark` (one row of the
``trinity_live_writers`` table in the same database, refreshed by :meth:`LiveWriterMark.beat`
and removed by :meth:`LiveWriterMark.close`); :func:`live_writers` counts the marks of a table
refreshed within ``max_age`` seconds, so a writer that died without closing stops counting
once its mark is that old.

The functions here run where the database is open: in this process for a
:class:`~trinity.buffer.storage.sql_table.SQLStorage`, in the SQL actor for a storage it serves
(``SQLStorage.live_writers`` and the ``*_live_mark`` methods call them).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from sqlalchemy import Column, Float, MetaData, String, Table, delete, func, insert, select, update

if TYPE_CHECKING:  # sql.py's reader imports this module: no import back at run time
    from trinity.buffer.storage.sql_table import SQLStorage

LIVE_TABLE = "trinity_live_writers"


def _live_table(metadata: MetaData) -> Table:
    return Table(
        LIVE_TABLE,
        metadata,
        Column("writer", String(64), primary_key=True),
        Column("table_name", String(255), index=True),
        Column("updated_at", Float),
    )


def add_mark(storage: SQLStorage, writer: str) -> None:
    """Mark ``storage``'s table as being written by ``writer`` (creates the marks table)."""
    table = _live_table(MetaData())
    storage._retry(lambda: table.metadata.create_all(storage.engine))

    def _do() -> None:
        with storage.engine.begin() as conn:
            conn.execute(
                insert(table).values(
                    writer=writer, table_name=storage.table_name, updated_at=time.time()
                )
            )

    storage._retry(_do)


def beat_mark(storage: SQLStorage, writer: str) -> None:
    """Refresh ``writer``'s mark (it is alive)."""
    table = _live_table(MetaData())

    def _do() -> None:
        with storage.engine.begin() as conn:
            conn.execute(
                update(table).where(table.c.writer == writer).values(updated_at=time.time())
            )

    storage._retry(_do)


def remove_mark(storage: SQLStorage, writer: str) -> None:
    """Remove ``writer``'s mark."""
    table = _live_table(MetaData())

    def _do() -> None:
        with storage.engine.begin() as conn:
            conn.execute(delete(table).where(table.c.writer == writer))

    storage._retry(_do)


class LiveWriterMark:
    """Marks ``storage``'s table as being written by this process until closed; closing closes
    the storage. ``storage``: a :class:`~trinity.buffer.storage.sql_table.SQLStorage`, or the
    storage a reader or writer gets from
    :func:`~trinity.buffer.storage.sql.open_sql_storage` (the SQL actor's then writes the
    mark)."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage
        self.writer = uuid.uuid4().hex
        storage.add_live_mark(self.writer)
        self.closed = False

    def beat(self) -> None:
        """Refresh the mark (the writer is alive)."""
        self.storage.beat_live_mark(self.writer)

    def close(self) -> None:
        """Remove the mark: readers waiting for rows stop once they have read the rest."""
        if self.closed:
            return
        self.closed = True
        try:
            self.storage.remove_live_mark(self.writer)
        finally:
            self.storage.close()


def live_writers(storage: SQLStorage, max_age: float) -> int:
    """Writers marking ``storage``'s table, refreshed within the last ``max_age`` seconds."""
    metadata = MetaData()
    table = _live_table(metadata)

    def _do() -> int:
        from sqlalchemy import inspect

        if not inspect(storage.engine).has_table(LIVE_TABLE):
            return 0
        with storage.engine.connect() as conn:
            stmt = (
                select(func.count())
                .select_from(table)
                .where(table.c.table_name == storage.table_name)
                .where(table.c.updated_at >= time.time() - max_age)
            )
            return int(conn.execute(stmt).scalar_one())

    return storage._retry(_do)
