"""Replay reads from a SQL storage (``replay_buffer.enable``, Trinity-RFT 0.6's order): each
read takes the rows read least often, newest first among equals, and counts the read in the
table's ``consumed`` column, so the counts survive a restart and are shared by readers."""

from __future__ import annotations

import os
import sqlite3
import uuid

import pytest
import torch

from trinity.buffer.buffer_reader import get_buffer_reader
from trinity.buffer.buffer_writer import get_buffer_writer
from trinity.buffer.storage.errors import StorageConfigError
from trinity.buffer.storage.sql import SQLReader, SQLStorage
from trinity.common.config import ExperienceBufferConfig, TasksetConfig
from trinity.common.experience import EID, Experience


def make_exps(tasks: range) -> list[Experience]:
    return [
        Experience(
            eid=EID(task=t),
            tokens=torch.tensor([1, 2, 3, 4 + t]),
            prompt_length=2,
            logprobs=torch.tensor([-0.1, -0.2]),
            reward=float(t),
        )
        for t in tasks
    ]


def config(db, replay: bool = True, **kw) -> ExperienceBufferConfig:
    kw.setdefault("batch_size", 4)
    return ExperienceBufferConfig(
        name="exps",
        storage_type="sql",
        path=str(db),
        wrap_in_ray=False,
        replay_buffer={"enable": replay},
        **kw,
    )


def tasks(batch: list[Experience]) -> list[str]:
    return [e.eid.task for e in batch]


def consumed(db) -> dict[int, int]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT id, consumed FROM exps ORDER BY id").fetchall())


def test_replay_reads_the_least_read_rows_newest_first(tmp_path):
    db = tmp_path / "b.db"
    writer = get_buffer_writer(config(db))
    writer.write(make_exps(range(1, 4)))
    writer.write(make_exps(range(4, 7)))
    writer.release()
    reader = get_buffer_reader(config(db))
    assert isinstance(reader, SQLReader) and reader.replay
    assert tasks(reader.read()) == ["6", "5", "4", "3"]
    # rows 2 and 1 have not been read yet; then the newest of those read once
    assert tasks(reader.read()) == ["2", "1", "6", "5"]
    assert tasks(reader.read()) == ["4", "3", "2", "1"]
    assert consumed(db) == {1: 2, 2: 2, 3: 2, 4: 2, 5: 2, 6: 2}
    # the counts are the table's: a new reader (a restarted trainer) goes on from them
    assert tasks(get_buffer_reader(config(db)).read(2)) == ["6", "5"]
    assert consumed(db)[6] == 3


def test_without_replay_each_row_is_read_once_in_write_order(tmp_path):
    db = tmp_path / "b.db"
    get_buffer_writer(config(db, replay=False)).write(make_exps(range(1, 7)))
    reader = get_buffer_reader(config(db, replay=False))
    assert tasks(reader.read()) == ["1", "2", "3", "4"]
    assert tasks(reader.read()) == ["5", "6"]
    with pytest.raises(StopIteration):
        reader.read()
    assert set(consumed(db).values()) == {0}


def test_a_table_short_of_a_batch_ends_the_read_and_counts_nothing(tmp_path):
    db = tmp_path / "b.db"
    get_buffer_writer(config(db)).write(make_exps(range(3)))
    reader = get_buffer_reader(config(db, max_read_timeout=1))
    with pytest.raises(StopIteration):
        reader.read()
    assert set(consumed(db).values()) == {0}
    assert tasks(reader.read(3)) == ["2", "1", "0"]


def test_an_experience_table_from_before_replay_gets_the_column(tmp_path):
    """A table written by an earlier release has no ``consumed`` column: opening it adds the
    column (every row read 0 times) and replay reads work on it."""
    db = tmp_path / "old.db"
    get_buffer_writer(config(db, replay=False)).write(make_exps(range(3)))
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE exps DROP COLUMN consumed")
        columns = [row[1] for row in conn.execute("PRAGMA table_info(exps)")]
    assert "consumed" not in columns
    storage = SQLStorage(config(db))
    assert storage.kind == "experience"
    storage.close()
    assert consumed(db) == {1: 0, 2: 0, 3: 0}
    assert tasks(get_buffer_reader(config(db)).read(2)) == ["2", "1"]
    # and a writer of the old table still writes into it
    get_buffer_writer(config(db)).write(make_exps(range(3, 4)))
    assert consumed(db) == {1: 0, 2: 1, 3: 1, 4: 0}


def test_replay_on_a_task_table_is_refused_naming_the_storage(tmp_path):
    db = tmp_path / "tasks.db"
    tasks_config = TasksetConfig(name="exps", storage_type="sql", path=str(db), wrap_in_ray=False)
    get_buffer_writer(tasks_config).write([{"question": "1+1", "answer": "2"}])
    with pytest.raises(StorageConfigError, match=r"'exps'.*replay_buffer.enable.*task rows"):
        SQLReader(config(db))


POSTGRES_URL = os.environ.get("TRINITY_TEST_POSTGRES_URL")


@pytest.mark.skipif(
    not POSTGRES_URL,
    reason="no PostgreSQL server: set TRINITY_TEST_POSTGRES_URL (scripts/test.sh starts one)",
)
def test_replay_on_postgresql():
    """The same order on PostgreSQL, where the rows a read takes are locked (FOR UPDATE) until
    their counts are raised."""
    name = f"replay-{uuid.uuid4().hex[:8]}"
    cfg = ExperienceBufferConfig(
        name=name,
        storage_type="sql",
        path=POSTGRES_URL,
        wrap_in_ray=False,
        batch_size=2,
        replay_buffer={"enable": True},
    )
    writer = get_buffer_writer(cfg)
    writer.write(make_exps(range(3)))
    reader = get_buffer_reader(cfg)
    assert reader.storage.engine.dialect.name == "postgresql"
    assert tasks(reader.read()) == ["2", "1"]
    assert tasks(reader.read()) == ["0", "2"]
    writer.release()
    reader.close()
