"""``mode: both``: the explorer and the trainer run concurrently; a synchronizer moves weights.

(``mode: colocate`` runs this loop too, with the rollout engines asleep during each train step:
:mod:`trinity.launcher.colocate`.)

One driver process holds both (the explorer's engines and workflow runners are Ray actors; the
trainer's engine is in the driver, or its ranks are Ray workers, see ``trainer/workers.py``). They meet in ``buffer.trainer_input.experience_buffer``
(a Ray queue), and the weights travel back to the rollout engines every
``synchronizer.sync_interval`` train steps:

* ``sync_method: memory`` -- the trainer's full state dict through Ray's object store;
* ``sync_method: checkpoint`` -- Hugging Face weights written to
  ``global_step_N/actor/huggingface`` and loaded by the engines from there (``nccl`` falls back
  to this on machines without CUDA, as the config check says);
* ``sync_method: nccl`` -- a broadcast from the trainer's rank 0 to the engines over a
  collective group of their own (``weight_sync.py``).

Schedule (``sync_style: fixed``): explore step ``e`` runs with the weights of train step
``need(e) = max(0, floor((e - 1 - sync_offset) / sync_interval) * sync_interval)``, so with
``sync_interval: 1, sync_offset: 0`` every step is on-policy, ``sync_interval: k`` refreshes the
engines every ``k`` steps, and ``sync_offset: 1`` lets the explorer run one step ahead of the
trainer (its batch was generated one version behind), overlapping generation and training.
The dynamic styles keep the same bound on how far the explorer runs ahead (explore step ``e``
starts once ``need(e)`` train steps are *done*) but do not wait for particular weights:
``dynamic_by_trainer`` -- the trainer pushes its weights every ``sync_interval`` train steps and
the explorer generates with whatever the engines hold; ``dynamic_by_explorer`` -- every
``sync_interval`` explore steps the explorer asks for new weights and waits (at most
``sync_timeout``) until the trainer has pushed those of its last finished step (served also
while the trainer waits for data, never during a train step; ``sync/version`` on the record of
the step that follows). Trinity-RFT's ``need_sync`` follows the same split of who decides.
Every experience records the model version that generated it (``model_version``), and
``metrics.jsonl`` gets one object per step: the explorer's rollout metrics, the trainer's
losses, the timings of explore, train and sync, and ``batch/experience_ids`` (the run ids
``explore step/task/run`` the step trained on).

Resume (``continue_from_checkpoint``, the default): a checkpoint ``global_step_N/`` also holds
``explorer/explorer_state.json`` (the explore step counter and task-set position after the
explorer's last *committed* step, the explorer's metrics of steps after ``N``, the settings a
resume must match) and ``explorer/experiences.bin`` (``Experience.serialize_many`` of every
experience committed to the queue that the trainer had not read). The explorer commits a step
synchronously just before writing its experiences, and the checkpoint is captured on the same
event loop, so position and experiences always agree; a step still in flight is simply run
again. A restarted run loads the trainer's state, pushes its weights to the rollout engines,
puts the saved experiences back into the queue first, and explores on from the saved
position: every experience is trained exactly once, in the same steps as without the kill.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
import time
from typing import Any, Callable, Optional, TypeVar

from trinity.common.config import Config
from trinity.common.experience import Experience
from trinity.launcher.both_checkpoint import (  # noqa: F401 - re-exported
    _EXPLORER_STATE_VERSION,
    EXPERIENCE_IDS_KEY,
    EXPLORER_DIR,
    EXPLORER_EXPERIENCES_FILE,
    EXPLORER_STATE_FILE,
    ExperienceLedger,
    _json_scalars,
    check_fingerprint,
    drop_stale_queue,
    experience_ids,
    read_explorer_checkpoint,
    read_resume_state,
    run_fingerprint,
    write_explorer_checkpoint,
)
from trinity.launcher.resume import truncate_metrics
from trinity.launcher.synchronizer import Synchronizer  # noqa: F401 - re-exported
from trinity.utils.gc_heap import freeze_startup_heap
from trinity.utils.log import get_logger

logger = get_logger(__name__)
T = TypeVar("T")


#: seconds a run whose actor died waits for Ray to tell whether the actor's node died with it
#: (Ray's health check declares a node dead after about 15 s by default)
NODE_LOSS_WAIT = 45.0

#: ``synchronizer.sync_style`` values mode ``both`` runs.
SYNC_STYLES = ("fixed", "dynamic_by_explorer", "dynamic_by_trainer")


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
        #: the step of an evaluation in progress: its record (and later ones) wait for it, so
        #: a step's eval metrics land in that step's one record even when the trainer finishes
        #: the step first
        self.hold: Optional[int] = None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.pending.setdefault(int(step), {}).update(metrics)

    def flush(self, up_to: Optional[int] = None) -> None:
        """Write the records of steps up to ``up_to`` (all with ``None``, e.g. at the end of
        the run); with ``up_to``, none from the held step on."""
        if up_to is not None and self.hold is not None:
            up_to = min(up_to, self.hold - 1)
        for step in sorted(self.pending):
            if up_to is not None and step > up_to:
                break
            self.sink.log(self.pending.pop(step), step)

    def close(self) -> None:  # the explorer closes its monitor at shutdown: keep the sink open
        pass


async def run_both_async(
    config: Config,
    explorer: Any,
    trainer: Any,
    merger: StepMerger,
    restored: Optional[list[Experience]] = None,
    colocation: Any = None,
) -> dict:
    """Drive explorer and trainer concurrently until the task set (or total_steps) ends.

    With ``colocation`` (a :class:`trinity.launcher.colocate.Colocation`: mode colocate) each
    train step and its weight push run in the trainer's turn: engines asleep, no generation.

    A resumed run passes a trainer already at its checkpoint's step, an explorer at the
    checkpoint's explore step and task-set position, and ``restored``: the experiences that
    were written to the queue but not trained when the checkpoint was taken; they go into the
    queue first, then the explorer continues.
    """
    from trinity.buffer.buffer_reader import EndOfStream
    from trinity.launcher.trainer.data import EndOfData

    sync = Synchronizer(config, explorer, trainer.engine)
    interval = config.synchronizer.sync_interval
    offset = config.synchronizer.sync_offset
    style = config.synchronizer.sync_style
    if style not in SYNC_STYLES:
        raise ValueError(
            f"synchronizer.sync_style: {style!r} is not a sync style; use one of {SYNC_STYLES}"
        )
    save_interval = config.trainer.save_interval
    eval_interval = config.explorer.eval_interval
    state: dict[str, Any] = {
        "version": trainer.global_step,  # the weights the rollout engines serve
        "trained": trainer.global_step,  # train steps done
        "request": None,  # dynamic_by_explorer: the explore step asking for new weights
        "explorer_done": False,
        "trainer_done": False,
    }
    changed = asyncio.Condition()
    training = asyncio.Lock()  # held while the trainer's weights change
    last: dict[str, Any] = {}

    # What a checkpoint records of the explorer: its committed position, and (ledger) the
    # experiences committed to the queue that the trainer has not read.
    ledger = ExperienceLedger()
    explorer.on_commit = lambda step, exps: ledger.add(exps)
    generation = explorer.generation_lock = asyncio.Lock()
    snapshot: dict[str, Any] = {}

    def capture(step: int) -> None:
        """The explorer's side at train step ``step``, taken on the event loop between two
        explorer statements, so the position and the ledger agree."""
        pending: dict[int, dict[str, Any]] = {}
        # metrics not yet in the file: the explorer's of later steps, and every record the
        # merger still holds (an evaluation in progress holds back records up to this step)
        for s, metrics in explorer.unlogged.items():
            if s > step:
                pending.setdefault(s, {}).update(_json_scalars(metrics))
        for s, metrics in merger.pending.items():
            pending.setdefault(s, {}).update(_json_scalars(metrics))
        snapshot["state"] = {
            "version": _EXPLORER_STATE_VERSION,
            "trainer_step": step,
            "explorer": explorer.state_dict(),
            "fingerprint": run_fingerprint(config, explorer),
            "metrics": {str(s): m for s, m in sorted(pending.items())},
        }
        snapshot["experiences"] = ledger.pending()

    def write_explorer_side(step_dir: str) -> None:
        write_explorer_checkpoint(step_dir, snapshot["state"], snapshot["experiences"])

    trainer.checkpoint_hooks.append(write_explorer_side)
    saved = trainer.global_step  # a resumed run starts at a saved step

    async def save() -> None:
        nonlocal saved
        async with training:  # no weight push reads the engine meanwhile
            capture(trainer.global_step)
            await asyncio.to_thread(trainer.save_checkpoint)
        saved = trainer.global_step

    if trainer.global_step:  # resumed: the rollout engines get the checkpoint's weights
        await sync.push(trainer.global_step)

    async def push(step: int) -> dict[str, float]:
        """The trainer's weights (train step ``step``) into the rollout engines."""
        wait = time.perf_counter()
        # not while a step generates with the old weights (colocate: the turn holds the lock)
        async with generation if colocation is None else contextlib.nullcontext():
            out = {"time/sync_wait": time.perf_counter() - wait, "time/sync": await sync.push(step)}
            out["time/sync/export"] = sync.last_export_s
        if colocation is not None:
            colocation.synced(step)
        async with changed:
            state["version"] = step
            changed.notify_all()
        return out

    async def request_sync(explore_step: int) -> None:
        """dynamic_by_explorer: ask for the trainer's current weights and wait (at most
        ``sync_timeout``) until they are in the engines."""
        async with changed:
            state["request"] = explore_step
            changed.notify_all()
            try:
                await asyncio.wait_for(
                    changed.wait_for(lambda: state["request"] is None or state["trainer_done"]),
                    timeout=sync.timeout,
                )
            except asyncio.TimeoutError:
                state["request"] = None
                logger.warning(
                    "explore step %d: no weights within sync_timeout (%ss); exploring on with "
                    "version %d",
                    explore_step + 1,
                    sync.timeout,
                    state["version"],
                )

    async def serve_requests() -> None:
        """dynamic_by_explorer: answer each request with the weights of the last train step
        done (also while the trainer waits for data), never during a train step."""
        while True:
            async with changed:
                await changed.wait_for(
                    lambda: state["request"] is not None or state["trainer_done"]
                )
                if state["trainer_done"]:
                    return
                explore_step = state["request"]
            metrics: dict[str, float] = {}
            async with training:
                if trainer.global_step > state["version"]:
                    metrics = await push(trainer.global_step)
            # on the record of the explore step about to run (not written yet)
            merger.log({**metrics, "sync/version": float(state["version"])}, explore_step + 1)
            async with changed:
                state["request"] = None
                changed.notify_all()

    async def evaluate() -> None:
        """Evaluate at the explorer's step, holding that step's record until it is done."""
        merger.hold = explorer.step
        try:
            await explorer.eval()
        finally:
            merger.hold = None
            merger.flush(state["trained"])

    async def explore_loop() -> None:
        try:
            if restored:  # explored before the checkpoint, not trained: first in the queue
                ledger.add(restored)
                await explorer.pipeline.writer.write_async(restored)
            if explorer.progress is not None:
                explorer.progress.total_steps = explorer.total_steps
                explorer.progress.start(completed=explorer.step)
            if explorer.eval_readers and config.explorer.eval_on_startup and explorer.step == 0:
                await evaluate()
            synced_at = explorer.step
            while True:
                need = required_version(explorer.step + 1, interval, offset)
                # fixed: wait for the weights of train step need(e); dynamic styles: the same
                # bound on how far the explorer runs ahead, counted in train steps done
                key = "version" if style == "fixed" else "trained"
                if state[key] < need and not state["trainer_done"]:
                    # the trainer must finish a step before this one may run: let it take what
                    # it has even if that is less than a batch (failed tasks), or both wait
                    await _flush(explorer.pipeline)
                async with changed:
                    await changed.wait_for(
                        lambda need=need, key=key: state[key] >= need or state["trainer_done"]
                    )
                if state["trainer_done"]:
                    break
                total = explorer.total_steps
                if total is not None and explorer.step >= total:
                    break  # the task set is done: no weights to ask for
                if style == "dynamic_by_explorer" and explorer.step - synced_at >= interval:
                    await request_sync(explorer.step)
                    synced_at = explorer.step
                if not await explorer.explore_step():
                    break
                if explorer.eval_readers and explorer.step % eval_interval == 0:
                    await evaluate()
        finally:
            state["explorer_done"] = True
            if explorer.pipeline is not None:  # the trainer's reader drains, then sees the end
                await explorer.pipeline.close()
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
                except (EndOfStream, EndOfData, StopAsyncIteration) as exc:  # data used up
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
                ledger.consume(exps)
                ids = experience_ids(exps)
                turn = (
                    colocation.turn(generation, trainer.global_step + 1)
                    if colocation is not None
                    else contextlib.nullcontext({})
                )
                async with training, turn as turn_metrics:
                    metrics = await asyncio.to_thread(trainer.train_step, exps)
                    metrics.update(sample_metrics)
                    step = trainer.global_step
                    metrics["time/train_step_total"] = time.perf_counter() - start
                    # fixed / dynamic_by_trainer: the trainer pushes every sync_interval steps
                    # (dynamic_by_explorer: when the explorer asks, see serve_requests)
                    if style != "dynamic_by_explorer" and step % interval == 0:
                        metrics.update(await push(step))
                metrics.update(turn_metrics)  # colocate: sleep/wake times, the engines' calls
                async with changed:
                    state["trained"] = step
                    changed.notify_all()
                metrics["model_version"] = float(state["version"])
                metrics[EXPERIENCE_IDS_KEY] = ids
                now = time.perf_counter()
                metrics["time/step_wall"] = now - previous_end  # end of a step to the next
                previous_end = now
                # the step's record first, then its checkpoint: a checkpoint never exists
                # without the records of its steps (a resumed run drops the later ones)
                merger.log(metrics, step)
                merger.flush(step)
                last.clear()
                last.update(metrics)
                if save_interval and step % save_interval == 0:
                    await save()
            # The end of the run is a checkpoint (resumable, convertible), with Hugging Face
            # weights per trainer.save_hf_checkpoint -- as in mode train; a next stage starts
            # from them.
            if trainer.global_step > saved:
                await save()
            await asyncio.to_thread(trainer.save_final_hf)
        finally:
            async with changed:
                state["trainer_done"] = True
                changed.notify_all()

    tasks = [asyncio.create_task(explore_loop()), asyncio.create_task(train_loop())]
    if style == "dynamic_by_explorer":
        tasks.append(asyncio.create_task(serve_requests()))
    try:
        done, _ = await asyncio.wait(set(tasks), return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:  # cancelled (a signal): stop both loops before the explorer goes
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    for task in done:
        if task.exception() is not None:
            for other in tasks:
                other.cancel()
            raise task.exception()  # type: ignore[misc]
    await asyncio.gather(*tasks)
    trainer.checkpoint_hooks.remove(write_explorer_side)
    explorer.on_commit = explorer.generation_lock = None
    merger.flush()
    return dict(last)


async def _flush(pipeline: Any) -> None:
    """The writer's ``flush`` (see :meth:`trinity.buffer.buffer_writer.BufferWriter.flush`)."""
    writer = getattr(pipeline, "writer", None)
    flush = getattr(writer, "flush_async", None)
    if callable(flush):
        await flush()


def run_both(config: Config, progress: Any = None) -> dict:
    """Mode ``both`` (or ``colocate``: the same loop, the engines and the trainer taking turns
    on one device, see :mod:`trinity.launcher.colocate`) from a checked config; returns the
    last train step's metrics.

    With ``continue_from_checkpoint`` (the default) and a complete checkpoint in the run
    directory, the run resumes from it (see the module's docstring).
    """
    from trinity.launcher.explorer import Explorer
    from trinity.launcher.modes import LaunchInputError, ray_session
    from trinity.launcher.monitor import METRICS_FILE, create_monitor
    from trinity.launcher.progress import ProgressReporter
    from trinity.launcher.trainer.run import build_local_cpu_engines, build_trainer
    from trinity.launcher.trainer.trainer import latest_checkpoint

    config = with_queue_in_process(config)
    job_dir = config.checkpoint_job_dir
    resume_step = None
    if job_dir and config.continue_from_checkpoint:
        resume_step = latest_checkpoint(job_dir)
    saved = read_resume_state(config, resume_step) if resume_step is not None else None

    merger = StepMerger(None)
    if progress is None:
        progress = ProgressReporter(total_steps=None, description=config.mode)
    try:
        explorer = Explorer(config, monitor=merger, progress=progress)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise LaunchInputError(str(exc)) from exc
    restored: list[Experience] = []
    if saved is not None:
        state, restored = saved
        check_fingerprint(config, explorer, resume_step, state)
        explorer.load_state_dict(state["explorer"])
        dropped = truncate_metrics(os.path.join(job_dir, METRICS_FILE), int(resume_step))
        merger.pending = {int(s): dict(m) for s, m in (state.get("metrics") or {}).items()}
        logger.info(
            "Resuming mode %s from global_step_%d: explore step %d, %d experiences explored "
            "but not trained go back into the queue%s",
            config.mode,
            resume_step,
            explorer.step,
            len(restored),
            f", {dropped} records after the checkpoint dropped from metrics.jsonl"
            if dropped
            else "",
        )
    sink = create_monitor(config)
    merger.sink = sink

    async def main() -> dict:
        if resume_step is not None:
            drop_stale_queue(config)

        # The trainer (verl, its model and optimizer, in this process) is built while the
        # explorer's engines and runners start in theirs: the two are independent, and start-up
        # is most of a short run's wall time.
        async def build() -> Any:
            engines = await asyncio.wrap_future(early) if early is not None else None
            return await asyncio.to_thread(build_trainer, config, explorer.placement, engines)

        prepared, built = await asyncio.gather(explorer.prepare(), build(), return_exceptions=True)
        if isinstance(built, BaseException):
            await explorer.shutdown()
            raise built
        trainer = built
        freeze_startup_heap()  # set up: full collections no longer walk the imports' objects
        try:
            try:
                if isinstance(prepared, BaseException):
                    raise prepared
                if resume_step is not None:
                    got = await asyncio.to_thread(trainer.resume)
                    if got != resume_step:
                        raise RuntimeError(
                            f"expected to resume from global_step_{resume_step}, the trainer "
                            f"resumed from {got}"
                        )
                colocation = None
                if config.mode == "colocate":  # the engines and the trainer take turns
                    from trinity.launcher.colocate import Colocation

                    colocation = Colocation(explorer.supervisor, trainer.global_step)
                return await run_both_async(
                    config, explorer, trainer, merger, restored, colocation=colocation
                )
            finally:
                trainer.close()
        finally:
            await explorer.shutdown()

    from trinity.launcher.placement import NodeLostError, placement_session

    early: Optional[concurrent.futures.Future[Any]] = None
    try:
        from trinity.launcher.trainer.workers import trainer_layout

        layout = trainer_layout(config)
        # a trainer that runs here on the CPU is built while Ray starts (see the function)
        early = _in_thread(build_local_cpu_engines, config)
        with ray_session(config), placement_session(config, **layout) as placement:
            explorer.placement = placement
            try:
                result = asyncio.run(main())
            except Exception as exc:
                from trinity.launcher.engines.supervisor import is_engine_death

                # an actor death may be a node's: wait (briefly) for Ray to say so
                lost = placement.lost_nodes(wait=NODE_LOSS_WAIT if is_engine_death(exc) else 0)
                if lost is None:
                    raise
                raise NodeLostError(
                    f"{lost}; the run stopped ({type(exc).__name__}). Bring the node back (or "
                    f"change the cluster section) and run the same command again: it resumes "
                    f"from the last checkpoint in {config.checkpoint_job_dir}"
                ) from exc
    finally:
        if early is not None:  # not left building (and joining a process group) past the run
            concurrent.futures.wait([early])
        merger.flush()
        sink.close()
    return result


def _in_thread(fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
    """``fn(*args)`` on a daemon thread (an interrupted run does not wait for it at exit)."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the future
            future.set_exception(exc)

    threading.Thread(target=run, name="trinity-trainer-build", daemon=True).start()
    return future


def with_queue_in_process(config: Config) -> Config:
    """``config`` with the trainer's input queue in this process, where nothing else needs it.

    In modes ``both`` and ``colocate`` the explorer's pipeline writes the queue and the trainer
    reads it, both in this process (the driver): the same queue class in-process, with no Ray
    actor to encode every batch for, send it to and decode it from (~17 ms of the CPU
    quickstart's ~0.2 s step). It applies to a ``queue`` / ``priority_queue`` whose
    ``wrap_in_ray`` the config does not set and that the pipeline writes (no
    ``experience_pipeline.output`` of its own); the value is set on a copy, as a derived one,
    so a config saved from the caller's object still says what the user wrote (compat D8).
    """
    exp = config.buffer.trainer_input.experience_buffer
    if (
        exp is None
        or str(exp.storage_type).lower() not in ("queue", "priority_queue")
        or "wrap_in_ray" in exp.model_fields_set
        or config.data_processor.experience_pipeline.output is not None
    ):
        return config
    # Copy only the path down to the queue (a deep copy would fail on any object in the config
    # that ``copy.deepcopy`` refuses, e.g. a lock in a workflow's arguments). Every reader of the
    # queue's config goes through this path. ``__dict__``: derived, not user-set (as the
    # config's own rules set derived values), so ``model_fields_set`` is unchanged.
    exp = exp.model_copy()
    exp.__dict__["wrap_in_ray"] = False
    trainer_input = config.buffer.trainer_input.model_copy()
    trainer_input.__dict__["experience_buffer"] = exp
    buffer = config.buffer.model_copy()
    buffer.__dict__["trainer_input"] = trainer_input
    config = config.model_copy()
    config.__dict__["buffer"] = buffer
    return config
