"""Storage behaviour Trinity-RFT 0.6's buffer tests rely on (tests/trinity_rft_compat)."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import types
from pathlib import Path

import numpy as np
import pytest

from trinity.buffer import get_buffer_reader
from trinity.buffer.base import WriterCount
from trinity.buffer.operators import ExperienceOperatorError
from trinity.buffer.pipelines import ExperiencePipeline
from trinity.buffer.reader import READER
from trinity.buffer.reader.file_reader import FileReader, TaskFileReader
from trinity.buffer.storage.queue import LinearDecayPriority, clear_queues, get_queue
from trinity.buffer.storage.sql import SQLReader, SQLTaskStorage, SQLWriter
from trinity.buffer.task_scheduler import TasksetScheduler, get_taskset_scheduler
from trinity.common.config import (
    Config,
    ExperienceBufferConfig,
    ExperiencePipelineConfig,
    StorageConfig,
    TasksetConfig,
)
from trinity.common.experience import Experience
from trinity.common.workflows import Task


def _rows(n: int, tag: str = "q") -> list[dict]:
    return [{"question": f"{tag}{i}", "answer": str(i)} for i in range(n)]


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path.parent)


def _taskset(path: str, **kw) -> TasksetConfig:
    base = dict(
        path=path,
        format={"prompt_key": "question", "response_key": "answer"},
        default_workflow_type="math_workflow",
        batch_size=2,
    )
    base.update(kw)
    return TasksetConfig(**base)


def test_get_buffer_reader_reads_a_task_set_file_as_tasks(tmp_path):
    config = _taskset(_jsonl(tmp_path / "ds" / "train.jsonl", _rows(5)), index=1)
    reader = get_buffer_reader(config)
    assert isinstance(reader, TaskFileReader) and isinstance(reader, FileReader)
    tasks = asyncio.run(reader.read_async())
    assert [t.raw_task["question"] for t in tasks] == ["q1", "q2"]
    assert all(isinstance(t, Task) for t in tasks)

    # a reader registered for a storage type of its own is used for it
    class CustomReader(TaskFileReader):
        pass

    READER.register_module("test_custom_task_reader", CustomReader)
    try:
        config.storage_type = "test_custom_task_reader"
        assert isinstance(get_buffer_reader(config), CustomReader)
    finally:
        READER.unregister("test_custom_task_reader")


def test_sql_task_storage_loads_a_data_set_and_the_reader_honours_index(tmp_path):
    db = f"sqlite:///{tmp_path / 'tasks.db'}"
    config = _taskset(db, storage_type="sql", name="tasks", batch_size=3, is_eval=True, index=2)
    SQLTaskStorage.load_from_dataset(_rows(7), config).close()
    reader = get_buffer_reader(config)
    assert isinstance(reader, SQLReader)
    got = []
    while True:
        try:
            got += [t.raw_task["question"] for t in reader.read()]
        except StopIteration:
            break
    assert got == [f"q{i}" for i in range(2, 7)]  # rows before index skipped; last batch short


def test_a_deleted_sqlite_file_is_opened_afresh(tmp_path):
    path = tmp_path / "exp.db"
    config = ExperienceBufferConfig(name="exp", storage_type="sql", path=f"sqlite:///{path}")
    exps = [Experience(tokens=[1, 2, 3], prompt_length=1, reward=1.0) for _ in range(2)]
    SQLWriter(config).write(exps)  # not closed: its engine stays cached in this process
    os.remove(path)
    SQLWriter(config).write(exps[:1])
    reader = SQLReader(config.model_copy(update={"batch_size": 1}))
    assert len(reader.read()) == 1
    with pytest.raises(StopIteration):
        reader.read()  # only the new file's row, not the deleted file's two


def test_a_queue_opened_with_other_settings_is_a_new_queue():
    clear_queues()
    try:
        fifo = get_queue(StorageConfig(name="q", storage_type="queue", capacity=4))
        assert get_queue(StorageConfig(name="q", storage_type="queue", capacity=4)) is fifo
        bigger = get_queue(StorageConfig(name="q", storage_type="queue", capacity=8))
        assert bigger is not fifo and bigger.capacity == 8
    finally:
        clear_queues()


def test_replay_priority_reads_the_model_version_trinity_rft_records_in_info():
    # Trinity-RFT 0.6's signature: the item (one write's experiences), ranked by its first
    exp = Experience(tokens=[1, 2, 3], prompt_length=1, info={"model_version": 5, "use_count": 2})
    assert LinearDecayPriority(decay=0.5)([exp]) == (4.0, True)
    exp.model_version = 7
    exp.info["use_count"] = 0
    assert LinearDecayPriority(decay=0.5)([exp]) == (7.0, True)


def test_writer_count_runs_as_a_finished_coroutine():
    assert asyncio.run(WriterCount(3)) == 3  # asyncio.run(writer.release()), as 0.6 code does

    async def awaited() -> int:
        return await WriterCount(2)

    assert asyncio.run(awaited()) == 2 and WriterCount(2) + 1 == 3


def test_pipeline_takes_serialized_experiences_and_saves_its_input(tmp_path):
    config = Config.model_construct()  # only data_processor and buffer are read
    config.data_processor.experience_pipeline = ExperiencePipelineConfig(
        save_input=True, input_save_path=str(tmp_path / "input.jsonl")
    )
    out = ExperienceBufferConfig(name="out", storage_type="file", path=str(tmp_path / "o.jsonl"))
    config.buffer.trainer_input.experience_buffer = out
    pipeline = ExperiencePipeline(config)
    exps = [Experience(tokens=[1, 2, 3], prompt_length=1, reward=float(i)) for i in range(3)]
    metrics = asyncio.run(pipeline.process(Experience.serialize_many(exps)))
    assert metrics["experience_pipeline/experience_count"] == 3
    assert len((tmp_path / "input.jsonl").read_text().splitlines()) == 3


def test_operator_errors_survive_pickling():
    err = pickle.loads(pickle.dumps(ExperienceOperatorError("boom", index=2, name="f")))
    assert (str(err), err.index, err.name) == ("boom", 2, "f")


def test_task_scheduler_with_trinity_rft_0_6_arguments(tmp_path):
    a = _taskset(_jsonl(tmp_path / "a" / "train.jsonl", _rows(3, "a")), name="a")
    b = _taskset(_jsonl(tmp_path / "b" / "train.jsonl", _rows(5, "b")), name="b")
    buffer = types.SimpleNamespace(
        batch_size=4,
        total_epochs=1,
        total_steps=None,
        explorer_input=types.SimpleNamespace(get_tasksets=lambda: [a, b]),
    )
    config = types.SimpleNamespace(buffer=buffer)
    scheduler = get_taskset_scheduler({}, config)
    first = scheduler.read()
    # Trinity-RFT 0.6's schedule: epoch e interleaves the task sets by default_rng(e)
    order = np.random.default_rng(0).permutation(np.repeat([0, 1], [3, 5]))[:4].tolist()
    assert sorted(t.index["taskset_id"] for t in first) == sorted(order)
    states = scheduler.state_dict()
    assert isinstance(states, list) and len(states) == 2
    resumed = TasksetScheduler({"latest_iteration": 1, "taskset_states": states}, config)
    assert [t.raw_task for t in resumed.read()] == [t.raw_task for t in scheduler.read()]
    with pytest.raises(StopIteration):
        resumed.read()
    scheduler.feedback({})  # nothing to feed back: no effect
