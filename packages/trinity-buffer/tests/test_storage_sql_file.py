"""SQL and file storages: exact round trips, URLs and paths, formats, positions, torn tails."""

from __future__ import annotations

import asyncio
import json
import os
import uuid

import pyarrow.parquet as pq
import pytest
import torch

from trinity.buffer.buffer_reader import get_buffer_reader
from trinity.buffer.buffer_writer import get_buffer_writer
from trinity.buffer.storage.file import FileReader, FileWriter, JsonlFile
from trinity.buffer.storage.sql import SQLReader, SQLStorage, SQLWriter
from trinity.common.config import ExperienceBufferConfig
from trinity.common.experience import EID, Experience
from trinity.common.protocols import ExperienceReader, StatefulReader


def make_exps(n: int, start: int = 0) -> list[Experience]:
    """A mix of single-turn, multi-turn and DPO experiences with every kind of field."""
    out = []
    for i in range(start, start + n):
        kind = i % 3
        if kind == 0:
            exp = Experience(
                eid=EID(batch=i, task=i // 2, run=0),
                tokens=torch.arange(1, 6 + i % 4),
                prompt_length=3,
                logprobs=torch.randn(2 + i % 4),
                reward=0.5 * i,
                info={"i": i, "tags": ["a", i]},
                metrics={"m": 1.5},
                response_text=f"r{i}",
                prompt_text="ünïcode prompt",
                model_version=i,
            )
        elif kind == 1:
            exp = Experience(
                tokens=torch.arange(10, 20),
                prompt_length=4,
                action_mask=torch.tensor([1, 1, 0, 0, 1, 1], dtype=torch.bool),
                logprobs=torch.randn(6),
                advantages=torch.randn(6),
                messages=[{"role": "user", "content": f"q{i}"}],
                info={"i": i},
                truncate_status="response_truncated",
            )
        else:
            exp = Experience(
                tokens=torch.arange(3),
                chosen=torch.tensor([7, 8]),
                rejected=torch.tensor([9]),
                info={"i": i},
                reward=None,
            )
        out.append(exp)
    return out


def _task_as_text(exp: Experience) -> bytes:
    """The canonical bytes of ``exp`` with ``eid.task`` as text (a SQL storage gives the task
    id back as a string, as Trinity-RFT 0.6's does; the file storages keep it as written)."""
    copy = Experience.deserialize(exp.serialize())
    copy.eid.task = str(copy.eid.task)
    return copy.serialize()


def same(a: list[Experience], b: list[Experience]) -> bool:
    """Field-for-field equality via the canonical bytes (Experience has no __eq__), with
    ``eid.task`` compared as text."""
    return len(a) == len(b) and all(
        _task_as_text(x) == _task_as_text(y) for x, y in zip(a, b, strict=True)
    )


def cfg(storage_type: str, path: str, name: str = "exps", **kw) -> ExperienceBufferConfig:
    kw.setdefault("batch_size", 4)
    return ExperienceBufferConfig(name=name, storage_type=storage_type, path=path, **kw)


def read_all(reader) -> list[Experience]:
    out: list[Experience] = []
    while True:
        try:
            out += reader.read()
        except StopIteration:
            return out


# ---- SQL ------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["path", "url"])
def test_sql_round_trip_exact(tmp_path, form):
    db = tmp_path / "sub" / "buffer.db"
    path = str(db) if form == "path" else f"sqlite:///{db}"
    writer = get_buffer_writer(cfg("sql", path))
    assert isinstance(writer, SQLWriter)
    exps = make_exps(10)
    writer.write(exps[:4])
    writer.write(exps[4:])
    writer.release()
    assert db.exists()
    reader = get_buffer_reader(cfg("sql", path))
    assert isinstance(reader, SQLReader)
    assert isinstance(reader, ExperienceReader) and isinstance(reader, StatefulReader)
    batches = [reader.read(), reader.read(), reader.read()]
    assert [len(b) for b in batches] == [4, 4, 2]  # partial only at the end
    assert same(sum(batches, []), exps)
    assert [e.eid.task for e in batches[0]] == [str(e.eid.task) for e in exps[:4]]
    with pytest.raises(StopIteration):
        reader.read()


def test_sql_url_is_passed_to_sqlalchemy_and_tables_are_per_storage(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    a, b = make_exps(3), make_exps(2, start=3)
    get_buffer_writer(cfg("sql", url, name="buffer-a")).write(a)
    get_buffer_writer(cfg("sql", url, name="buffer b")).write(b)
    assert same(read_all(get_buffer_reader(cfg("sql", url, name="buffer-a"))), a)
    assert same(read_all(get_buffer_reader(cfg("sql", url, name="buffer b"))), b)
    storage = SQLStorage(cfg("sql", url, name="buffer-a"))
    assert storage.url == url and storage.count() == 3
    assert storage.table.name == "buffer_a"


def test_sql_bad_url_names_path(tmp_path):
    from trinity.buffer.storage.errors import StorageConfigError

    with pytest.raises(StorageConfigError, match="`path`"):
        get_buffer_writer(cfg("sql", "postgresql://user@host:notaport/db"))


def test_sql_state_dict_resume_epochs_and_async(tmp_path):
    path = str(tmp_path / "b.db")
    exps = make_exps(6)
    get_buffer_writer(cfg("sql", path)).write(exps)
    reader = get_buffer_reader(cfg("sql", path, total_epochs=2))
    first = reader.read(4)
    state = json.loads(json.dumps(reader.state_dict()))  # JSON-able
    resumed = get_buffer_reader(cfg("sql", path, total_epochs=2))
    resumed.load_state_dict(state)
    # epoch boundary inside a batch: 2 from epoch 1, then 2 from epoch 2
    assert same(resumed.read(4), exps[4:6] + exps[0:2])
    assert same(first, exps[:4])

    async def rest() -> list[Experience]:
        out = []
        while True:
            try:
                out += await resumed.read_async(3)
            except StopAsyncIteration:
                return out

    assert same(asyncio.run(rest()), exps[2:6])


def test_sql_reader_sees_rows_committed_after_it_started(tmp_path):
    path = str(tmp_path / "live.db")
    writer = get_buffer_writer(cfg("sql", path))
    # (an empty table waits max_read_timeout for its first rows; then, with no live writer,
    # the read ends)
    reader = get_buffer_reader(cfg("sql", path, max_read_timeout=1))
    with pytest.raises(StopIteration):
        reader.read()
    exps = make_exps(4)
    writer.write(exps)
    assert same(reader.read(), exps)


def _side_files(db) -> list[str]:
    return sorted(p.name for p in db.parent.iterdir() if p.name != db.name)


def test_sqlite_side_files_are_removed_on_a_clean_close(tmp_path):
    db = tmp_path / "closed.db"
    writer = get_buffer_writer(cfg("sql", str(db)))
    reader = get_buffer_reader(cfg("sql", str(db)))
    exps = make_exps(5)
    writer.write(exps)
    assert same(reader.read(), exps[:4])
    assert _side_files(db) == ["closed.db-shm", "closed.db-wal"]  # WAL mode while open
    writer.release()  # the reader still uses the shared engine: the files stay
    assert _side_files(db) == ["closed.db-shm", "closed.db-wal"]
    reader.close()  # the last storage of the file: WAL checkpointed, engine disposed
    assert _side_files(db) == []
    # everything is in the database file itself
    import sqlite3

    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM exps").fetchone() == (5,)
    # closing twice is harmless, and a closed storage opens the database again when used
    reader.close()
    writer.release()
    writer.write(make_exps(1, start=5))
    assert SQLStorage(cfg("sql", str(db))).count() == 6


def test_sqlite_engines_left_open_are_closed_at_exit(tmp_path):
    from trinity.buffer.storage import sql

    db = tmp_path / "exit.db"
    get_buffer_writer(cfg("sql", str(db))).write(make_exps(2))
    reader = get_buffer_reader(cfg("sql", str(db)))  # never closed, as a trainer's reader
    assert len(reader.read()) == 2 and _side_files(db) == ["exit.db-shm", "exit.db-wal"]
    sql._close_all_engines()  # what the interpreter runs at exit (atexit)
    assert _side_files(db) == []
    assert len(SQLStorage(cfg("sql", str(db))).select_after(0, 10)) == 2  # opens again


# ---- files ----------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["exps.jsonl", "exps.parquet", "dir_form"])
def test_file_round_trip_exact(tmp_path, suffix):
    path = str(tmp_path / suffix)
    writer = get_buffer_writer(cfg("file", path))
    assert isinstance(writer, FileWriter)
    exps = make_exps(11)
    for lo in range(0, 11, 3):
        writer.write(exps[lo : lo + 3])
    writer.release()
    reader = get_buffer_reader(cfg("file", path))
    assert isinstance(reader, FileReader)
    assert isinstance(reader, ExperienceReader) and isinstance(reader, StatefulReader)
    batches = []
    while True:
        try:
            batches.append(reader.read())
        except StopIteration:
            break
    assert [len(b) for b in batches] == [4, 4, 3]
    # exact: the file storages keep every field as written (eid.task's type too)
    assert [e.serialize() for e in sum(batches, [])] == [e.serialize() for e in exps]
    if suffix == "dir_form":
        assert os.path.isfile(tmp_path / "dir_form" / "exps.jsonl")
    if suffix.endswith("parquet"):
        parts = sorted(os.listdir(path))
        assert parts[-4:] == [f"part-{i:08d}.parquet" for i in range(1, 5)]
        table = pq.read_table(os.path.join(path, parts[-1]))
        assert table.column_names == ["exp", "eid", "model_version", "reward"]
        assert same([Experience.deserialize(b) for b in table.column("exp").to_pylist()], exps[9:])


def test_jsonl_lines_are_readable_json_with_the_serialized_bytes(tmp_path):
    path = tmp_path / "x.jsonl"
    exps = make_exps(2)
    get_buffer_writer(cfg("file", str(path))).write(exps)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(r["i"], r["n"]) for r in lines] == [(0, 2), (1, 2)]
    assert lines[0]["batch"] == lines[1]["batch"] and lines[0]["model_version"] == 0
    assert lines[0]["eid"] == exps[0].eid.uid


@pytest.mark.parametrize("suffix", ["exps.jsonl", "exps.parquet"])
def test_file_state_dict_resume_and_live_tail(tmp_path, suffix):
    path = str(tmp_path / suffix)
    writer = get_buffer_writer(cfg("file", path))
    exps = make_exps(9)
    writer.write(exps[:5])
    reader = get_buffer_reader(cfg("file", path))
    assert same(reader.read(3), exps[:3])
    state = json.loads(json.dumps(reader.state_dict()))
    resumed = get_buffer_reader(cfg("file", path))
    resumed.load_state_dict(state)
    assert same(resumed.read(4), exps[3:5])  # what is there
    with pytest.raises(StopIteration):
        resumed.read()
    writer.write(exps[5:])  # a later append is picked up from the saved position
    assert same(resumed.read(4), exps[5:9])


def test_jsonl_torn_tail_is_ignored_by_readers_and_repaired_by_writers(tmp_path):
    path = tmp_path / "torn.jsonl"
    writer = get_buffer_writer(cfg("file", str(path)))
    exps = make_exps(6)
    writer.write(exps[:2])
    good_size = path.stat().st_size
    # a killed writer: one complete line of a 2-line batch and half of the second line
    torn = JsonlFile(str(tmp_path / "other.jsonl"))
    torn.append(exps[2:4])
    data = (tmp_path / "other.jsonl").read_bytes()
    with open(path, "ab") as f:
        f.write(data[: len(data) * 3 // 4])
    assert same(read_all(get_buffer_reader(cfg("file", str(path)))), exps[:2])
    # the next write truncates the tear and appends a clean batch
    writer.write(exps[4:6])
    assert same(read_all(get_buffer_reader(cfg("file", str(path)))), exps[:2] + exps[4:6])
    raw = path.read_bytes()  # the tear is gone: 2 + 2 whole lines
    assert len(raw) > good_size and raw.endswith(b"\n")
    assert [json.loads(x)["i"] for x in raw.splitlines()] == [0, 1, 0, 1]
    # an incomplete batch that ends on a line boundary is skipped, later batches are kept
    with open(path, "ab") as f:
        f.write(data[: data.index(b"\n") + 1])
    writer.write(exps[:1])
    assert same(
        read_all(get_buffer_reader(cfg("file", str(path)))), exps[:2] + exps[4:6] + exps[:1]
    )
    # a fresh writer repairs nothing more (the file ends on a complete batch)
    assert JsonlFile(str(path)).repair() == 0


def test_parquet_temporary_files_are_invisible(tmp_path):
    path = tmp_path / "exps.parquet"
    writer = get_buffer_writer(cfg("file", str(path)))
    exps = make_exps(4)
    writer.write(exps[:2])
    (path / ".tmp-999999999-dead.parquet").write_bytes(b"PAR1 half a file")
    writer.write(exps[2:])
    assert same(read_all(get_buffer_reader(cfg("file", str(path)))), exps)
    FileWriter(cfg("file", str(path)))  # a new writer cleans up a dead writer's temp file
    assert not (path / ".tmp-999999999-dead.parquet").exists()


def test_single_parquet_file_is_readable_but_not_appendable(tmp_path):
    path = tmp_path / "exps.parquet"
    get_buffer_writer(cfg("file", str(path))).write(make_exps(3))
    single = tmp_path / "one.parquet"
    os.replace(path / "part-00000001.parquet", single)
    assert len(read_all(get_buffer_reader(cfg("file", str(single))))) == 3
    from trinity.buffer.storage.errors import StorageConfigError

    with pytest.raises(StorageConfigError, match="single parquet file"):
        get_buffer_writer(cfg("file", str(single))).write(make_exps(1))


# ---- PostgreSQL (a real server; scripts/test.sh starts one, see scripts/postgres.sh) ----------
POSTGRES_URL = os.environ.get("TRINITY_TEST_POSTGRES_URL")


@pytest.mark.skipif(
    not POSTGRES_URL,
    reason="no PostgreSQL server: set TRINITY_TEST_POSTGRES_URL (scripts/test.sh starts one)",
)
def test_sql_storage_on_postgresql():
    """Any SQLAlchemy URL works: the same storage on a live PostgreSQL server."""
    name = f"pg-{uuid.uuid4().hex[:8]}"
    exps = make_exps(10)
    writer = get_buffer_writer(cfg("sql", POSTGRES_URL, name=name))
    writer.write(exps[:6])
    writer.write(exps[6:])
    writer.release()
    storage = SQLStorage(cfg("sql", POSTGRES_URL, name=name))
    assert storage.engine.dialect.name == "postgresql"
    assert storage.count() == 10
    reader = get_buffer_reader(cfg("sql", POSTGRES_URL, name=name))
    first = reader.read()
    state = reader.state_dict()
    resumed = get_buffer_reader(cfg("sql", POSTGRES_URL, name=name))
    resumed.load_state_dict(state)
    assert same(first + read_all(resumed), exps)


@pytest.mark.parametrize("kind", ["sql", "jsonl", "parquet"])
def test_a_writer_cuts_back_to_a_recorded_position(tmp_path, kind):
    """A resumed explorer removes the rows of the step it was killed in (written after the
    position it recorded), so a redone step is not stored twice."""
    path = {"sql": "exps.db", "jsonl": "exps.jsonl", "parquet": "exps.parquet"}[kind]
    config = cfg("sql" if kind == "sql" else "file", str(tmp_path / path))
    writer = get_buffer_writer(config)
    empty = writer.position()
    assert writer.truncate(empty) == 0
    first = make_exps(3)
    writer.write(first)
    mark = json.loads(json.dumps(writer.position()))  # JSON-able: it goes into a state file
    writer.write(make_exps(2, start=3))
    writer.write(make_exps(4, start=5))
    assert writer.truncate(mark) == 6
    assert writer.position() == mark
    assert same(read_all(get_buffer_reader(config)), first)
    writer.write(make_exps(2, start=10))  # writing goes on after the cut
    assert len(read_all(get_buffer_reader(config))) == 5
    writer.release()


def _image_exps(n: int) -> list[Experience]:
    """Experiences of image prompts: the vision inputs the trainer reads travel with them."""
    g = torch.Generator().manual_seed(0)
    return [
        Experience(
            eid=EID(batch=0, task=i, run=0),
            tokens=torch.arange(1, 12),
            prompt_length=9,
            logprobs=torch.randn(2, generator=g),
            reward=float(i),
            multi_modal_inputs={
                "pixel_values": torch.randn(16 + 4 * i, 1176, generator=g),
                "image_grid_thw": torch.tensor([[1, 4, 4 + i]]),
            },
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("kind", ["sql", "jsonl", "parquet", "queue"])
def test_image_experiences_keep_their_vision_inputs_in_every_storage(tmp_path, kind):
    path = {"sql": "exps.db", "jsonl": "exps.jsonl", "parquet": "exps.parquet", "queue": ""}
    storage = {"sql": "sql", "queue": "queue"}.get(kind, "file")
    config = cfg(storage, str(tmp_path / path[kind]) if path[kind] else None, name=f"img-{kind}")
    writer = get_buffer_writer(config)
    exps = _image_exps(4)
    writer.write(exps)
    if kind == "queue":
        back = get_buffer_reader(config).read()
    else:
        writer.release()
        back = read_all(get_buffer_reader(config))
    assert len(back) == 4
    for got, want in zip(back, exps, strict=True):
        for key, value in want.multi_modal_inputs.items():
            assert torch.equal(got.multi_modal_inputs[key], value), (kind, key)
