"""Which SQL experience tables a writer in another process is still filling.

A SQL table read in mode ``train`` is normally a finished data set: a read that finds it
exhausted ends the run. When another process is writing it as the trainer reads (mode
``serve`` committing live traffic, Trinity-RFT's explorer and trainer jobs), the reader must
wait for new rows instead. That writer says so with a :class:`LiveWriterMark` (one row of the
``trinity_live_writers`` table in the same database, refreshed by :meth:`LiveWriterMark.beat`
and removed by :meth:`LiveWriterMark.close`); :func:`live_writers` counts the marks of a table
refreshed within ``max_age`` seconds, so a writer that died without closing stops counting
once its mark is that old.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from sqlalchemy import Column, Float, MetaData, String, Table, delete, func, insert, select, update

if TYPE_CHECKING:  # sql.py's reader imports this module: no import back at run time
    from trinity.buffer.storage.sql import SQLStorage

LIVE_TABLE = "trinity_live_writers"


def _live_table(metadata: MetaData) -> Table:
    return Table(
        LIVE_TABLE,
        metadata,
        Column("writer", String(64), primary_key=True),
        Column("table_name", String(255), index=True),
        Column("updated_at", Float),
    )


class LiveWriterMark:
    """Marks ``storage``'s table (a :class:`~trinity.buffer.storage.sql.SQLStorage`) as being
    written by this process until closed; closing closes the storage."""

    def __init__(self, storage: SQLStorage) -> None:
        self.storage = storage
        self.metadata = MetaData()
        self.table = _live_table(self.metadata)
        self.writer = uuid.uuid4().hex
        self.storage._retry(lambda: self.metadata.create_all(self.storage.engine))

        def _do() -> None:
            with self.storage.engine.begin() as conn:
                conn.execute(
                    insert(self.table).values(
                        writer=self.writer,
                        table_name=self.storage.table_name,
                        updated_at=time.time(),
                    )
                )

        self.storage._retry(_do)
        self.closed = False

    def beat(self) -> None:
        """Refresh the mark (the writer is alive)."""

        def _do() -> None:
            with self.storage.engine.begin() as conn:
                conn.execute(
                    update(self.table)
                    .where(self.table.c.writer == self.writer)
                    .values(updated_at=time.time())
                )

        self.storage._retry(_do)

    def close(self) -> None:
        """Remove the mark: readers waiting for rows stop once they have read the rest."""
        if self.closed:
            return
        self.closed = True

        def _do() -> None:
            with self.storage.engine.begin() as conn:
                conn.execute(delete(self.table).where(self.table.c.writer == self.writer))

        try:
            self.storage._retry(_do)
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
