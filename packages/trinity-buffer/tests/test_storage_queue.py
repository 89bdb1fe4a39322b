"""In-process queue storages: bounded FIFO, priority replay, end-of-stream, config errors."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch
from pydantic import ValidationError

from trinity.buffer.buffer_reader import get_buffer_reader
from trinity.buffer.buffer_writer import get_buffer_writer
from trinity.buffer.storage.errors import (
    QueueClosedError,
    QueueReadTimeout,
    QueueWriteTimeout,
    StorageConfigError,
)
from trinity.buffer.storage.queue import (
    ExperienceQueue,
    PriorityReplayQueue,
    QueueReader,
    QueueWriter,
    clear_queues,
)
from trinity.common.config import ExperienceBufferConfig, ReplayBufferConfig, StorageConfig
from trinity.common.experience import Experience
from trinity.common.protocols import ExperienceReader


def make_exp(i: int, version: int = 0) -> Experience:
    return Experience(
        tokens=torch.tensor([1, 2, 3, 4 + i]),
        prompt_length=2,
        logprobs=torch.tensor([-0.5, -float(i)]),
        reward=float(i),
        info={"i": i},
        model_version=version,
    )


def ids(exps: list[Experience]) -> list[int]:
    return [e.info["i"] for e in exps]


@pytest.fixture(autouse=True)
def _fresh_queues():
    clear_queues()
    yield
    clear_queues()


def queue_config(name: str = "q", **kw) -> ExperienceBufferConfig:
    kw.setdefault("capacity", 8)
    kw.setdefault("max_read_timeout", 5)
    kw.setdefault("batch_size", 2)
    return ExperienceBufferConfig(name=name, storage_type="queue", **kw)


def pair(cfg, **kw) -> tuple[QueueWriter, QueueReader]:
    writer = get_buffer_writer(cfg, use_ray=False, **kw)
    reader = get_buffer_reader(cfg, use_ray=False)
    assert isinstance(writer, QueueWriter) and isinstance(reader, QueueReader)
    return writer, reader


# ---- FIFO queue ----------------------------------------------------------------------


def test_reader_and_writer_meet_by_name_and_read_exact_batches():
    writer, reader = pair(queue_config("meet"))
    other = get_buffer_reader(queue_config("other", max_read_timeout=0.05), use_ray=False)
    assert reader.queue is writer.queue and other.queue is not writer.queue
    assert isinstance(reader, ExperienceReader)  # what the trainer's sample strategies take
    writer.write([make_exp(i) for i in range(5)])
    assert ids(reader.read()) == [0, 1]  # batch_size from the config
    assert ids(reader.read(3)) == [2, 3, 4]
    with pytest.raises(QueueReadTimeout):
        other.read()


def test_write_blocks_at_capacity_until_a_reader_frees_space():
    writer, reader = pair(queue_config("cap", capacity=4))
    writer.write([make_exp(i) for i in range(4)])
    done = threading.Event()

    def produce():
        writer.write([make_exp(4), make_exp(5)])
        done.set()

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    assert not done.wait(0.3), "a write into a full queue must block"
    assert writer.queue.qsize() == 4
    assert ids(reader.read(2)) == [0, 1]
    assert done.wait(2), "the write must go through once a reader frees space"
    t.join(2)
    assert ids(reader.read(4)) == [2, 3, 4, 5]


def test_write_timeout_at_capacity_is_a_clear_error_and_writes_nothing():
    writer, reader = pair(queue_config("full", capacity=3), write_timeout=0.2)
    writer.write([make_exp(i) for i in range(2)])
    start = time.monotonic()
    with pytest.raises(QueueWriteTimeout, match=r"queue 'full' stayed at capacity \(3\)"):
        writer.write([make_exp(2), make_exp(3)])
    assert 0.15 < time.monotonic() - start < 2
    assert writer.queue.qsize() == 2  # all-or-nothing: no half batch


def test_write_larger_than_capacity_streams_through():
    writer, reader = pair(queue_config("big", capacity=3))
    t = threading.Thread(target=writer.write, args=([make_exp(i) for i in range(7)],))
    t.start()
    got: list[int] = []
    while len(got) < 7:
        got += ids(reader.read(1))
    t.join(2)
    assert got == list(range(7))


def test_read_waits_then_times_out_naming_the_storage_without_losing_data():
    writer, reader = pair(queue_config("slow", max_read_timeout=0.3))
    writer.write([make_exp(0)])
    start = time.monotonic()
    with pytest.raises(QueueReadTimeout, match="queue 'slow'.*waiting for 2 experiences, 1"):
        reader.read()
    assert 0.25 < time.monotonic() - start < 3
    # a read that waits is served as soon as the batch is complete
    threading.Timer(0.1, writer.write, args=([make_exp(1)],)).start()
    assert ids(reader.read()) == [0, 1]


def test_end_of_stream_when_every_writer_released():
    cfg = queue_config("eos", max_read_timeout=0.3)
    w1, reader = pair(cfg)
    w2 = get_buffer_writer(cfg, use_ray=False)
    assert w1.acquire() == 1 and w2.acquire() == 2
    w1.write([make_exp(i) for i in range(3)])
    w2.write([make_exp(i) for i in range(3, 5)])
    assert w1.release() == 1
    assert ids(reader.read()) == [0, 1]
    assert ids(reader.read()) == [2, 3]
    with pytest.raises(QueueReadTimeout):  # one writer is still live: wait, do not stop
        reader.read()
    assert w2.release() == 0
    assert ids(reader.read()) == [4]  # the remainder, then the end
    with pytest.raises(StopIteration):
        reader.read()
    with pytest.raises(QueueClosedError, match="'eos'"):
        w1.write([make_exp(9)])


def test_release_wakes_a_blocked_reader_instead_of_hanging():
    writer, reader = pair(queue_config("wake", max_read_timeout=60))
    writer.acquire()
    result: dict[str, object] = {}

    def consume():
        try:
            result["batch"] = reader.read()
        except StopIteration:
            result["stop"] = True

    t = threading.Thread(target=consume, daemon=True)
    start = time.monotonic()
    t.start()
    time.sleep(0.1)
    writer.release()
    t.join(5)
    assert result == {"stop": True} and time.monotonic() - start < 5


def test_async_read_write_end_of_stream_and_cancellation_safety():
    writer, reader = pair(queue_config("aio", max_read_timeout=5))

    async def main() -> list[int]:
        writer.acquire()
        # a cancelled read must not swallow data that arrives later
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(reader.read_async(), 0.1)
        await writer.write_async([make_exp(i) for i in range(3)])
        got = ids(await reader.read_async())
        late = asyncio.create_task(reader.read_async())  # waits for the 4th experience
        await asyncio.sleep(0.05)
        await writer.write_async([make_exp(3)])
        got += ids(await late)
        writer.release()
        with pytest.raises(StopAsyncIteration):
            await reader.read_async()
        return got

    assert asyncio.run(main()) == [0, 1, 2, 3]


def test_async_write_blocks_at_capacity():
    writer, reader = pair(queue_config("aio-cap", capacity=2))

    async def main() -> None:
        await writer.write_async([make_exp(0), make_exp(1)])
        task = asyncio.create_task(writer.write_async([make_exp(2)]))
        await asyncio.sleep(0.1)
        assert not task.done()
        assert ids(await reader.read_async(1)) == [0]
        await asyncio.wait_for(task, 2)

    asyncio.run(main())
    assert ids(reader.read(2)) == [1, 2]


def test_batch_larger_than_capacity_is_rejected():
    _, reader = pair(queue_config("small", capacity=2))
    with pytest.raises(StorageConfigError, match="batch_size 3 exceeds capacity 2"):
        reader.read(3)


# ---- priority replay queue -------------------------------------------------------------


def prio_config(name: str = "pq", capacity: int = 4, **replay) -> ExperienceBufferConfig:
    return ExperienceBufferConfig(
        name=name,
        storage_type="priority_queue",
        capacity=capacity,
        max_read_timeout=0.3,
        batch_size=2,
        replay_buffer=ReplayBufferConfig(**replay),
    )


def use_counts(exps: list[Experience]) -> list[int]:
    return [e.info["use_count"] for e in exps]


def test_priority_queue_reads_highest_model_version_first():
    writer, reader = pair(prio_config())
    assert isinstance(writer.queue, PriorityReplayQueue)
    for i, version in enumerate([1, 5, 3, 4]):
        writer.write([make_exp(i, version=version)])
    assert ids(reader.read()) == [1, 3]  # versions 5, 4
    assert ids(reader.read()) == [2, 0]  # versions 3, 1


def test_a_write_is_one_item_read_whole_and_ranked_by_its_first_experience():
    """Trinity-RFT's unit: one write (a task's group, an explore step) is ranked, read and
    reused together; a read takes whole items and the rest of the last one starts the next."""
    writer, reader = pair(prio_config("items", capacity=2))
    writer.write([make_exp(0, version=1), make_exp(1, version=9)])  # ranked by version 1
    writer.write([make_exp(i, version=2) for i in (2, 3, 4)])
    q = writer.queue
    assert q.length() == 2 and q.qsize() == 5 and q.priorities() == [2.0, 1.0]
    batch = reader.read(4)  # more experiences than the capacity of 2 items: allowed
    assert ids(batch) == [2, 3, 4, 0] and use_counts(batch) == [1, 1, 1, 1]
    assert q.length() == 0 and q.qsize() == 1  # experience 1 waits in the pool
    writer.write([make_exp(5, version=7), make_exp(6, version=7)])
    assert ids(reader.read(2)) == [1, 5]  # the pool first, then the best item
    assert ids(reader.read(1)) == [6]


def test_replay_enable_on_a_plain_queue_selects_the_priority_queue():
    cfg = queue_config("replay", replay_buffer=ReplayBufferConfig(enable=True))
    writer, _ = pair(cfg)
    assert isinstance(writer.queue, PriorityReplayQueue)
    writer2, _ = pair(queue_config("plain"))
    assert isinstance(writer2.queue, ExperienceQueue)


def test_priority_capacity_evicts_lowest_priority():
    writer, reader = pair(prio_config())  # capacity: 4 items
    for i, version in enumerate([3, 1, 4, 2]):
        writer.write([make_exp(2 * i, version=version), make_exp(2 * i + 1, version=version)])
    writer.write([make_exp(10, version=5)])  # full: evicts the version-1 item, both experiences
    writer.write([make_exp(11, version=0)])  # ranks below everything held: dropped
    q = writer.queue
    assert q.length() == 4 and q.qsize() == 7 and q.evicted == 2
    assert q.priorities() == [5.0, 4.0, 3.0, 2.0]
    assert ids(reader.read(7)) == [10, 4, 5, 0, 1, 6, 7]


def test_priority_ties_read_and_evict_the_oldest_item_first():
    writer, reader = pair(prio_config("ties", capacity=2))
    for i in range(3):  # the third, at capacity and of equal priority, evicts the oldest
        writer.write([make_exp(i, version=1)])
    assert writer.queue.evicted == 1
    assert ids(reader.read(2)) == [1, 2]


def test_priority_reuse_with_cooldown_and_use_count_decay():
    writer, reader = pair(
        prio_config("reuse", reuse_cooldown_time=0.3, priority_fn_args={"decay": 2.0})
    )
    writer.write([make_exp(0, version=3), make_exp(1, version=3)])
    first = reader.read()
    assert ids(first) == [0, 1] and use_counts(first) == [1, 1]
    writer.write([make_exp(2, version=2)])
    writer.write([make_exp(3, version=0)])
    # the first item is cooling down: not readable yet, the fresh ones are
    assert ids(reader.read()) == [2, 3]
    start = time.monotonic()
    again = reader.read()  # waits for the cooldown to end
    assert 0.1 < time.monotonic() - start < 3
    assert ids(again) == [0, 1] and use_counts(again) == [2, 2]
    # after another cooldown all three items are back, re-ranked by use count: 2 and 3 used
    # once (2 - 2, 0 - 2), the first item twice (3 - 4)
    time.sleep(0.35)
    assert writer.queue.priorities() == [0.0, -1.0, -2.0]
    assert writer.queue.length() == 3


def test_priority_use_count_limit_and_end_of_stream():
    writer, reader = pair(
        prio_config(
            "limit",
            priority_fn="decay_limit_randomization",
            reuse_cooldown_time=0.0,
            priority_fn_args={"decay": 1.0, "use_count_limit": 2},
        )
    )
    writer.acquire()
    writer.write([make_exp(0, version=1), make_exp(1, version=1)])
    assert ids(reader.read()) == [0, 1]
    assert ids(reader.read()) == [0, 1]  # reused once more, then over the limit
    with pytest.raises(QueueReadTimeout, match="queue 'limit'"):
        reader.read()
    assert writer.queue.length() == 0
    writer.write([make_exp(2, version=0)])
    writer.release()
    assert ids(reader.read()) == [2]
    with pytest.raises(StopIteration):
        reader.read()


def test_priority_read_timeout_keeps_what_it_took_for_the_next_read():
    """A read takes items as they come (Trinity-RFT's order); one that times out loses none of
    them: they start the next read, ahead of a better item written since."""
    writer, reader = pair(prio_config("short"))
    writer.acquire()
    writer.write([make_exp(0, version=1)])
    with pytest.raises(QueueReadTimeout):
        reader.read(2)
    writer.write([make_exp(1, version=5)])
    writer.write([make_exp(2, version=9)])
    assert ids(reader.read(2)) == [0, 2]
    writer.release()
    assert ids(reader.read(2)) == [1]  # a closed queue hands out its remainder
    with pytest.raises(StopIteration):
        reader.read()


def test_a_waiting_priority_read_takes_each_item_as_it_is_written():
    """Trinity-RFT's order, whatever the thread timing: a read waiting with part of a batch
    takes the next item written, even when a better one follows at once."""
    writer, reader = pair(prio_config("waiting"))
    writer.write([make_exp(i, version=0) for i in range(3)])
    result: list[list[int]] = []
    thread = threading.Thread(target=lambda: result.append(ids(reader.read(4))))
    thread.start()
    deadline = time.monotonic() + 5
    while writer.queue._demand == 0 and time.monotonic() < deadline:  # the read waits
        time.sleep(0.01)
    writer.write([make_exp(i, version=1) for i in range(3, 6)])
    writer.write([make_exp(i, version=2) for i in range(6, 9)])
    thread.join(timeout=5)
    assert result == [[0, 1, 2, 3]]
    assert ids(reader.read(4)) == [4, 5, 6, 7]


def test_priority_fn_gets_the_item_and_its_defaults():
    """A priority function written for Trinity-RFT 0.6 takes the item and is built from its
    ``default_config`` updated by ``priority_fn_args``."""
    from trinity.buffer.storage.priority import PRIORITY_FUNC, PriorityFunction

    seen: list[list[int]] = []

    @PRIORITY_FUNC.register_module("test_by_reward_sum")
    class ByRewardSum(PriorityFunction):
        def __init__(self, scale: float, limit: int) -> None:
            self.scale, self.limit = scale, limit

        def __call__(self, item):
            seen.append(ids(item))
            keep = item[0].info.get("use_count", 0) < self.limit
            return self.scale * sum(e.reward for e in item), keep

        @classmethod
        def default_config(cls):
            return {"scale": 1.0, "limit": 1}

    try:
        writer, reader = pair(
            prio_config(
                "by-sum",
                priority_fn="test_by_reward_sum",
                priority_fn_args={"scale": -1.0},
                reuse_cooldown_time=0.0,
            )
        )
        writer.write([make_exp(1), make_exp(2)])  # -3
        writer.write([make_exp(0)])  # -0: read first
        assert ids(reader.read(3)) == [0, 1, 2]
        assert seen == [[1, 2], [0]]
        assert writer.queue.priority_fn.limit == 1  # from default_config
        assert writer.queue.length() == 0  # read once: not kept (the function's choice)
    finally:
        PRIORITY_FUNC.unregister("test_by_reward_sum")


def test_unknown_priority_fn_is_named():
    with pytest.raises(KeyError, match="linear_decy"):
        pair(prio_config("bad", priority_fn="linear_decy"))


# ---- config errors -------------------------------------------------------------------


def test_unknown_storage_type_is_a_clear_error():
    cfg = StorageConfig.model_construct(name="x", storage_type="redis", path=None)
    with pytest.raises(StorageConfigError, match="unknown storage_type 'redis'"):
        get_buffer_reader(cfg)
    with pytest.raises(StorageConfigError, match="storage_type"):
        get_buffer_writer(cfg)
    with pytest.raises(ValidationError, match="storage_type"):
        get_buffer_writer({"name": "x", "storage_type": "redis"})


@pytest.mark.parametrize("storage_type", ["sql", "file"])
def test_missing_path_is_a_clear_error(storage_type):
    cfg = StorageConfig(name="offline", storage_type=storage_type)
    with pytest.raises(StorageConfigError, match=rf"'offline'.*'{storage_type}' needs `path`"):
        get_buffer_writer(cfg)
    with pytest.raises(StorageConfigError, match="`path`"):
        get_buffer_reader(cfg)


def test_missing_batch_size_is_a_clear_error():
    cfg = queue_config("nobs", batch_size=0)
    reader = get_buffer_reader(cfg, use_ray=False)
    with pytest.raises(StorageConfigError, match="batch_size"):
        reader.read()


# ---- explore step ends: a read stops at a step's end instead of waiting for a full batch


def test_a_read_stops_at_a_step_end_with_at_least_min_size():
    """A step whose tasks partly failed wrote 3 of 4; the reader gets those 3 at once."""
    q = ExperienceQueue("steps", capacity=16)
    q.put([make_exp(i) for i in range(3)])
    with pytest.raises(QueueReadTimeout):  # no step end yet: a full batch is awaited
        q.get(4, timeout=0.05, min_size=2)
    q.end_step()
    assert ids(q.get(4, timeout=0.05, min_size=2)) == [0, 1, 2]
    # the next step is complete: a full batch, the mark at its end is consumed with it
    q.put([make_exp(i) for i in range(3, 7)])
    q.end_step()
    assert ids(q.get(4, timeout=0.05, min_size=2)) == [3, 4, 5, 6]


def test_a_remainder_below_min_size_reads_on_across_the_step_end():
    """A step that produced more than a batch leaves a remainder: with fewer than min_size
    it is joined by the next step's experiences instead of becoming a tiny batch."""
    q = ExperienceQueue("remainder", capacity=16)
    q.put([make_exp(i) for i in range(5)])
    q.end_step()
    assert ids(q.get(4, timeout=0.05, min_size=2)) == [0, 1, 2, 3]
    with pytest.raises(QueueReadTimeout):
        q.get(4, timeout=0.05, min_size=2)  # 1 left: below min_size, wait for more
    q.put([make_exp(i) for i in range(5, 8)])
    q.end_step()
    assert ids(q.get(4, timeout=0.05, min_size=2)) == [4, 5, 6, 7]


def test_steps_that_arrived_together_are_read_one_step_at_a_time():
    """With the explorer a step ahead (sync_offset 1), each read takes one step's output."""
    q = ExperienceQueue("ahead", capacity=16)
    for step in range(2):
        q.put([make_exp(10 * step + i) for i in range(3)])
        q.end_step()
    assert ids(q.get(4, min_size=2)) == [0, 1, 2]
    assert ids(q.get(4, min_size=2)) == [10, 11, 12]


def test_without_min_size_step_ends_are_ignored():
    q = ExperienceQueue("plain", capacity=16)
    q.put([make_exp(i) for i in range(3)])
    q.end_step()
    with pytest.raises(QueueReadTimeout):
        q.get(4, timeout=0.05)


def test_flush_releases_whatever_was_written_and_wakes_a_waiting_reader():
    """The explorer flushes before it waits for the trainer: a blocked read returns what
    there is (even below min_size) instead of both waiting for each other."""
    q = ExperienceQueue("flush", capacity=16)
    q.flush()  # nothing written yet: no release point, a later write is not cut short
    q.put([make_exp(0)])
    got: list = []
    reader = threading.Thread(target=lambda: got.append(q.get(4, timeout=5, min_size=3)))
    reader.start()
    time.sleep(0.1)
    assert reader.is_alive()
    q.flush()
    reader.join(timeout=5)
    assert not reader.is_alive() and ids(got[0]) == [0]


def test_async_read_stops_at_a_step_end():
    async def main():
        q = ExperienceQueue("async-steps", capacity=16)
        read = asyncio.ensure_future(q.get_async(4, timeout=5, min_size=2))
        await asyncio.sleep(0.05)
        await q.put_async([make_exp(i) for i in range(2)])
        await asyncio.sleep(0.05)
        assert not read.done()
        q.end_step()
        return ids(await read)

    assert asyncio.run(main()) == [0, 1]


def test_priority_queue_step_end_and_flush():
    q = PriorityReplayQueue("prio-steps", capacity=16)
    q.put([make_exp(i, version=i) for i in range(3)])
    with pytest.raises(QueueReadTimeout):
        q.get(4, timeout=0.05, min_size=2)
    q.end_step()
    assert sorted(ids(q.get(4, timeout=0.05, min_size=2))) == [0, 1, 2]
    q.put([make_exp(5)])
    q.flush()
    assert ids(q.get(4, timeout=0.05, min_size=2)) == [5]


def test_queue_reader_and_writer_carry_step_ends_and_min_batch_size():
    config = queue_config("rw-steps", batch_size=4, min_batch_size=2)
    writer, reader = get_buffer_writer(config), get_buffer_reader(config)
    writer.write([make_exp(i) for i in range(3)])
    writer.end_step()
    assert ids(reader.read()) == [0, 1, 2]
