"""Model-free stand-ins for the run layer's sides: an explorer, a trainer, a weight
synchroniser and a queue between them, each doing the one thing the coordinator relies on.

They follow the real sides' contracts (:mod:`trinity.launcher.run.coordinator`): the explorer
commits a step (its ``on_commit`` hook) before writing it, generates with the version the
engines serve, holds the generation lock while generating; the trainer reads train batches
from the queue in a worker thread (blocking, as the real reader does) and takes whatever a
flush makes available; the synchroniser moves a version number.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from trinity.common.experience import EID, Experience


class EndOfQueue(StopAsyncIteration):
    """The queue was closed and drained (what the real reader's EndOfStream means)."""


class Injected(RuntimeError):
    """A failure a test injects."""


class FakeQueue:
    """FIFO of experiences; ``read(n)`` blocks until ``n`` are there; a flush marks the
    position written so far, up to which a read may take fewer (as the real queue's marks
    do); a close ends it. Thread-safe: the trainer reads in a worker thread."""

    def __init__(self, read_timeout: float = 10.0) -> None:
        self.items: list[Experience] = []
        self.written = 0
        self.taken = 0
        self.marks: list[int] = []  # flush positions (experiences written at the flush)
        self.closed = False
        self.read_timeout = read_timeout
        self.cond = threading.Condition()

    def write(self, exps: list[Experience]) -> None:
        with self.cond:
            self.items.extend(exps)
            self.written += len(exps)
            self.cond.notify_all()

    def flush(self) -> None:
        with self.cond:
            if self.written > self.taken:
                self.marks.append(self.written)
                self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def _size(self, n: int) -> int:
        if len(self.items) >= n:
            return n
        for mark in self.marks:
            if 0 < mark - self.taken <= len(self.items):
                return mark - self.taken
        return len(self.items) if self.closed else 0

    def read(self, n: int) -> list[Experience]:
        with self.cond:
            ready = self.cond.wait_for(
                lambda: self._size(n) > 0 or self.closed, timeout=self.read_timeout
            )
            if not ready:
                raise TimeoutError(f"no batch of {n} within {self.read_timeout}s (a deadlock?)")
            size = self._size(n)
            if size == 0:
                raise EndOfQueue("the queue is closed")
            batch, self.items = self.items[:size], self.items[size:]
            self.taken += size
            self.marks = [m for m in self.marks if m > self.taken]
            return batch


@dataclass
class Engines:
    """The rollout engines' weights, as far as the tests care: a version, and whether they
    are awake (mode colocate puts them to sleep for the trainer's turn)."""

    version: int = 0
    awake: bool = True
    calls: list[tuple[str, int]] = field(default_factory=list)
    #: a generation happened while asleep or while weights were replaced
    violations: list[str] = field(default_factory=list)
    loading: bool = False
    #: the engines take new weights under running requests (sync_style fully_async): a push
    #: without the generation lock is allowed, and a step may span two versions
    in_flight: bool = False


class FakeSupervisor:
    """What :class:`trinity.launcher.colocate.Colocation` drives: sleep, wake, call logs."""

    def __init__(self, engines: Engines) -> None:
        self.engines = engines

    async def sleep(self, level: int) -> None:
        self.engines.awake = False
        self.engines.calls.append(("sleep", self.engines.version))

    async def wake_up(self) -> None:
        self.engines.awake = True
        self.engines.calls.append(("wake_up", self.engines.version))

    async def take_call_logs(self) -> list[list[tuple[str, int]]]:
        calls, self.engines.calls = self.engines.calls, []
        return [calls]


class FakeExplorer:
    """Explores ``steps`` steps of ``batch`` tasks x ``repeat`` runs (fewer: the task set
    ends there); the experiences of step ``s`` carry the version the engines served.

    Args:
        fail_at: explore step that raises :class:`Injected` while generating.
        partial: explore steps whose tasks half fail (half a batch written).
        slow_step: ``(step, seconds)``: that step generates that long.
        total_steps: ``buffer.total_steps`` (``None``: until the task set ends).
    """

    def __init__(
        self,
        queue: FakeQueue,
        engines: Engines,
        *,
        steps: int,
        batch: int = 2,
        repeat: int = 2,
        total_steps: Optional[int] = None,
        fail_at: Optional[int] = None,
        partial: tuple[int, ...] = (),
        on_commit: Any = None,
        generation_lock: Optional[asyncio.Lock] = None,
        monitor: Any = None,
        eval_every: int = 0,
        slow_step: Optional[tuple[int, float]] = None,
    ) -> None:
        self.queue = queue
        self.slow_step = slow_step
        self.engines = engines
        self.task_steps = steps
        self.batch = batch
        self.repeat = repeat
        self._total = total_steps
        self.fail_at = fail_at
        self.partial = set(partial)
        self.on_commit = on_commit
        self.generation_lock = generation_lock or asyncio.Lock()
        self.monitor = monitor
        self.eval_readers = ["evalset"] if eval_every else []
        self.evaluated: list[int] = []
        self.step = 0
        self.last_metrics: dict[str, Any] = {}
        self.unlogged: dict[int, dict[str, Any]] = {}
        self.progress = None
        self.closed = False
        #: explore step -> the versions its experiences were generated with
        self.generated: dict[int, set[int]] = {}

    @property
    def total_steps(self) -> Optional[int]:
        return self._total if self._total is not None else self.task_steps

    async def explore_step(self) -> bool:
        if self._total is not None and self.step >= self._total:
            return False
        if self.step >= self.task_steps:
            return False  # the task set is used up
        step = self.step + 1
        async with self.generation_lock:
            if not self.engines.awake:
                self.engines.violations.append(f"step {step} generated while asleep")
            version = self.engines.version
            self.engines.calls.append(("generate", version))
            slow = self.slow_step is not None and self.slow_step[0] == step
            await asyncio.sleep(self.slow_step[1] if slow else 0)
            if self.fail_at == step:
                raise Injected(f"explore step {step} failed (injected)")
            last = self.engines.version
            if last != version and not self.engines.in_flight:
                self.engines.violations.append(f"step {step} saw weights change mid-step")
        tasks = self.batch // 2 if step in self.partial else self.batch
        exps = [
            Experience(
                tokens=[1, 2, 3],
                prompt_length=1,
                reward=1.0,
                eid=EID(batch=step, task=t, run=r),
                info={"model_version": version},
            )
            for t in range(tasks)
            for r in range(self.repeat)
        ]
        for exp in exps:
            exp.model_version = version
        self.generated[step] = {version, last}
        # commit (synchronously, as the real explorer does), then write
        self.step = step
        metrics = {"rollout/tasks": float(tasks), "rollout/model_version": float(version)}
        self.unlogged[step] = metrics
        if self.on_commit is not None:
            self.on_commit(step, exps)
        await asyncio.sleep(0)
        self.queue.write(exps)
        if self.monitor is not None:
            self.monitor.log(metrics, step)
        self.unlogged.pop(step, None)
        self.last_metrics = metrics
        return True

    async def eval(self) -> dict[str, float]:
        self.evaluated.append(self.step)
        metrics = {"eval/evalset/reward/mean@1": 1.0}
        if self.monitor is not None:
            self.monitor.log(metrics, self.step)
        return metrics

    async def write_restored(self, exps: list[Experience]) -> None:
        self.queue.write(exps)

    async def flush_output(self) -> None:
        self.queue.flush()

    async def close_output(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.close()

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "taskset": {"current_index": self.step * self.batch}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])


class FakeTrainer:
    """Trains on batches of ``batch_size`` experiences from the queue (in a worker thread,
    as the real trainer); records what each train step trained on.

    Args:
        fail_at: train step that raises :class:`Injected`.
        kill_on_save: a save at this train step is killed after the trainer's files are
            written and before the checkpoint is complete (no "latest" marker).
        slow_step: ``(step, seconds)``: that train step takes that long.
    """

    def __init__(
        self,
        queue: FakeQueue,
        *,
        batch_size: int,
        fail_at: Optional[int] = None,
        kill_on_save: Optional[int] = None,
        slow_step: Optional[tuple[int, float]] = None,
    ) -> None:
        self.queue = queue
        self.slow_step = slow_step
        self.batch_size = batch_size
        self.fail_at = fail_at
        self.kill_on_save = kill_on_save
        self.global_step = 0
        self.read = 0
        #: train step -> run ids of its experiences
        self.trained: dict[int, list[str]] = {}
        self.final_saved = False

    def sample(self) -> tuple[list[Experience], dict[str, float]]:
        exps = self.queue.read(self.batch_size)
        self.read += len(exps)
        versions = [int(e.model_version) for e in exps]
        return exps, {"sample/model_version/max": float(max(versions))}

    def train_step(self, exps: list[Experience]) -> dict[str, float]:
        step = self.global_step + 1
        if self.fail_at == step:
            raise Injected(f"train step {step} failed (injected)")
        if self.slow_step is not None and self.slow_step[0] == step:
            time.sleep(self.slow_step[1])
        self.trained[step] = sorted(e.eid.rid for e in exps)
        self.global_step = step
        return {"actor/loss": 1.0 / step, "batch/size": float(len(exps))}

    def save_checkpoint_files(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "weights.json"), "w") as f:
            json.dump({"step": self.global_step}, f)
        if self.kill_on_save == self.global_step:
            raise Injected(f"killed while saving global_step_{self.global_step} (injected)")

    def state_dict(self) -> dict[str, Any]:
        return {"global_step": self.global_step, "sample_strategy": {"read": self.read}}

    def load_checkpoint(self, directory: str) -> None:
        with open(os.path.join(directory, "weights.json")) as f:
            assert json.load(f)["step"] >= 0

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.global_step = int(state["global_step"])
        self.read = int(state["sample_strategy"]["read"])

    def save_final_hf(self) -> None:
        self.final_saved = True


class FakeSync:
    """Moves a version number into the engines (checking no step is generating)."""

    def __init__(self, engines: Engines, explorer: FakeExplorer, timeout: float = 5.0) -> None:
        self.engines = engines
        self.explorer = explorer
        self.timeout = timeout
        self.last_export_s = 0.0
        self.pushed: list[int] = []

    def weight_bytes(self) -> int:
        return 4 * 1024  # a fixed-size payload per push

    async def push(self, version: int) -> float:
        lock = self.explorer.generation_lock
        if not lock.locked() and not self.engines.in_flight:
            self.engines.violations.append(f"push {version} without the generation lock")
        await asyncio.sleep(0)
        self.engines.version = int(version)
        self.engines.calls.append(("update_weights", int(version)))
        self.pushed.append(int(version))
        return 0.0


class ListSink:
    """A metrics sink that keeps records (``(step, metrics)``)."""

    def __init__(self) -> None:
        self.records: list[tuple[int, dict[str, Any]]] = []

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.records.append((int(step), dict(metrics)))

    def close(self) -> None:
        pass
