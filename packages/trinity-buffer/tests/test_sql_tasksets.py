"""Task sets in SQL (Trinity-RFT's ``storage_type: sql`` task sets): task rows written through
the buffer writer, read back as Task batches by the buffer reader and the task set reader.

Runs on SQLite, and on PostgreSQL too where ``TRINITY_TEST_POSTGRES_URL`` is set.
"""

from __future__ import annotations

import os
import uuid

import pytest
import torch

from trinity.buffer.buffer_reader import get_buffer_reader
from trinity.buffer.buffer_writer import get_buffer_writer
from trinity.buffer.storage.errors import StorageConfigError
from trinity.buffer.storage.sql import SQLStorage
from trinity.buffer.taskset import get_taskset_reader
from trinity.common.config import ExperienceBufferConfig, FormatConfig, TasksetConfig
from trinity.common.experience import Experience
from trinity.common.workflows import Task

POSTGRES_URL = os.environ.get("TRINITY_TEST_POSTGRES_URL")


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param(
            "postgresql",
            marks=pytest.mark.skipif(
                not POSTGRES_URL,
                reason="no PostgreSQL server: set TRINITY_TEST_POSTGRES_URL "
                "(scripts/test.sh starts one)",
            ),
        ),
    ]
)
def db_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tasks.db'}"
    return POSTGRES_URL  # type: ignore[return-value]


def _taskset(url: str, name: str, **kwargs) -> TasksetConfig:
    kwargs.setdefault("batch_size", 4)
    return TasksetConfig(
        name=name,
        storage_type="sql",
        path=url,
        default_workflow_type="math_workflow",
        default_reward_fn_type="math_reward",
        format=FormatConfig(prompt_key="question", response_key="answer"),
        **kwargs,
    )


def _rows(n: int) -> list[dict]:
    return [{"question": f"question_{i}", "answer": f"answer_{i}"} for i in range(n)]


def _unique(prefix: str) -> str:  # PostgreSQL tables outlive a test
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _read_all(reader) -> list:
    out = []
    while True:
        try:
            out.extend(reader.read())
        except StopIteration:
            return out


def test_task_rows_written_then_read_as_task_batches(db_url):
    config = _taskset(db_url, _unique("tasks"))
    writer = get_buffer_writer(config.to_storage_config())
    assert writer.acquire() == 1
    writer.write(_rows(8))
    reader = get_buffer_reader(config.to_storage_config())
    first = reader.read()
    assert [type(t) for t in first] == [Task] * 4
    assert first[0].raw_task == {"question": "question_0", "answer": "answer_0"}
    assert first[0].workflow == "math_workflow" and first[0].reward_fn == "math_reward"
    assert first[0].task_desc == "question_0" and first[0].truth == "answer_0"
    assert [t.task_id for t in first] == [0, 1, 2, 3]
    assert len(reader.read()) == 4
    with pytest.raises(StopIteration):
        reader.read()
    assert writer.release() == 0


def test_a_train_task_set_drops_a_short_last_batch_an_eval_one_keeps_it(db_url):
    name = _unique("short")
    get_buffer_writer(_taskset(db_url, name)).write(_rows(6))
    assert len(_read_all(get_buffer_reader(_taskset(db_url, name)))) == 4
    evaluated = _read_all(get_buffer_reader(_taskset(db_url, name, is_eval=True)))
    assert [t.raw_task["question"] for t in evaluated] == [f"question_{i}" for i in range(6)]
    assert all(t.is_eval for t in evaluated)


def test_the_task_set_reader_reads_a_sql_task_set_with_its_selector_and_position(db_url):
    name = _unique("selected")
    writer = get_buffer_writer(_taskset(db_url, name))
    writer.write(_rows(5))
    writer.write([Task(raw_task={"question": "question_5", "answer": "answer_5"})])
    config = _taskset(db_url, name, batch_size=2, total_epochs=2)
    config.data_selector.selector_type = "shuffle"
    reader = get_taskset_reader(config)
    first = reader.read()
    state = reader.state_dict()
    rest = [t.raw_task["question"] for t in reader.read()]
    resumed = get_taskset_reader(config, state=state)
    assert [t.raw_task["question"] for t in resumed.read()] == rest
    seen = (
        [t.raw_task["question"] for t in first]
        + rest
        + [t.raw_task["question"] for t in reader.read()]
    )
    assert sorted(seen) == [f"question_{i}" for i in range(6)]  # epoch 1: each row once


def test_a_table_holds_one_kind_of_row(db_url):
    name = _unique("kinds")
    writer = get_buffer_writer(_taskset(db_url, name))
    writer.write(_rows(2))
    with pytest.raises(TypeError, match="holds task rows"):
        writer.write([Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2)])
    with pytest.raises(TypeError, match="one kind per table"):
        writer.write([{"question": "q"}, Experience(tokens=torch.tensor([1, 2]), prompt_length=1)])
    with pytest.raises(StorageConfigError, match="holds task rows, not experience rows"):
        SQLStorage(_taskset(db_url, name), kind="experience")


def test_an_experience_table_stays_an_experience_table(db_url):
    name = _unique("exps")
    buffer = ExperienceBufferConfig(name=name, storage_type="sql", path=db_url, batch_size=2)
    exps = [Experience(tokens=torch.tensor([1, 2, 3 + i]), prompt_length=2) for i in range(2)]
    get_buffer_writer(buffer).write(exps)
    # even a config that looks like a task set reads the experiences the table holds
    read = get_buffer_reader(_taskset(db_url, name, batch_size=2)).read()
    assert [type(e) for e in read] == [Experience, Experience]
    with pytest.raises(StorageConfigError, match="a table of experiences"):
        get_taskset_reader(_taskset(db_url, name))


def test_a_missing_sql_task_set_is_named(tmp_path):
    with pytest.raises(StorageConfigError, match="has no table named 'absent'"):
        get_taskset_reader(_taskset(f"sqlite:///{tmp_path / 'none.db'}", "absent"))


def test_a_writer_that_wrote_nothing_has_position_zero_and_makes_no_table(tmp_path):
    url = f"sqlite:///{tmp_path / 'lazy.db'}"
    writer = get_buffer_writer(_taskset(url, "lazy"))
    assert writer.position() == 0 and writer.truncate(0) == 0
    assert SQLStorage(_taskset(url, "lazy")).kind is None
