"""The Ray actor queue: writers in Ray tasks/actors and a reader in the driver meet by name."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

ray = pytest.importorskip("ray")

from trinity.buffer.buffer_reader import get_buffer_reader  # noqa: E402
from trinity.buffer.buffer_writer import get_buffer_writer  # noqa: E402
from trinity.buffer.storage.errors import QueueReadTimeout  # noqa: E402
from trinity.buffer.storage.queue import PriorityReplayQueue  # noqa: E402
from trinity.buffer.storage.ray_queue import (  # noqa: E402
    QueueActor,
    RayQueueClient,
    _decode,
    kill_ray_queue,
)
from trinity.common.config import ExperienceBufferConfig  # noqa: E402
from trinity.common.experience import Experience  # noqa: E402

# Ray workers cannot import this test module: what it sends them is pickled by value
pytestmark = pytest.mark.usefixtures("ray_pickles_this_module")


def make_exp(i: int, version: int = 0) -> Experience:
    return Experience(
        tokens=torch.tensor([1, 2, 3 + i]),
        prompt_length=2,
        logprobs=torch.tensor([-0.1 * i]),
        info={"i": i},
        model_version=version,
    )


def config(name: str, **kw) -> ExperienceBufferConfig:
    kw.setdefault("capacity", 6)
    kw.setdefault("max_read_timeout", 20)
    kw.setdefault("batch_size", 4)
    kw.setdefault("storage_type", "queue")
    return ExperienceBufferConfig(name=name, **kw)


@ray.remote(num_cpus=1)
def produce(cfg: ExperienceBufferConfig, batches: int, per_batch: int) -> int:
    writer = get_buffer_writer(cfg)  # Ray is initialized in the worker: the actor queue
    writer.acquire()
    for b in range(batches):
        writer.write([make_exp(b * per_batch + j) for j in range(per_batch)])
    writer.release()
    return batches * per_batch


def test_writer_task_and_driver_reader_exchange_experiences_until_end_of_stream():
    # a generous read timeout: on a loaded 2-core machine the producer's Ray worker took over
    # 20 s to start, and the first read gave up before it wrote (nothing here waits for it)
    cfg = config("ray-fifo", max_read_timeout=120)
    reader = get_buffer_reader(cfg)
    assert isinstance(reader.queue, RayQueueClient)  # chosen because ray.is_initialized()
    # 5 batches of 3 = 15 experiences through a capacity-6 queue: the task must block on
    # capacity until the driver reads, and the driver ends on the task's release
    ref = produce.remote(cfg, batches=5, per_batch=3)
    got: list[int] = []
    while True:
        try:
            batch = reader.read()
        except StopIteration:
            break
        got += [e.info["i"] for e in batch]
        assert len(batch) == 4 or len(got) == 15
    assert ray.get(ref) == 15
    assert got == list(range(15))
    assert reader.queue.qsize() == 0
    assert kill_ray_queue(cfg)


def test_actor_writer_async_reader_and_errors_cross_the_process_boundary():
    cfg = config("ray-prio", storage_type="priority_queue", max_read_timeout=0.5)

    @ray.remote(num_cpus=0)
    class Explorer:
        def __init__(self, cfg):
            self.writer = get_buffer_writer(cfg)
            self.writer.acquire()

        async def explore(self, versions):
            for i, v in enumerate(versions):  # one item per write (a task's group)
                await self.writer.write_async([make_exp(i, version=v)])

        def finish(self):
            return self.writer.release()

    explorer = Explorer.remote(cfg)
    ray.get(explorer.explore.remote([1, 4, 2, 3]))
    reader = get_buffer_reader(cfg)

    async def read() -> list[int]:
        return [e.info["i"] for e in await reader.read_async(2)]

    assert asyncio.run(read()) == [1, 3]  # model versions 4 and 3 first
    start = time.monotonic()
    with pytest.raises(QueueReadTimeout, match="queue 'ray-prio'"):
        reader.read(3)  # two left, the explorer is still live
    assert time.monotonic() - start < 10
    assert ray.get(explorer.finish.remote()) == 0
    assert [e.info["i"] for e in reader.read()] == [2, 0]
    with pytest.raises(StopIteration):
        reader.read()
    # the factory's in-process option still works while Ray is up
    local = get_buffer_writer(cfg.model_copy(update={"wrap_in_ray": False}))
    assert isinstance(local.queue, PriorityReplayQueue)
    assert kill_ray_queue(cfg)


def test_a_reader_and_writer_built_directly_pick_the_queue_as_the_factories_do():
    """``QueueReader(config)`` / ``QueueWriter(config)`` (how Trinity-RFT's tests build them)
    use the named actor while Ray is up, as the factories do; ``.queue.length.remote()`` (its
    tests' call) counts the priority queue's items. ``wrap_in_ray: false`` keeps the queue in
    this process (compat D8)."""
    from trinity.buffer.storage.queue import QueueReader, QueueWriter

    cfg = config("ray-direct", storage_type="priority_queue", max_read_timeout=0.5)
    writer, reader = QueueWriter(cfg), QueueReader(cfg)
    assert isinstance(writer.queue, RayQueueClient) and isinstance(reader.queue, RayQueueClient)
    assert get_buffer_reader(cfg).queue.actor._actor_id == reader.queue.actor._actor_id
    writer.write([make_exp(0, version=1), make_exp(1, version=1)])
    writer.write([make_exp(2, version=3)])
    assert ray.get(reader.queue.length.remote()) == 2  # items, not experiences
    assert [e.info["i"] for e in reader.read(2)] == [2, 0]  # the best item, then part of one
    assert ray.get(reader.queue.length.remote()) == 0  # experience 1 waits in the pool
    assert [e.info["i"] for e in reader.read(1)] == [1]
    local = QueueReader(cfg.model_copy(update={"wrap_in_ray": False}))
    assert isinstance(local.queue, PriorityReplayQueue)
    assert kill_ray_queue(cfg)


def test_step_ends_and_flush_cross_the_process_boundary():
    """The trainer's read stops at an explore step's end through the Ray queue actor too."""
    cfg = config("ray-steps", batch_size=4, min_batch_size=2)
    writer, reader = get_buffer_writer(cfg), get_buffer_reader(cfg)
    assert isinstance(writer.queue, RayQueueClient)
    writer.acquire()
    writer.write([make_exp(i) for i in range(3)])
    with pytest.raises(QueueReadTimeout):
        reader.queue.get(4, timeout=0.1, min_size=2)
    asyncio.run(writer.end_step_async())
    assert [e.info["i"] for e in reader.read()] == [0, 1, 2]
    writer.write([make_exp(7)])
    asyncio.run(writer.flush_async())
    assert [e.info["i"] for e in asyncio.run(reader.read_async())] == [7]
    writer.release()
    kill_ray_queue(cfg)


def test_a_fifo_read_of_whole_writes_hands_their_payloads_through_unchanged():
    """The FIFO actor keeps each write's bytes: a read of whole writes returns them as sent,
    a read that splits a write re-encodes only its part, and every row arrives once, in order."""
    cfg = config("ray-pass", capacity=32)
    client = get_buffer_writer(cfg).queue
    actor = client.actor
    first = Experience.serialize_many([make_exp(i) for i in range(4)])
    second = Experience.serialize_many([make_exp(i) for i in range(4, 7)])
    assert ray.get(actor.put.remote(first, None, 4)) == ("ok", None)
    assert ray.get(actor.put.remote(second, None, 3)) == ("ok", None)
    status, payloads = ray.get(actor.get.remote(7, 1.0))
    assert status == "ok" and payloads == [first, second]

    # a write without its size (an older client) is counted by decoding it
    assert ray.get(actor.put.remote(first, None)) == ("ok", None)
    client.put([make_exp(i) for i in range(4, 9)])
    status, payloads = ray.get(actor.get.remote(6, 1.0))  # all of the first, 2 of the second
    assert payloads[0] == first and len(payloads) == 2
    assert [e.info["i"] for e in Experience.deserialize_many(payloads[1])] == [4, 5]
    assert [e.info["i"] for e in client.get(3, timeout=1.0)] == [6, 7, 8]
    assert client.qsize() == 0
    kill_ray_queue(cfg)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/maps")
def test_a_fifo_queue_actor_passes_whole_writes_without_importing_torch(torch_loaded):
    """The FIFO actor only moves payloads: it starts without torch (about 1.5 s of CPU less
    while a run's rollout engine loads) and imports it only to split a write."""
    cfg = config("ray-light", capacity=32)
    client = get_buffer_writer(cfg).queue
    client.put([make_exp(i) for i in range(4)])
    client.put([make_exp(i) for i in range(4, 6)])
    assert [e.info["i"] for e in client.get(4, timeout=1.0)] == [0, 1, 2, 3]
    assert not torch_loaded(client.actor)
    assert [e.info["i"] for e in client.get(1, timeout=1.0)] == [4]  # splits the second write
    assert torch_loaded(client.actor)
    assert [e.info["i"] for e in client.get(1, timeout=1.0)] == [5]
    kill_ray_queue(cfg)


@settings(max_examples=60, deadline=None)
@given(
    writes=st.lists(st.integers(1, 5), min_size=1, max_size=6),
    batch=st.integers(1, 7),
    sized=st.booleans(),
)
def test_fifo_reads_of_any_size_return_every_write_in_order(writes, batch, sized):
    """The actor's body in-process (what runs inside the Ray actor): any split of any writes."""
    body = QueueActor(config("prop", capacity=40, batch_size=batch))
    body.acquire()
    n = 0
    for size in writes:
        payload = Experience.serialize_many([make_exp(n + j) for j in range(size)])
        assert body.put(payload, None, size if sized else 0) == ("ok", None)
        n += size
    body.release()
    got: list[int] = []
    while (outcome := body.get(batch, 1.0))[0] == "ok":
        batch_ids = [e.info["i"] for e in _decode(outcome[1])]
        assert 0 < len(batch_ids) <= batch
        got += batch_ids
    assert outcome == ("end", None)
    assert got == list(range(n))
