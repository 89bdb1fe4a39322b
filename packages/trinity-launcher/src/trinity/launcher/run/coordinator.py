"""The coordinator: one object drives every mode's run -- an explore loop, a train loop, and
(for ``dynamic_by_explorer``) a task that answers the explorer's requests for weights.

What differs between modes and sync styles is handed to it, not branched on inside it:

* the **sides** present: an explorer (modes ``explore``, ``both``, ``colocate``), a trainer
  (``train``, ``both``, ``colocate``), and a weight synchroniser where there are both;
* a **sync policy** (:mod:`trinity.launcher.run.policies`): when an explore step may start,
  when the trainer pushes, when the explorer asks;
* a **turn policy**: whether a train step and its push take turns with generation on shared
  devices (``colocate``);
* the **records** (one merged record per step, or each as it comes) and the
  **checkpointer** (:class:`~trinity.launcher.checkpoint.RunCheckpointer`).

The loops meet on a :class:`~trinity.launcher.run.clock.SyncClock` guarded by one
``asyncio.Condition``; every wait is for a clock condition that the other loop's progress or
end makes true, so a loop that ends (or fails) releases the other: the explorer's end closes
its output (the trainer's reader drains and sees the end), the trainer's end sets
``trainer_done`` (the explorer stops waiting for weights). A preemption request
(:mod:`~trinity.launcher.run.preemption`) cancels the explore loop and ends the train loop
with a checkpoint at its next step boundary. The sides are duck-typed
(:class:`ExplorerSide`, :class:`TrainerSide`, :class:`WeightSync`), so the rules are tested
with fakes in milliseconds (``packages/trinity-launcher/tests/test_coordinator.py``) and run
with the real explorer (Ray actors), trainer (verl) and synchroniser unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Protocol

from trinity.common.experience import Experience
from trinity.launcher.run.clock import SyncClock
from trinity.launcher.run.ledger import EXPERIENCE_IDS_KEY, ExperienceLedger, experience_ids
from trinity.launcher.run.policies import SeparateDevices, SyncPolicy, TurnPolicy, Unsynced
from trinity.launcher.run.preemption import Preempted, StopRequest
from trinity.launcher.run.records import DirectRecords
from trinity.utils.log import get_logger

if TYPE_CHECKING:
    from trinity.launcher.checkpoint import RunCheckpointer

__all__ = ["Coordinator", "ExplorerSide", "RunSettings", "TrainerSide", "WeightSync"]

logger = get_logger(__name__)


class ExplorerSide(Protocol):
    """What the coordinator needs of an explorer (:class:`trinity.launcher.explorer.Explorer`).

    It was built with the run's commit hook (``on_commit``: the experiences a step is about to
    write) and generation lock, and logs its own metrics to the run's records.
    """

    step: int
    eval_readers: list[Any]
    last_metrics: dict[str, Any]
    unlogged: dict[int, dict[str, Any]]
    progress: Any

    @property
    def total_steps(self) -> Optional[int]: ...

    async def explore_step(self) -> bool: ...

    async def eval(self) -> dict[str, float]: ...

    async def write_restored(self, exps: list[Experience]) -> None: ...

    async def flush_output(self) -> None: ...

    async def close_output(self) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...


class TrainerSide(Protocol):
    """What the coordinator needs of a trainer (:class:`trinity.launcher.trainer.trainer.Trainer`);
    its methods block (they run in worker threads)."""

    global_step: int

    def sample(self) -> tuple[list[Experience], dict[str, float]]: ...

    def train_step(self, exps: list[Experience]) -> dict[str, float]: ...

    def save_final_hf(self) -> Any: ...


class WeightSync(Protocol):
    """What the coordinator needs of a synchroniser (:class:`trinity.launcher.synchronizer.Synchronizer`)."""

    timeout: float
    last_export_s: float

    async def push(self, version: int) -> float: ...

    def weight_bytes(self) -> int: ...


def train_step_limit(config: Any) -> Optional[int]:
    """The last train step: the smaller of ``buffer.total_steps`` (where the task set's steps
    end) and ``trainer.total_steps`` (Trinity-RFT's "training stops when reaching this step");
    ``None`` when neither is set (the end of the data ends training)."""
    limits = [int(v) for v in (config.buffer.total_steps, config.trainer.total_steps) if v]
    return min(limits) if limits else None


@dataclass(frozen=True)
class RunSettings:
    """What the coordinator reads of a config (nothing else of it).

    Attributes:
        total_steps: where the train loop stops: :func:`train_step_limit` (``buffer.total_steps``
            and ``trainer.total_steps``, the smaller; ``None``: at the end of the data).
        save_interval: ``trainer.save_interval`` (0: a checkpoint only at the end).
        eval_interval: ``explorer.eval_interval`` (explore steps).
        eval_on_startup: ``explorer.eval_on_startup``.
    """

    total_steps: Optional[int] = None
    save_interval: int = 0
    eval_interval: int = 1
    eval_on_startup: bool = False

    @classmethod
    def from_config(cls, config: Any) -> RunSettings:
        return cls(
            total_steps=train_step_limit(config),
            save_interval=int(config.trainer.save_interval or 0),
            eval_interval=int(config.explorer.eval_interval),
            eval_on_startup=bool(config.explorer.eval_on_startup),
        )


class Coordinator:
    """Drives one run (see the module docstring).

    Args:
        settings: the run's steps and intervals.
        explorer: the explorer side (``None``: the run does not explore).
        trainer: the trainer side (``None``: the run does not train).
        sync: moves the trainer's weights into the rollout engines (runs with both sides).
        policy: the sync style (default :class:`Unsynced`: one side only).
        turns: how train steps share devices with generation (default: they do not).
        records: gathers and writes each step's record (default: each log written at once).
        checkpointer: saves and resumes the run's state (``None``: nothing is saved -- an
            explorer driven on its own, e.g. ``Explorer.explore``).
        ledger: the experiences committed to the trainer's queue and not yet trained (the
            explorer was built with its ``on_commit``).
        generation_lock: the explorer's generation lock (the explorer was built with it).
        restored: experiences a resumed run puts back into the queue first.
        trainer_progress: shows train steps where no explorer shows progress (mode train).
        end_of_data: what the trainer's ``sample`` raises when its data is used up (the train
            loop ends there; default: the buffer's ``EndOfStream``, ``StopAsyncIteration``).
        stop: a preemption request (:mod:`~trinity.launcher.run.preemption`): once set, the
            explore loop is cancelled (its step in flight was not committed), the train loop
            ends after its current step with a checkpoint, and :meth:`run` raises
            :class:`~trinity.launcher.run.preemption.Preempted`.
    """

    def __init__(
        self,
        settings: RunSettings,
        *,
        explorer: Optional[ExplorerSide] = None,
        trainer: Optional[TrainerSide] = None,
        sync: Optional[WeightSync] = None,
        policy: Optional[SyncPolicy] = None,
        turns: Optional[TurnPolicy] = None,
        records: Any = None,
        checkpointer: Optional[RunCheckpointer] = None,
        ledger: Optional[ExperienceLedger] = None,
        generation_lock: Optional[asyncio.Lock] = None,
        restored: Optional[list[Experience]] = None,
        trainer_progress: Any = None,
        end_of_data: Optional[tuple[type[BaseException], ...]] = None,
        stop: Optional[StopRequest] = None,
    ) -> None:
        if explorer is None and trainer is None:
            raise ValueError("a run needs an explorer, a trainer or both")
        if explorer is not None and trainer is not None and sync is None:
            raise ValueError("a run that explores and trains needs a weight synchroniser")
        if trainer is not None and checkpointer is None:
            raise ValueError("a run that trains needs a checkpointer")
        self.settings = settings
        self.explorer = explorer
        self.trainer = trainer
        self.sync = sync
        self.policy = policy if policy is not None else Unsynced()
        self.turns = turns if turns is not None else SeparateDevices()
        self.records = records if records is not None else DirectRecords(_NullSink())
        self.checkpointer = checkpointer
        self.ledger = ledger if ledger is not None else ExperienceLedger()
        self.generation_lock = generation_lock if generation_lock is not None else asyncio.Lock()
        self.restored = list(restored or [])
        self.trainer_progress = trainer_progress
        if end_of_data is None:
            from trinity.buffer.buffer_reader import EndOfStream

            end_of_data = (EndOfStream, StopAsyncIteration)
        self.end_of_data = end_of_data
        self.stop = stop
        self.clock = SyncClock.at(trainer.global_step if trainer is not None else 0)
        if explorer is not None:  # a resumed explorer is already past its committed steps
            self.clock.explored_to(explorer.step)
        #: the last train step's metrics (or, without a trainer, the explorer's last step's)
        self.last: dict[str, Any] = {}
        self._changed = asyncio.Condition()
        self._training = asyncio.Lock()  # held while the trainer's weights change

    # ------------------------------------------------------------------ the run
    async def run(self) -> dict[str, Any]:
        """Run the loops until the task set, the data or ``total_steps`` ends; returns the
        last step's metrics. When a loop raises, the others are cancelled and it re-raises."""
        if self.sync is not None and self.trainer is not None and self.trainer.global_step:
            # resumed: the rollout engines get the checkpoint's weights first
            async with self.generation_lock:
                await self.sync.push(self.trainer.global_step)
        tasks = []
        explore = None
        if self.explorer is not None:
            explore = asyncio.create_task(self.explore_loop(), name="explore")
            tasks.append(explore)
        if self.trainer is not None:
            tasks.append(asyncio.create_task(self.train_loop(), name="train"))
        if self.explorer is not None and self.trainer is not None and self.policy.serves_requests:
            tasks.append(asyncio.create_task(self.serve_requests(), name="serve-sync"))
        watcher = (
            asyncio.create_task(self._on_stop(explore), name="preemption")
            if self.stop is not None
            else None
        )
        try:
            done, _ = await asyncio.wait(set(tasks), return_when=asyncio.FIRST_EXCEPTION)
        except BaseException:  # cancelled (a signal): stop every loop before the sides go
            await _cancel(tasks + [watcher] if watcher else tasks)
            raise
        if watcher is not None:
            await _cancel([watcher])
        failed = [t for t in done if not t.cancelled() and t.exception() is not None]
        if failed:
            await _cancel(tasks)
            raise failed[0].exception()  # type: ignore[misc]
        if self.stop is not None and self.stop.requested:  # a run without a trainer
            explorer = self.explorer
            raise Preempted(
                str(self.stop.signal_name), explorer.step if explorer else 0, checkpoint=None
            )
        await asyncio.gather(*tasks)
        self.records.flush()
        if self.trainer is None and self.explorer is not None:
            self.last = dict(self.explorer.last_metrics)
        return dict(self.last)

    async def _on_stop(self, explore: Optional[asyncio.Task[None]]) -> None:
        """On a preemption request: with a trainer, cancel the explore loop (its step in
        flight is not in the checkpoint, which captures the committed position and the ledger
        together; the loop's ``finally`` closes the output, so a trainer waiting for a batch
        wakes up), and the train loop checkpoints and ends. Without one, the explore loop
        ends after its step in flight, whose output and recorded position belong together.
        Either way, whoever waits on the clock wakes up."""
        assert self.stop is not None
        await self.stop.wait()
        logger.warning("preemption (%s): %s", self.stop.signal_name, self._stop_plan())
        if self.trainer is not None and explore is not None and not explore.done():
            explore.cancel()
            await asyncio.gather(explore, return_exceptions=True)
        async with self._changed:
            self._changed.notify_all()

    def _stop_plan(self) -> str:
        """What a preemption does in this run's mode (said in the log when it lands)."""
        if self.trainer is None:
            return "no further explore step; the one in flight finishes and is recorded"
        if self.explorer is None:
            return "the train step in progress finishes, then a checkpoint"
        return (
            "exploration stops (its step in flight runs again after resume); the train step "
            "in progress finishes, then a checkpoint"
        )

    # ------------------------------------------------------------------ exploring
    async def explore_loop(self) -> None:
        """Explore until the task set or ``total_steps`` ends (or the trainer ends), each step
        when the sync policy lets it start, evaluating on schedule."""
        explorer = self.explorer
        assert explorer is not None
        try:
            if self.restored:  # explored before the checkpoint, not trained: first in the queue
                self.ledger.add(self.restored)
                await explorer.write_restored(self.restored)
            if explorer.progress is not None:
                explorer.progress.start(completed=explorer.step, total=explorer.total_steps)
            if explorer.eval_readers and self._first_eval_due(explorer.step):
                await self._evaluate()
            synced_at = explorer.step
            while True:
                step = explorer.step + 1
                if not await self._wait_to_explore(step):
                    break  # the trainer has ended, or a preemption stops the run
                total = explorer.total_steps
                if total is not None and explorer.step >= total:
                    break  # the task set is done: no weights to ask for
                if self.policy.asks_before(explorer.step, synced_at):
                    await self._request_sync(explorer.step)
                    synced_at = explorer.step
                if not await explorer.explore_step():
                    break
                async with self._changed:
                    self.clock.explored_to(explorer.step)
                    self._changed.notify_all()
                self._record_explore(evaluated=False)
                due = explorer.step % self.settings.eval_interval == 0
                if explorer.eval_readers and due and not self._stopping():  # else after resume
                    await self._evaluate()
            logger.info("Exploration finished after %d steps", explorer.step)
        finally:
            await explorer.close_output()  # the trainer's reader drains, then sees the end
            async with self._changed:
                self.clock.explorer_done = True
                self._changed.notify_all()

    async def _wait_to_explore(self, step: int) -> bool:
        """Wait until explore step ``step`` may start; ``False``: the trainer has ended."""
        if not self.policy.may_explore(self.clock, step):
            # the trainer must finish a step before this one may run: let it take what it
            # has even if that is less than a batch (failed tasks), or both wait
            await self.explorer.flush_output()  # type: ignore[union-attr]
        async with self._changed:
            await self._changed.wait_for(
                lambda: self.policy.may_explore(self.clock, step) or self._stopping()
            )
        return not (self._stopping() or (self.trainer is not None and self.clock.trainer_done))

    def _stopping(self) -> bool:
        return self.stop is not None and self.stop.requested

    def _first_eval_due(self, step: int) -> bool:
        if self.checkpointer is not None:
            return self.checkpointer.first_eval_due(step)
        return self.settings.eval_on_startup and step == 0

    def _record_explore(self, evaluated: bool) -> None:
        """A run that only explores records its position after every step and evaluation."""
        if self.trainer is None and self.checkpointer is not None:
            self.checkpointer.record_explore(self.explorer, evaluated=evaluated)

    async def _evaluate(self) -> None:
        """Evaluate at the explorer's step, holding that step's record until it is done."""
        explorer = self.explorer
        assert explorer is not None
        self.records.hold = explorer.step
        try:
            await explorer.eval()
        finally:
            self.records.hold = None
            self.records.flush(self.clock.trained)
        self._record_explore(evaluated=True)

    # ------------------------------------------------------------------ training
    async def train_loop(self) -> None:
        """Train until ``total_steps`` or the end of the data; push weights when the policy
        says, checkpoint every ``save_interval`` steps and at the end."""
        trainer = self.trainer
        checkpointer = self.checkpointer
        assert trainer is not None and checkpointer is not None
        total = self.settings.total_steps
        interval = self.settings.save_interval
        previous_end = time.perf_counter()
        try:
            while total is None or trainer.global_step < total:
                await self._stop_here()
                start = time.perf_counter()
                try:
                    exps, sample_metrics = await asyncio.to_thread(trainer.sample)
                except self.end_of_data as exc:
                    await self._stop_here()  # the explorer closed its output to stop
                    if total is not None and trainer.global_step < total:
                        # said, not silent: a run that ends early names the data that ran out
                        logger.warning(
                            "training ends after %d of %d steps: the trainer's data ran out "
                            "(%s: %s)",
                            trainer.global_step,
                            total,
                            type(exc).__name__,
                            exc,
                        )
                    break
                # (no stop between reading a batch and training it: a reader's position,
                # saved with the trainer, has moved past it)
                metrics = await self._train_step(exps, sample_metrics, start)
                now = time.perf_counter()
                metrics["time/step_wall"] = now - previous_end  # end of a step to the next
                previous_end = now
                step = trainer.global_step
                # the step's record first, then its checkpoint: a checkpoint never exists
                # without the records of its steps (a resumed run drops the later ones)
                self.records.log(metrics, step)
                self.records.flush(step)
                self.last = metrics
                if self.trainer_progress is not None:
                    self.trainer_progress.step(step, metrics)
                if interval and step % interval == 0:
                    await self.save()
            # The end of the run is a checkpoint (resumable, convertible), with Hugging Face
            # weights per trainer.save_hf_checkpoint; a next stage starts from them.
            if trainer.global_step > checkpointer.saved_step:
                await self.save()
            await asyncio.to_thread(trainer.save_final_hf)
            logger.info("Training finished at step %d", trainer.global_step)
        finally:
            async with self._changed:
                self.clock.trainer_done = True
                self._changed.notify_all()

    async def _train_step(
        self, exps: list[Experience], sample_metrics: dict[str, Any], start: float
    ) -> dict[str, Any]:
        """One train step on ``exps`` (in the trainer's turn), its push if the policy says."""
        trainer = self.trainer
        assert trainer is not None
        self.ledger.consume(exps)
        ids = experience_ids(exps)
        async with self._training, self.turns.turn(trainer.global_step + 1) as turn_metrics:
            metrics = await asyncio.to_thread(trainer.train_step, exps)
            metrics.update(sample_metrics)
            step = trainer.global_step
            metrics["time/train_step_total"] = time.perf_counter() - start
            metrics["time/step"] = metrics["time/train_step_total"]
            if self.sync is not None and self.policy.pushes_after(step):
                metrics.update(await self._push(step))
        metrics.update(turn_metrics)  # colocate: sleep/wake times, the engines' calls
        async with self._changed:
            self.clock.trained_to(step)
            self._changed.notify_all()
        if self.explorer is not None:
            metrics["model_version"] = float(self.clock.version)
            metrics[EXPERIENCE_IDS_KEY] = ids
        return metrics

    async def _stop_here(self) -> None:
        """On a preemption request: the checkpoint (unless the last step has one), then
        :class:`Preempted`."""
        if self.stop is None or not self.stop.requested:
            return
        trainer, checkpointer = self.trainer, self.checkpointer
        assert trainer is not None and checkpointer is not None
        path = None
        if trainer.global_step > checkpointer.saved_step:
            path = await self.save()
        raise Preempted(str(self.stop.signal_name), trainer.global_step, checkpoint=path)

    async def save(self) -> str:
        """A step checkpoint now: the explorer's side captured on the event loop (position and
        queued experiences agree), the files written off it; no weight push meanwhile."""
        trainer, checkpointer = self.trainer, self.checkpointer
        assert trainer is not None and checkpointer is not None
        async with self._training:
            side = None
            if self.explorer is not None:
                side = checkpointer.capture(
                    trainer.global_step, self.explorer, self.ledger, self.records.pending
                )
            return await asyncio.to_thread(checkpointer.save, trainer, side)

    # ------------------------------------------------------------------ weights
    async def _push(self, step: int) -> dict[str, float]:
        """The trainer's weights (train step ``step``) into the rollout engines."""
        assert self.sync is not None
        wait = time.perf_counter()
        async with self._changed:  # fixed: the steps that need older weights run first
            await self._changed.wait_for(lambda: self.policy.may_push(self.clock, step))
        # not while a step generates with the old weights (colocate: the turn holds the lock;
        # fully_async: the engines take the weights under the requests in flight)
        guard = (
            self.generation_lock
            if self.turns.push_takes_generation_lock and not self.policy.in_flight_updates
            else contextlib.nullcontext()
        )
        async with guard:
            out = {
                "time/sync_wait": time.perf_counter() - wait,
                "time/sync": await self.sync.push(step),
            }
            out["time/sync/export"] = self.sync.last_export_s
            out["sync/weight_bytes"] = self.sync.weight_bytes()
        self.turns.synced(step)
        async with self._changed:
            self.clock.served(step)
            self._changed.notify_all()
        return out

    async def _request_sync(self, explore_step: int) -> None:
        """``dynamic_by_explorer``: ask for the trainer's current weights and wait (at most
        ``sync_timeout``) until they are in the engines."""
        assert self.sync is not None
        async with self._changed:
            self.clock.request = explore_step
            self._changed.notify_all()
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(
                        lambda: self.clock.request is None or self.clock.trainer_done
                    ),
                    timeout=self.sync.timeout,
                )
            except asyncio.TimeoutError:
                self.clock.request = None
                logger.warning(
                    "explore step %d: no weights within sync_timeout (%ss); exploring on with "
                    "version %d",
                    explore_step + 1,
                    self.sync.timeout,
                    self.clock.version,
                )

    async def serve_requests(self) -> None:
        """``dynamic_by_explorer``: answer each request with the weights of the last train step
        done (also while the trainer waits for data), never during a train step."""
        trainer = self.trainer
        assert trainer is not None
        clock = self.clock
        while True:
            async with self._changed:
                await self._changed.wait_for(
                    lambda: clock.request is not None or clock.trainer_done
                )
                if clock.trainer_done:
                    return
                explore_step = int(clock.request)  # type: ignore[arg-type]
            metrics: dict[str, float] = {}
            async with self._training:
                if trainer.global_step > clock.version:
                    metrics = await self._push(trainer.global_step)
            # on the record of the explore step about to run (not written yet)
            self.records.log({**metrics, "sync/version": float(clock.version)}, explore_step + 1)
            async with self._changed:
                clock.request = None
                self._changed.notify_all()


async def _cancel(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class _NullSink:
    def log(self, metrics: dict[str, Any], step: int) -> None:
        pass
