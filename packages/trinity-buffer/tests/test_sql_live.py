"""A SQL experience table another process is still writing (mode serve's commits): while the
writer's ``LiveWriterMark`` is there, a read waits for the rows it lacks instead of ending at
the table's end; once the mark is gone (or has not moved for ``max_read_timeout``) the read
returns what there is, or ends. Without a mark a table is a finished data set, read as before;
an empty one that nothing has been read from waits up to ``max_read_timeout`` for its first
writer (a trainer started before the service that fills its table).
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from trinity.buffer.buffer_reader import get_buffer_reader
from trinity.buffer.buffer_writer import get_buffer_writer
from trinity.buffer.storage.sql import SQLStorage
from trinity.buffer.storage.sql_live import LiveWriterMark, live_writers
from trinity.common.config import ExperienceBufferConfig
from trinity.common.experience import Experience


def cfg(storage_type: str, path: str, name: str = "exps", **kw) -> ExperienceBufferConfig:
    return ExperienceBufferConfig(
        name=name, storage_type=storage_type, path=path, batch_size=4, **kw
    )


def make_exps(n: int) -> list[Experience]:
    return [
        Experience(
            tokens=torch.arange(1, 5),
            prompt_length=2,
            logprobs=torch.zeros(2),
            reward=float(i),
            info={"i": i},
        )
        for i in range(n)
    ]


def same(a: list[Experience], b: list[Experience]) -> bool:
    return [e.info["i"] for e in a] == [e.info["i"] for e in b]


def test_a_read_waits_for_a_live_writer_and_ends_when_it_is_gone(tmp_path):
    url = f"sqlite:///{tmp_path}/live.db"
    mark = LiveWriterMark(SQLStorage(cfg("sql", url)))
    writer = get_buffer_writer(cfg("sql", url))
    exps = make_exps(6)
    writer.write(exps[:2])
    reader = get_buffer_reader(cfg("sql", url, max_read_timeout=60))

    def later() -> None:
        time.sleep(0.8)
        writer.write(exps[2:5])
        time.sleep(0.8)
        writer.write(exps[5:])
        mark.close()

    thread = threading.Thread(target=later)
    thread.start()
    began = time.monotonic()
    first = reader.read()  # 4: 2 there, 2 written 0.8 s later
    assert same(first, exps[:4]) and time.monotonic() - began >= 0.7
    second = reader.read()  # 1 more written, then the last one and the writer leaves: 2
    assert same(second, exps[4:])
    thread.join()
    with pytest.raises(StopIteration):
        reader.read()
    writer.release()


def test_a_live_writer_that_writes_nothing_for_max_read_timeout_ends_the_read(tmp_path):
    url = f"sqlite:///{tmp_path}/stalled.db"
    mark = LiveWriterMark(SQLStorage(cfg("sql", url)))
    writer = get_buffer_writer(cfg("sql", url))
    writer.write(make_exps(1))
    reader = get_buffer_reader(cfg("sql", url, max_read_timeout=1))
    began = time.monotonic()
    assert len(reader.read()) == 1  # what there is, after 1 s without a new row
    assert 0.9 <= time.monotonic() - began < 10
    mark.close()
    writer.release()


def test_without_a_mark_the_table_is_a_finished_data_set(tmp_path):
    url = f"sqlite:///{tmp_path}/done.db"
    writer = get_buffer_writer(cfg("sql", url))
    writer.write(make_exps(5))
    writer.release()
    reader = get_buffer_reader(cfg("sql", url, max_read_timeout=600))
    began = time.monotonic()
    assert len(reader.read()) == 4 and len(reader.read()) == 1
    with pytest.raises(StopIteration):
        reader.read()
    assert time.monotonic() - began < 5  # no waiting for a writer that is not there


def test_a_mark_counts_for_its_own_table_while_it_is_fresh(tmp_path):
    url = f"sqlite:///{tmp_path}/marks.db"
    mark = LiveWriterMark(SQLStorage(cfg("sql", url, name="a")))
    assert live_writers(SQLStorage(cfg("sql", url, name="a")), max_age=60) == 1
    assert live_writers(SQLStorage(cfg("sql", url, name="b")), max_age=60) == 0
    time.sleep(0.3)
    assert live_writers(SQLStorage(cfg("sql", url, name="a")), max_age=0.1) == 0  # stale
    mark.beat()
    assert live_writers(SQLStorage(cfg("sql", url, name="a")), max_age=0.1) == 1
    mark.close()
    assert live_writers(SQLStorage(cfg("sql", url, name="a")), max_age=60) == 0


def test_a_reader_started_before_its_writer_waits_for_the_first_rows(tmp_path):
    """A trainer started before the service (mode serve) that writes its table: the table is
    empty and unmarked when the first read comes, and the read waits for the writer instead of
    ending the run with no step trained."""
    url = f"sqlite:///{tmp_path}/early.db"
    reader = get_buffer_reader(cfg("sql", url, max_read_timeout=60))
    exps = make_exps(4)

    def service() -> None:
        time.sleep(1.0)
        mark = LiveWriterMark(SQLStorage(cfg("sql", url)))
        writer = get_buffer_writer(cfg("sql", url))
        time.sleep(0.5)
        writer.write(exps)
        time.sleep(0.5)
        mark.close()
        writer.release()

    thread = threading.Thread(target=service)
    began = time.monotonic()
    thread.start()
    assert same(reader.read(), exps) and time.monotonic() - began >= 1.4
    thread.join()
    with pytest.raises(StopIteration):  # the writer is gone and the table read: the end
        reader.read()


def test_an_empty_table_without_a_writer_ends_after_max_read_timeout(tmp_path):
    url = f"sqlite:///{tmp_path}/never.db"
    reader = get_buffer_reader(cfg("sql", url, max_read_timeout=1))
    began = time.monotonic()
    with pytest.raises(StopIteration):
        reader.read()
    assert 0.9 <= time.monotonic() - began < 10
