"""Writers' ``acquire()`` / ``release()`` work called plainly and awaited (Trinity-RFT 0.6
declares them ``async``), for the built-in writers, subclasses and 0.6-style writers."""

from __future__ import annotations

import asyncio

import pytest
import torch

from trinity.buffer.base import BufferWriter, WriterCount
from trinity.buffer.buffer_reader import get_buffer_reader
from trinity.buffer.buffer_writer import get_buffer_writer
from trinity.buffer.pipelines.experience_pipeline import ExperiencePipeline
from trinity.buffer.storage.queue import clear_queues
from trinity.common.config import ExperienceBufferConfig
from trinity.common.experience import Experience


def _exps(n: int) -> list[Experience]:
    return [Experience(tokens=torch.tensor([1, 2, 3 + i]), prompt_length=2) for i in range(n)]


@pytest.fixture(autouse=True)
def _fresh_queues():
    clear_queues()
    yield
    clear_queues()


def _queue(name: str) -> ExperienceBufferConfig:
    return ExperienceBufferConfig(
        name=name, storage_type="queue", batch_size=2, max_read_timeout=0.5, capacity=8
    )


def test_queue_counts_are_the_same_plain_and_awaited():
    cfg = _queue("both_ways")
    first = get_buffer_writer(cfg, use_ray=False)
    second = get_buffer_writer(cfg, use_ray=False)
    reader = get_buffer_reader(cfg, use_ray=False)

    async def trinity_rft_style() -> None:  # as Trinity-RFT 0.6 code writes it
        assert await first.acquire() == 2
        first.write(_exps(3))
        assert await first.release() == 1  # the plain acquire below still holds the stream

    assert second.acquire() == 1
    asyncio.run(trinity_rft_style())
    assert len(reader.read()) == 2
    assert second.release() == 0  # the last release ends the stream
    assert len(reader.read()) == 1
    with pytest.raises(StopIteration):
        reader.read()


def test_counts_are_ints_that_can_be_awaited():
    writer = get_buffer_writer(_queue("ints"), use_ray=False)
    count = writer.acquire()
    assert isinstance(count, WriterCount) and count == 1 and count + 1 == 2
    assert asyncio.run(_await(writer.release())) == 0


async def _await(value):
    return await value


def test_sql_writer_release_can_be_awaited(tmp_path):
    cfg = ExperienceBufferConfig(
        name="sql_awaited", storage_type="sql", path=str(tmp_path / "b.db"), batch_size=2
    )
    writer = get_buffer_writer(cfg)

    async def run() -> tuple[int, int]:
        acquired = await writer.acquire()
        await writer.write_async(_exps(2))
        return acquired, await writer.release()

    assert asyncio.run(run()) == (1, 0)
    assert len(get_buffer_reader(cfg).read()) == 2


class CountingWriter(BufferWriter):
    """A writer written for this package: plain ``acquire`` / ``release`` overrides."""

    def __init__(self) -> None:
        self.count = 0
        self.rows: list[Experience] = []

    def write(self, exps):
        self.rows.extend(exps)

    def acquire(self) -> int:
        self.count += 1
        return self.count

    def release(self) -> int:
        self.count -= 1
        return self.count


class TrinityRFTWriter(BufferWriter):
    """A writer written for Trinity-RFT 0.6: ``async def acquire`` / ``release``."""

    def __init__(self) -> None:
        self.count = 0

    def write(self, exps):
        pass

    async def acquire(self) -> int:
        await asyncio.sleep(0)
        self.count += 1
        return self.count

    async def release(self) -> int:
        self.count -= 1
        return self.count


def test_a_subclass_override_is_awaitable_too():
    writer = CountingWriter()
    assert writer.acquire() == 1
    assert asyncio.run(_await(writer.acquire())) == 2
    assert asyncio.run(writer.release_async()) == 1
    with writer:
        assert writer.count == 2
    assert writer.count == 1


def test_a_trinity_rft_style_async_writer_in_sync_and_async_callers():
    writer = TrinityRFTWriter()
    with writer:  # the context manager runs the coroutine
        assert writer.count == 1
    assert writer.count == 0
    assert asyncio.run(writer.acquire_async()) == 1
    assert asyncio.run(writer.release_async()) == 0


def test_the_experience_pipeline_acquires_and_releases_either_kind():
    for writer in (CountingWriter(), TrinityRFTWriter()):
        pipeline = ExperiencePipeline(operators=[], writer=writer)
        asyncio.run(pipeline.prepare())
        assert writer.count == 1
        asyncio.run(pipeline.close())
        assert writer.count == 0
