"""The SQL storage served by its named Ray actor ``sql-<name>`` (``wrap_in_ray``, Trinity-RFT
0.6): writers and readers in different processes call the actor, which opens the database;
``wrap_in_ray: false`` opens it in the reader's / writer's own process; a dead actor or a
stuck call is an error naming the storage, never a hang."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
import torch

ray = pytest.importorskip("ray")

from trinity.buffer.buffer_reader import get_buffer_reader  # noqa: E402
from trinity.buffer.buffer_writer import get_buffer_writer  # noqa: E402
from trinity.buffer.storage.errors import (  # noqa: E402
    StorageConfigError,
    StorageError,
    StorageTimeoutError,
)
from trinity.buffer.storage.sql import SQLReader, SQLStorage, SQLWriter  # noqa: E402
from trinity.buffer.storage.sql_actor import (  # noqa: E402
    SQLActorStorage,
    _absolute_url,
    kill_sql_actor,
)
from trinity.buffer.storage.sql_live import LiveWriterMark  # noqa: E402
from trinity.buffer.taskset import get_taskset_reader  # noqa: E402
from trinity.common.config import ExperienceBufferConfig, TasksetConfig  # noqa: E402
from trinity.common.experience import Experience  # noqa: E402

# Ray workers cannot import this test module: what it sends them is pickled by value
pytestmark = pytest.mark.usefixtures("ray_pickles_this_module")


def make_exp(i: int) -> Experience:
    return Experience(
        tokens=torch.tensor([1, 2, 3 + i]),
        prompt_length=2,
        logprobs=torch.tensor([-0.1 * i]),
        info={"i": i},
        model_version=i,
    )


def exp_config(name: str, tmp_path, **kw) -> ExperienceBufferConfig:
    kw.setdefault("batch_size", 2)
    kw.setdefault("max_read_timeout", 5)
    return ExperienceBufferConfig(
        name=name, storage_type="sql", path=f"sqlite:///{tmp_path / 'exps.db'}", **kw
    )


def rows_in(db, table: str) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


@ray.remote(num_cpus=0)
class Explorer:
    """A writer in another process."""

    def __init__(self, cfg):
        self.writer = get_buffer_writer(cfg)  # Ray is up in the worker: the SQL actor
        self.writer.acquire()

    def served(self) -> bool:
        return isinstance(self.writer.storage, SQLActorStorage)

    async def explore(self, first: int, n: int) -> None:
        await self.writer.write_async([make_exp(first + j) for j in range(n)])

    def finish(self) -> int:
        return self.writer.release()


def test_a_writer_actor_and_a_driver_reader_meet_through_the_sql_actor(tmp_path, torch_loaded):
    cfg = exp_config("ray-sql", tmp_path)
    explorer = Explorer.remote(cfg)
    assert ray.get(explorer.served.remote())
    ray.get(explorer.explore.remote(0, 3))
    reader = get_buffer_reader(cfg)
    assert isinstance(reader, SQLReader) and isinstance(reader.storage, SQLActorStorage)
    actor = ray.get_actor("sql-ray-sql")  # Trinity-RFT's name, in the caller's namespace
    assert reader.storage.actor._actor_id == actor._actor_id
    assert [e.info["i"] for e in reader.read()] == [0, 1]
    ray.get(explorer.explore.remote(3, 1))
    assert [e.info["i"] for e in reader.read()] == [2, 3]
    assert ray.get(explorer.finish.remote()) == 0
    with pytest.raises(StopIteration):
        reader.read()
    # the rows are in the database itself, and the actor moved bytes only
    assert rows_in(tmp_path / "exps.db", "ray_sql") == 4
    assert not torch_loaded(actor)
    # a reader keeps its own position, which a new reader resumes from (the checkpoint)
    state = reader.state_dict()
    again = SQLReader(cfg)
    assert [e.info["i"] for e in again.read(4)] == [0, 1, 2, 3]
    again.load_state_dict(state)
    with pytest.raises(StopIteration):
        again.read()
    reader.close()
    again.close()
    assert ray.get(actor.open_storages.remote()) == 0
    assert kill_sql_actor(cfg)


def test_task_rows_and_task_sets_are_read_through_the_actor(tmp_path):
    """Trinity-RFT's ``sql_test.py::test_sql_task_buffer_read_write``, and the explorer's
    task set reader."""
    cfg = TasksetConfig(
        name="ray-tasks",
        storage_type="sql",
        path=f"sqlite:///{tmp_path / 'tasks.db'}",
        batch_size=3,
        default_workflow_type="math_workflow",
    )
    writer = SQLWriter(cfg.to_storage_config())
    assert isinstance(writer.storage, SQLActorStorage)
    writer.write([{"question": f"q{i}", "answer": f"a{i}"} for i in range(7)])
    reader = get_buffer_reader(cfg.to_storage_config())
    batches = []
    while True:
        try:
            batches.append(reader.read())
        except StopIteration:
            break
    assert [len(b) for b in batches] == [3, 3]  # a train task set drops the short last batch
    assert batches[0][0].raw_task == {"question": "q0", "answer": "a0"}
    assert ray.get_actor("sql-ray-tasks") is not None
    tasks = get_taskset_reader(cfg).read()
    assert [t.raw_task["question"] for t in tasks] == ["q0", "q1", "q2"]
    # a write of the other kind of rows is refused with the in-process error
    with pytest.raises(TypeError, match="holds task rows"):
        writer.write([make_exp(0)])
    with pytest.raises(StorageConfigError, match="holds task rows, not experience rows"):
        SQLActorStorage(cfg, kind="experience")
    assert writer.release() == 0
    assert kill_sql_actor(cfg)


def test_wrap_in_ray_false_opens_the_database_in_this_process(tmp_path):
    cfg = exp_config("ray-local", tmp_path, wrap_in_ray=False)
    writer = get_buffer_writer(cfg)
    reader = get_buffer_reader(cfg)
    assert type(writer.storage) is SQLStorage and type(reader.storage) is SQLStorage
    writer.write([make_exp(0), make_exp(1)])
    assert [e.info["i"] for e in reader.read()] == [0, 1]
    with pytest.raises(ValueError):
        ray.get_actor("sql-ray-local")  # no actor was started
    # the factories' use_ray wins over the config, either way
    assert type(get_buffer_reader(exp_config("ray-x", tmp_path), use_ray=False).storage) is (
        SQLStorage
    )
    served = get_buffer_reader(cfg, use_ray=True)
    assert isinstance(served.storage, SQLActorStorage)
    assert [e.info["i"] for e in served.read()] == [0, 1]
    writer.release()
    assert kill_sql_actor(cfg)


def test_replay_reads_run_through_the_actor(tmp_path):
    """``replay_buffer.enable``: the actor selects the least-read rows and counts the read
    (test_storage_sql_replay.py covers the order in one process)."""
    cfg = exp_config("ray-replay", tmp_path, replay_buffer={"enable": True})
    writer = get_buffer_writer(cfg)
    writer.write([make_exp(i) for i in range(3)])
    reader = get_buffer_reader(cfg)
    assert isinstance(reader.storage, SQLActorStorage)
    assert [e.info["i"] for e in reader.read()] == [2, 1]
    assert [e.info["i"] for e in reader.read()] == [0, 2]
    with sqlite3.connect(tmp_path / "exps.db") as conn:
        counts = dict(conn.execute("SELECT id, consumed FROM ray_replay").fetchall())
    assert counts == {1: 1, 2: 1, 3: 2}
    writer.release()
    reader.close()
    assert kill_sql_actor(cfg)


def test_a_killed_actor_is_an_error_naming_the_storage_not_a_hang(tmp_path):
    cfg = exp_config("ray-dead", tmp_path)
    writer = get_buffer_writer(cfg)
    writer.write([make_exp(0), make_exp(1), make_exp(2)])
    reader = get_buffer_reader(cfg)
    assert kill_sql_actor(cfg)
    start = time.monotonic()
    with pytest.raises(
        StorageError, match=r"storage 'ray-dead': the SQL actor 'sql-ray-dead'.*gone"
    ):
        reader.read()
    with pytest.raises(StorageError, match="storage 'ray-dead'"):
        writer.write([make_exp(3)])
    assert time.monotonic() - start < 30
    writer.release()  # closing never fails
    # the rows are in the database: a reader opened now starts a new actor and reads them
    fresh = get_buffer_reader(cfg)
    assert [e.info["i"] for e in fresh.read(3)] == [0, 1, 2]
    fresh.close()
    assert kill_sql_actor(cfg)


def test_a_stuck_call_times_out_naming_the_storage(tmp_path):
    """A call the actor cannot finish (the SQLite file locked by another process) gives up
    after the client's timeout instead of waiting for ever."""
    cfg = exp_config("ray-stuck", tmp_path, max_retry_times=0)
    writer = get_buffer_writer(cfg)
    writer.write([make_exp(0)])
    writer.storage.timeout = 1.0  # the bound of one call (normally the retries' worst case)
    lock = sqlite3.connect(tmp_path / "exps.db", timeout=30)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        start = time.monotonic()
        with pytest.raises(StorageTimeoutError, match="storage 'ray-stuck'.*did not answer"):
            writer.write([make_exp(1)])
        assert time.monotonic() - start < 10
    finally:
        lock.rollback()
        lock.close()
    writer.release()
    assert kill_sql_actor(cfg)


def test_a_reader_waits_for_a_live_writer_marked_through_the_actor(tmp_path):
    cfg = exp_config("ray-live", tmp_path, batch_size=4)
    writer = get_buffer_writer(cfg)
    writer.write([make_exp(0), make_exp(1)])
    mark = LiveWriterMark(get_buffer_writer(cfg).storage)

    def later() -> None:
        time.sleep(1.0)
        writer.write([make_exp(2), make_exp(3)])
        mark.close()

    thread = threading.Thread(target=later)
    thread.start()
    reader = get_buffer_reader(cfg)
    assert [e.info["i"] for e in reader.read()] == [0, 1, 2, 3]  # waited for the rest
    thread.join()
    with pytest.raises(StopIteration):  # the mark is gone: no waiting now
        reader.read()
    writer.release()
    assert kill_sql_actor(cfg)


def test_the_actor_holds_no_sqlite_file_open_between_calls(tmp_path):
    """Readers and writers left open (a test that failed half-way) keep nothing of a SQLite
    file open in the actor: a database deleted and created again at the same path (as
    Trinity-RFT's tests do between cases) is a new database, not one that trips over the old
    one's ``-wal`` / ``-shm`` files ("disk I/O error")."""
    db = tmp_path / "exps.db"
    old = exp_config("ray-old", tmp_path)
    writer, reader = get_buffer_writer(old), get_buffer_reader(old)
    writer.write([make_exp(0), make_exp(1)])
    assert len(reader.read()) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exps.db"]  # no side files left
    db.unlink()  # never closed: the handles stay open in the actor
    new = exp_config("ray-new", tmp_path)
    again = get_buffer_writer(new)
    again.write([make_exp(2)])
    assert [e.info["i"] for e in get_buffer_reader(new).read(1)] == [2]
    assert rows_in(db, "ray_new") == 1
    assert kill_sql_actor(old) and kill_sql_actor(new)


def test_a_relative_sqlite_path_reaches_the_actor_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _absolute_url("sqlite:///rel/x.db") == f"sqlite:///{tmp_path}/rel/x.db"
    for url in ("sqlite:////abs/x.db", "sqlite://", "sqlite:///:memory:", "postgresql://h/db"):
        assert _absolute_url(url) == url
