"""``mode: both``: the explorer and the trainer run concurrently; a synchronizer moves weights.

One driver process holds both (the explorer's engines and workflow runners are Ray actors; the
trainer's engine is in the driver). They meet in ``buffer.trainer_input.experience_buffer``
(a Ray queue), and the weights travel back to the rollout engines every
``synchronizer.sync_interval`` train steps:

* ``sync_method: memory`` -- the trainer's full state dict through Ray's object store;
* ``sync_method: checkpoint`` -- Hugging Face weights written to
  ``global_step_N/actor/huggingface`` and loaded by the engines from there (``nccl`` falls back
  to this on machines without CUDA, as the config check says; on CUDA this release sends the
  state dict through Ray as well, see docs/architecture.md).

Schedule (``sync_style: fixed``): explore step ``e`` runs with the weights of train step
``need(e) = max(0, floor((e - 1 - sync_offset) / sync_interval) * sync_interval)``, so with
``sync_interval: 1, sync_offset: 0`` every step is on-policy, ``sync_interval: k`` refreshes the
engines every ``k`` steps, and ``sync_offset: 1`` lets the explorer run one step ahead of the
trainer (its batch was generated one version behind), overlapping generation and training.
Every experience records the model version that generated it (``model_version``), and
``metrics.jsonl`` gets one object per step: the explorer's rollout metrics, the trainer's
losses, and the timings of explore, train and sync.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Optional

from trinity.common.config import Config
from trinity.utils.log import get_logger

logger = get_logger(__name__)


def required_version(explore_step: int, sync_interval: int, sync_offset: int) -> int:
    """The train step whose weights explore step ``explore_step`` (1-based) must use."""
    behind = explore_step - 1 - sync_offset
    if behind < sync_interval:
        return 0
    return (behind // sync_interval) * sync_interval


class StepMerger:
    """A monitor that gathers every sink's metrics of a step into one record.

    The explorer logs rollout and eval metrics as it goes; the trainer logs its step later.
    :meth:`flush` writes everything gathered for steps up to ``step`` as one object per step.
    """

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.pending: dict[int, dict[str, Any]] = {}

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.pending.setdefault(int(step), {}).update(metrics)

    def flush(self, up_to: Optional[int] = None) -> None:
        for step in sorted(self.pending):
            if up_to is not None and step > up_to:
                break
            self.sink.log(self.pending.pop(step), step)

    def close(self) -> None:  # the explorer closes its monitor at shutdown: keep the sink open
        pass


class Synchronizer:
    """Moves the trainer's weights into every rollout engine as model version ``N``."""

    def __init__(self, config: Config, explorer: Any, engine: Any) -> None:
        self.config = config
        self.explorer = explorer
        self.engine = engine
        self.method = config.synchronizer.sync_method
        self.timeout = float(config.synchronizer.sync_timeout)
        if self.method == "nccl":
            logger.warning(
                "synchronizer.sync_method 'nccl' sends the state dict through Ray's object "
                "store in this release (same result, slower on large models)"
            )

    async def push(self, version: int) -> float:
        """Synchronise version ``version``; returns the seconds it took."""
        start = time.perf_counter()
        if self.method == "checkpoint":
            path = os.path.join(
                self.config.checkpoint_job_dir,
                f"global_step_{version}",
                "actor",
                "huggingface",
            )
            await asyncio.to_thread(self.engine.save_hf, path)
            coro = self.explorer.load_weights(path, version)
        else:
            import ray

            state = ray.put(await asyncio.to_thread(self.engine.state_dict))
            coro = asyncio.gather(
                *(
                    h.update_weights.remote(state_dict=state, version=version)
                    for h in self.explorer.rollout_engines or []
                )
            )
        await asyncio.wait_for(coro, timeout=self.timeout)
        return time.perf_counter() - start


async def run_both_async(config: Config, explorer: Any, trainer: Any, merger: StepMerger) -> dict:
    """Drive explorer and trainer concurrently until the task set (or total_steps) ends."""
    from trinity.buffer.buffer_reader import EndOfStream
    from trinity.launcher.trainer.data import EndOfData

    sync = Synchronizer(config, explorer, trainer.engine)
    interval = config.synchronizer.sync_interval
    offset = config.synchronizer.sync_offset
    if config.synchronizer.sync_style != "fixed":
        logger.warning(
            "synchronizer.sync_style %r runs as 'fixed' in this release",
            config.synchronizer.sync_style,
        )
    save_interval = config.trainer.save_interval
    eval_interval = config.explorer.eval_interval
    state = {"version": trainer.global_step, "explorer_done": False, "trainer_done": False}
    changed = asyncio.Condition()
    last: dict[str, Any] = {}

    async def explore_loop() -> None:
        try:
            if explorer.progress is not None:
                explorer.progress.total_steps = explorer.total_steps
                explorer.progress.start(completed=explorer.step)
            if explorer.eval_readers and config.explorer.eval_on_startup and explorer.step == 0:
                await explorer.eval()
            while True:
                need = required_version(explorer.step + 1, interval, offset)
                async with changed:
                    await changed.wait_for(
                        lambda need=need: state["version"] >= need or state["trainer_done"]
                    )
                if state["trainer_done"]:
                    break
                if not await explorer.explore_step():
                    break
                if explorer.eval_readers and explorer.step % eval_interval == 0:
                    await explorer.eval()
        finally:
            state["explorer_done"] = True
            await explorer.pipeline.close()  # the trainer's reader drains, then sees the end
            async with changed:
                changed.notify_all()

    async def train_loop() -> None:
        total = config.buffer.total_steps
        previous_end = time.perf_counter()
        try:
            while total is None or trainer.global_step < total:
                start = time.perf_counter()
                try:
                    exps, sample_metrics = await asyncio.to_thread(trainer.sample)
                except (EndOfStream, EndOfData, StopAsyncIteration):  # data used up
                    break
                metrics = await asyncio.to_thread(trainer.train_step, exps)
                metrics.update(sample_metrics)
                step = trainer.global_step
                metrics["time/train_step_total"] = time.perf_counter() - start
                if step % interval == 0:
                    metrics["time/sync"] = await sync.push(step)
                    async with changed:
                        state["version"] = step
                        changed.notify_all()
                metrics["model_version"] = float(state["version"])
                if save_interval and step % save_interval == 0:
                    await asyncio.to_thread(trainer.save_checkpoint)
                now = time.perf_counter()
                metrics["time/step_wall"] = now - previous_end  # end of a step to the next
                previous_end = now
                merger.log(metrics, step)
                merger.flush(step)
                last.clear()
                last.update(metrics)
        finally:
            async with changed:
                state["trainer_done"] = True
                changed.notify_all()

    explore_task = asyncio.create_task(explore_loop())
    train_task = asyncio.create_task(train_loop())
    done, _ = await asyncio.wait({explore_task, train_task}, return_when=asyncio.FIRST_EXCEPTION)
    for task in done:
        if task.exception() is not None:
            for other in (explore_task, train_task):
                other.cancel()
            raise task.exception()  # type: ignore[misc]
    await asyncio.gather(explore_task, train_task)
    merger.flush()
    return dict(last)


def run_both(config: Config, progress: Any = None) -> dict:
    """Mode ``both`` from a checked config; returns the last train step's metrics."""
    from trinity.launcher.explorer import Explorer
    from trinity.launcher.modes import LaunchInputError, ray_session
    from trinity.launcher.monitor import create_monitor
    from trinity.launcher.trainer.run import build_trainer
    from trinity.launcher.trainer.trainer import latest_checkpoint

    step = latest_checkpoint(config.checkpoint_job_dir) if config.checkpoint_job_dir else None
    if step is not None and config.continue_from_checkpoint:
        # Resuming needs the explorer's task-set position and the experiences generated but not
        # yet trained; until those are checkpointed too, refuse rather than train on a task set
        # restarted from its beginning.
        raise LaunchInputError(
            f"{config.checkpoint_job_dir} holds a checkpoint (global_step_{step}); resuming "
            "mode 'both' is not supported in this release: choose another name, or set "
            "continue_from_checkpoint: false to start over"
        )
    from trinity.launcher.progress import ProgressReporter

    sink = create_monitor(config)
    merger = StepMerger(sink)
    if progress is None:
        progress = ProgressReporter(total_steps=None, description="both")
    try:
        explorer = Explorer(config, monitor=merger, progress=progress)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        sink.close()
        raise LaunchInputError(str(exc)) from exc

    async def main() -> dict:
        await explorer.prepare()
        try:
            trainer = await asyncio.to_thread(build_trainer, config)
            return await run_both_async(config, explorer, trainer, merger)
        finally:
            await explorer.shutdown()

    try:
        with ray_session(config):
            result = asyncio.run(main())
    finally:
        merger.flush()
        sink.close()
    return result
