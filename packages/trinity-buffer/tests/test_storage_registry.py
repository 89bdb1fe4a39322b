"""``storage_type`` dispatch goes through core's registries (issue 37): the factories build
whatever class :data:`trinity.common.storage.READER` / ``WRITER`` hold -- the built-ins, which
this package advertises as entry points, or a plugin's -- and the schema accepts the names."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from importlib import metadata
from typing import Any

import pytest
import torch

from trinity.buffer.base import BufferReader, BufferWriter, EndOfStream
from trinity.buffer.buffer_reader import get_buffer_reader
from trinity.buffer.buffer_writer import get_buffer_writer
from trinity.buffer.storage.errors import StorageConfigError
from trinity.buffer.storage.file import FileReader, FileWriter
from trinity.buffer.storage.queue import QueueReader, QueueWriter, clear_queues
from trinity.common import storage as core_storage
from trinity.common.config import ConfigError, ExperienceBufferConfig, StorageConfig, load_config
from trinity.common.experience import Experience

BUILT_INS = {"queue", "priority_queue", "sql", "file"}


def exps(n: int) -> list[Experience]:
    return [Experience(tokens=torch.arange(4), prompt_length=2, reward=float(i)) for i in range(n)]


#: what the plugin storage below holds, by storage name
MEMORY: dict[str, list[Experience]] = {}


class MemoryWriter(BufferWriter):
    """A plugin's writer: built as ``cls(config)``, nothing else."""

    def __init__(self, config: Any) -> None:
        self.name = config.name
        MEMORY.setdefault(self.name, [])

    def write(self, batch: Sequence[Experience]) -> None:
        MEMORY[self.name].extend(batch)


class MemoryReader(BufferReader):
    def __init__(self, config: Any) -> None:
        super().__init__(config)

    def _read(self, batch_size: int) -> list[Experience]:
        items = MEMORY.get(self.name, [])
        if not items:
            raise EndOfStream
        out, MEMORY[self.name] = items[:batch_size], items[batch_size:]
        return out


class LoggedQueueWriter(QueueWriter):
    """A plugin's queue: a subclass of the built-in queue writer keeps its options."""


class LoggedQueueReader(QueueReader):
    pass


@pytest.fixture
def plugin_storages() -> Iterator[None]:
    entries = [
        (core_storage.READER, "Memory", MemoryReader),
        (core_storage.WRITER, "Memory", MemoryWriter),
        (core_storage.READER, "logged_queue", LoggedQueueReader),
        (core_storage.WRITER, "logged_queue", LoggedQueueWriter),
        (core_storage.WRITER, "sink_only", MemoryWriter),
    ]
    for registry, name, cls in entries:
        registry.register_module(name, cls)
    try:
        yield
    finally:
        for registry, name, _ in entries:
            registry.unregister(name)
        MEMORY.clear()
        clear_queues()


def test_the_registries_are_cores_and_the_built_ins_are_entry_points() -> None:
    from trinity.buffer.reader import READER
    from trinity.buffer.writer import WRITER

    assert READER is core_storage.READER and WRITER is core_storage.WRITER
    for group in ("trinity.buffer_reader", "trinity.buffer_writer"):
        advertised = {ep.name for ep in metadata.entry_points(group=group)}
        assert advertised == BUILT_INS, group
    assert READER["file"] is FileReader and WRITER["file"] is FileWriter
    assert READER["priority_queue"] is QueueReader and WRITER["queue"] is QueueWriter


def test_the_factories_build_the_registered_built_ins(tmp_path) -> None:
    file_cfg = ExperienceBufferConfig(name="f", storage_type="file", path=str(tmp_path / "x.jsonl"))
    assert type(get_buffer_writer(file_cfg)) is FileWriter
    assert type(get_buffer_reader(file_cfg)) is FileReader
    queue_cfg = ExperienceBufferConfig(name="registry-q", storage_type="queue", batch_size=2)
    writer = get_buffer_writer(queue_cfg, use_ray=False, write_timeout=3.0)
    assert type(writer) is QueueWriter and writer.write_timeout == 3.0
    reader = get_buffer_reader(queue_cfg, use_ray=False)
    assert type(reader) is QueueReader and reader.queue is writer.queue
    clear_queues()


def test_a_plugin_storage_is_validated_and_built_by_name(plugin_storages) -> None:
    config = load_config(
        {"buffer": {"trainer_input": {"experience_buffer": {"storage_type": "memory"}}}}
    )
    storage = config.buffer.trainer_input.experience_buffer
    assert storage.storage_type == "Memory"  # the registered spelling
    storage = StorageConfig(name="mem", storage_type="MEMORY", batch_size=2)
    # a class taking only (config) gets no queue options, whatever the caller passes
    writer = get_buffer_writer(storage, use_ray=True, write_timeout=1.0)
    assert type(writer) is MemoryWriter
    with writer:
        writer.write(exps(3))
    reader = get_buffer_reader(storage, use_ray=True)
    assert type(reader) is MemoryReader
    assert [e.reward for batch in reader for e in batch] == [0.0, 1.0, 2.0]


def test_a_plugin_queue_subclass_keeps_the_queue_options(plugin_storages) -> None:
    storage = StorageConfig(name="logged", storage_type="logged_queue", batch_size=2)
    writer = get_buffer_writer(storage, use_ray=False, write_timeout=2.5)
    reader = get_buffer_reader(storage, use_ray=False)
    assert type(writer) is LoggedQueueWriter and writer.write_timeout == 2.5
    assert type(reader) is LoggedQueueReader and reader.queue is writer.queue
    writer.acquire()
    writer.write(exps(2))
    assert len(reader.read()) == 2


def test_a_storage_without_a_reader_says_so(plugin_storages) -> None:
    storage = StorageConfig(name="sink", storage_type="sink_only")
    assert type(get_buffer_writer(storage)) is MemoryWriter
    with pytest.raises(StorageConfigError, match="'sink_only' has no reader; readers are regis"):
        get_buffer_reader(storage)


def test_an_unknown_storage_type_lists_the_registered_ones(plugin_storages) -> None:
    storage = StorageConfig.model_construct(name="x", storage_type="memroy", path=None)
    with pytest.raises(StorageConfigError) as info:
        get_buffer_writer(storage)
    message = str(info.value)
    assert "unknown storage_type 'memroy'" in message
    assert all(name in message for name in [*BUILT_INS, "Memory", "logged_queue", "sink_only"])
    assert "did you mean 'Memory'?" in message
    with pytest.raises(ConfigError) as schema:
        load_config(
            {"buffer": {"trainer_input": {"experience_buffer": {"storage_type": "memroy"}}}}
        )
    (issue,) = schema.value.errors
    assert issue.path == "buffer.trainer_input.experience_buffer.storage_type"
    assert "'Memory'" in issue.message and "did you mean 'Memory'?" in issue.message


def test_core_build_reader_uses_the_buffer_factory(tmp_path):
    """``trinity.common.storage.build_reader`` (what a sample strategy built from Trinity-RFT's
    BufferConfig uses) builds what ``get_buffer_reader`` builds: here, a SQL reader that sees the
    writer's rows."""

    from trinity.common.experience import Experience
    from trinity.common.storage import build_reader

    config = ExperienceBufferConfig(
        name="via_core", storage_type="sql", path=str(tmp_path / "core.db"), batch_size=2
    )
    get_buffer_writer(config).write(
        [Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2) for _ in range(2)]
    )
    reader = build_reader(config)
    assert type(reader) is type(get_buffer_reader(config))
    assert len(reader.read()) == 2
