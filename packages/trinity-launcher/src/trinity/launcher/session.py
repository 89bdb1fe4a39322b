"""A run from a checked config: build its sides, resume its state, drive its coordinator inside
Ray and a placement, and release everything -- for every mode, one path.

Order, and why:

1. **Before anything starts** -- the explorer is built (it checks task sets, operators, the
   algorithm and engine settings from local files), the checkpointer finds the state to resume
   from and refuses one it cannot continue; bad input raises :class:`LaunchInputError` (exit
   status 2) and nothing was started. A resume puts the explorer back at its position and cuts
   ``metrics.jsonl`` back before the sink opens it.
2. **Start** -- Ray (or none: mode ``train`` with one rank), the run's placement groups; the
   explorer's engines and runners start while the trainer is built (a CPU trainer is built
   while Ray starts: start-up is most of a short run's wall time); the trainer loads its
   checkpoint.
3. **Run** -- the :class:`~trinity.launcher.run.coordinator.Coordinator`, with the sync policy
   of ``synchronizer.sync_style`` and, in mode ``colocate``, the turn policy; mode ``bench``
   evaluates instead (``Explorer.bench``).
4. **Always** -- the trainer's and the explorer's processes are released, the last records
   written, the sink closed; a run whose actor died on a lost node says so
   (:class:`~trinity.launcher.placement.NodeLostError`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Callable, Optional, TypeVar

from trinity.common.config import Config, run_mode_spec
from trinity.launcher.checkpoint import CheckpointSettings, ResumePoint, RunCheckpointer
from trinity.launcher.errors import LaunchInputError
from trinity.launcher.run.coordinator import Coordinator, RunSettings, train_step_limit
from trinity.launcher.run.ledger import ExperienceLedger
from trinity.launcher.run.plan import run_config_for
from trinity.launcher.run.policies import TakingTurns, Unsynced, sync_policy
from trinity.launcher.run.preemption import PreemptionSettings, StopRequest
from trinity.launcher.run.ray_session import ray_session
from trinity.launcher.run.records import DirectRecords, LazySink, StepMerger
from trinity.utils.gc_heap import freeze_startup_heap
from trinity.utils.log import get_logger

__all__ = ["NODE_LOSS_WAIT", "RunSession", "drop_stale_queue", "run"]

logger = get_logger(__name__)
T = TypeVar("T")

#: seconds a run whose actor died waits for Ray to tell whether the actor's node died with it
#: (Ray's health check declares a node dead after about 15 s by default)
NODE_LOSS_WAIT = 45.0


def _input_errors() -> tuple[type[BaseException], ...]:
    from trinity.buffer.operators.experience_operator import ExperienceOperatorError
    from trinity.utils.plugin_loader import PluginLoadError
    from trinity.utils.registry import RegistryError

    return (
        ValueError,
        KeyError,
        FileNotFoundError,
        RegistryError,
        ExperienceOperatorError,
        PluginLoadError,
    )


class RunSession:
    """One run of a checked config (see the module docstring).

    Args:
        config: a checked config (``check_and_update`` done).
        progress: the explorer's progress display (default: one for the mode).
        monitor: the metrics sink (default: ``metrics.jsonl`` plus ``monitor.monitor_type``,
            opened at the first record).
        trainer_progress: shows train steps in a run without an explorer (default: summary
            lines on the console).
        preemption: the signals that stop the run with a checkpoint, and the grace period
            (:mod:`~trinity.launcher.run.preemption`; ``trinity-launch`` passes its
            ``--preemption-signals`` / ``--grace-period``); ``None``: signals keep their
            default effect.
        stop: the run's stop request, its handlers already guarding the whole run
            (:func:`run` does that; default: one for the coordinator's loops alone).
        explorer_options: for :class:`~trinity.launcher.explorer.Explorer`
            (``rollout_engines``, ``auxiliary_engines``, ``plugin_dirs``, ``tasks_per_runner``).

    Raises:
        LaunchInputError: the input cannot work, or the run directory holds a state this run
            cannot continue from (nothing was started).
    """

    #: the run's stop request (``None``: none guards the start-up; see ``stop`` above)
    stop: Optional[StopRequest] = None

    def __init__(
        self,
        config: Config,
        *,
        progress: Any = None,
        monitor: Any = None,
        trainer_progress: Any = None,
        preemption: Optional[PreemptionSettings] = None,
        stop: Optional[StopRequest] = None,
        **explorer_options: Any,
    ) -> None:
        self.preemption = preemption
        self.stop = stop
        self.spec = spec = run_mode_spec(config.mode)
        if not spec.runnable:
            raise LaunchInputError(
                f"mode {spec.name!r} is validated only by this release; runnable modes: "
                f"{', '.join(m.name for m in _runnable())}"
            )
        self.config = config = run_config_for(config)
        #: what the task pipeline did (``data_processor.task_pipeline``): it writes the task set
        #: (or, in mode train, the experiences) this run then reads, so it runs first
        self.task_pipeline_metrics = _run_task_pipeline(config)
        self.sink = monitor if monitor is not None else LazySink(lambda: _create_monitor(config))
        # one record per step where two sides log to it; each log its own record otherwise
        self.records = (
            StepMerger(self.sink) if spec.explores_and_trains else DirectRecords(self.sink)
        )
        self.ledger = ExperienceLedger()
        self.generation_lock = asyncio.Lock()
        self.explorer: Any = None
        if spec.explores or spec.evaluates_checkpoints:
            self.explorer = self._build_explorer(progress, explorer_options)
        self.trainer_progress = trainer_progress
        if spec.trains and self.explorer is None and trainer_progress is None:
            from trinity.launcher.progress import TrainStepPrinter

            self.trainer_progress = TrainStepPrinter(total_steps=train_step_limit(config))
        self.checkpointer = RunCheckpointer(CheckpointSettings.from_config(config, self.explorer))
        if spec.evaluates_checkpoints:
            logger.info(
                "mode bench does not resume: it evaluates the model and every checkpoint of "
                "its directory each time it runs"
            )
        #: the record of a run that already finished under these settings (nothing to do)
        self.done_before = self.checkpointer.finished()
        if self.done_before is not None:
            self.resume_point = None
            return
        self.resume_point = self.checkpointer.find()
        dropped = self.checkpointer.restore(self.resume_point, self.explorer)
        if self.resume_point is not None:
            self.records.restore(self.resume_point.metrics)
            self._say_resumed(self.resume_point, dropped)

    # ------------------------------------------------------------------ building
    def _build_explorer(self, progress: Any, options: dict[str, Any]) -> Any:
        from trinity.launcher.explorer import Explorer
        from trinity.launcher.progress import ProgressReporter

        if progress is None:
            progress = ProgressReporter(total_steps=None, description=self.spec.name)
        try:
            return Explorer(
                self.config,
                monitor=self.records,
                progress=progress,
                on_commit=self.ledger.on_commit,
                generation_lock=self.generation_lock,
                **options,
            )
        except _input_errors() as exc:
            raise LaunchInputError(str(exc)) from exc

    def _say_resumed(self, point: ResumePoint, dropped: int) -> None:
        later = f"{dropped} records after the checkpoint dropped from metrics.jsonl"
        if point.train_step is not None and point.explore_step is not None:
            logger.info(
                "Resuming mode %s from global_step_%d: explore step %d, %d experiences "
                "explored but not trained go back into the queue%s",
                self.spec.name,
                point.train_step,
                point.explore_step,
                len(point.experiences),
                f", {later}" if dropped else "",
            )
        elif point.train_step is not None:
            if dropped:
                logger.info(
                    "Resumed at step %d: %d later records dropped", point.train_step, dropped
                )
        else:
            logger.warning(
                "Resuming mode %s after step %d (%s)%s",
                self.spec.name,
                point.explore_step,
                self.checkpointer.explore_state_path,
                f"; {dropped} records of later steps dropped from metrics.jsonl" if dropped else "",
            )

    def _coordinator(self, trainer: Any, stop: Optional[StopRequest] = None) -> Coordinator:
        """The coordinator of this run, its policies chosen from the config."""
        config, spec, explorer = self.config, self.spec, self.explorer
        sync = policy = turns = None
        if spec.explores_and_trains:
            from trinity.launcher.synchronizer import Synchronizer

            sync = Synchronizer(
                config.synchronizer,
                explorer,
                trainer.engine,
                job_dir=config.checkpoint_job_dir,
                # a LoRA run's engines serve base + adapter: only the adapter moves
                adapter_only=bool(config.model.lora_configs)
                and config.explorer.rollout_model.enable_lora,
            )
            policy = sync_policy_of(config)
            if spec.colocated:  # the engines and the trainer take turns
                from trinity.launcher.colocate import Colocation

                turns = TakingTurns(
                    Colocation(explorer.supervisor, trainer.global_step), self.generation_lock
                )
        point = self.resume_point
        return Coordinator(
            RunSettings.from_config(config),
            explorer=explorer if spec.explores else None,
            trainer=trainer,
            sync=sync,
            policy=policy or Unsynced(),
            turns=turns,
            records=self.records,
            checkpointer=self.checkpointer,
            ledger=self.ledger,
            generation_lock=self.generation_lock,
            restored=point.experiences if point is not None else None,
            trainer_progress=self.trainer_progress,
            end_of_data=_end_of_data(),
            stop=stop,
        )

    # ------------------------------------------------------------------ running
    def run(self) -> Any:
        """Run to the end; returns the last step's metrics (``bench``: ``{step: metrics}``).
        A run that already finished under the same settings says so and starts nothing."""
        if self.done_before is not None:
            logger.warning(
                "Nothing left to do: this run already finished (mode %s, step %s, in %s). "
                "To train further raise buffer.total_steps or buffer.total_epochs; to start "
                "again set continue_from_checkpoint: false (a new run named <name>_<timestamp>) "
                "or choose another name",
                self.spec.name,
                self.done_before.get("step"),
                self.config.checkpoint_job_dir,
            )
            self.sink.close()
            return {}
        try:
            if self.explorer is None and not self._trainer_needs_ray():
                return asyncio.run(self._main(None, None))  # one local rank: no Ray at all
            return self._run_in_ray()
        finally:
            self.records.flush()
            self.sink.close()
            if self.trainer_progress is not None:
                close = getattr(self.trainer_progress, "close", None)
                if callable(close):
                    close()

    def _trainer_needs_ray(self) -> bool:
        """A run without an explorer needs Ray for several trainer ranks, or to read a queue
        another job writes (a Ray queue actor: Trinity-RFT's explore + train jobs sharing one
        queue on one cluster)."""
        if not self.spec.trains:
            return False
        from trinity.launcher.trainer.verl_compat import default_device
        from trinity.launcher.trainer.workers import trainer_world_size

        if _reads_a_ray_queue(self.config):
            return True
        return trainer_world_size(self.config, default_device()) > 1

    def _run_in_ray(self) -> Any:
        from trinity.launcher.placement import placement_session
        from trinity.launcher.trainer.build import build_local_cpu_engines
        from trinity.launcher.trainer.workers import trainer_layout

        config = self.config
        early: Optional[concurrent.futures.Future[Any]] = None
        try:
            if self.spec.trains and self.explorer is not None:
                # a trainer that runs here on the CPU is built while Ray starts
                early = _in_thread(build_local_cpu_engines, config)
            with ray_session(config):
                self._check_stop()
                _read_cluster_sizes(config)
                layout = trainer_layout(config) if self.spec.trains else {}
                with placement_session(config, **layout) as placement:
                    return self._main_in_placement(placement, early)
        finally:
            if early is not None:  # not left building (and joining a process group) past the run
                concurrent.futures.wait([early])

    def _main_in_placement(
        self, placement: Any, early: Optional[concurrent.futures.Future[Any]]
    ) -> Any:
        """The run inside its placement; an actor death on a lost node says so."""
        from trinity.launcher.placement import NodeLostError

        config = self.config
        try:
            return asyncio.run(self._main(placement, early))
        except Exception as exc:
            from trinity.launcher.engines.supervisor import is_engine_death

            # an actor death may be a node's: wait (briefly) for Ray to say so
            wait = NODE_LOSS_WAIT if is_engine_death(exc) else 0
            lost = placement.lost_nodes(wait=wait)
            if lost is None:
                raise
            raise NodeLostError(
                f"{lost}; the run stopped ({type(exc).__name__}). Bring the node back "
                f"(or change the cluster section) and run the same command again: it "
                f"resumes from the last checkpoint in {config.checkpoint_job_dir}"
            ) from exc

    async def _main(self, placement: Any, early: Optional[concurrent.futures.Future[Any]]) -> Any:
        explorer = self.explorer
        trainer = None
        try:
            if self.resume_point is not None and self.spec.explores_and_trains:
                drop_stale_queue(self.config)
            trainer = await self._start(placement, early)
            self._check_stop()
            if explorer is not None and explorer.pipeline is not None:
                self.checkpointer.restore_output(explorer.pipeline.writer)
            freeze_startup_heap()  # set up: full collections no longer walk the imports' objects
            if self.spec.evaluates_checkpoints:
                return await explorer.bench()
            result = await self._run_coordinator(trainer)
            self.checkpointer.mark_finished()
            return result
        finally:
            if trainer is not None:
                trainer.close()
            if explorer is not None:
                await explorer.shutdown()

    def _check_stop(self) -> None:
        """Between two phases of the start-up: a preemption signal that came in the last one
        ends the run here (:meth:`StopRequest.check_start`)."""
        if self.stop is not None:
            self.stop.check_start()

    async def _run_coordinator(self, trainer: Any) -> Any:
        """The coordinator's run, under the preemption signals' handlers where asked for."""
        if self.preemption is None:
            return await self._coordinator(trainer).run()
        stop = self.stop if self.stop is not None else StopRequest()
        with stop.installed(self.preemption):
            return await self._coordinator(trainer, stop).run()

    async def _start(self, placement: Any, early: Optional[concurrent.futures.Future[Any]]) -> Any:
        """Start the explorer's engines and runners while the trainer is built; the trainer
        (``None`` where the run has none) loads its checkpoint."""
        from trinity.launcher.trainer.build import build_trainer

        explorer = self.explorer

        async def build() -> Any:
            if not self.spec.trains:
                return None
            engines = await asyncio.wrap_future(early) if early is not None else None
            return await asyncio.to_thread(build_trainer, self.config, placement, engines)

        async def prepare() -> None:
            if explorer is not None:
                await explorer.prepare(placement)

        prepared, built = await asyncio.gather(prepare(), build(), return_exceptions=True)
        if isinstance(built, BaseException):
            raise built
        trainer = built
        try:
            if isinstance(prepared, BaseException):
                raise prepared
            point = self.resume_point
            if trainer is not None and point is not None and point.train_step is not None:
                await asyncio.to_thread(
                    self.checkpointer.restore_trainer, trainer, point.train_step
                )
        except BaseException:
            if trainer is not None:
                trainer.close()
            raise
        return trainer


def run(config: Config, **options: Any) -> Any:
    """Run ``config`` (checked) in its mode; see :class:`RunSession` for ``options`` (mode
    ``serve``: :func:`trinity.launcher.serve.run.run_serve`, which takes none)."""
    if run_mode_spec(config.mode).serves_api:
        from trinity.launcher.serve.run import run_serve, serve_settings

        try:
            settings = serve_settings(config)
        except ValueError as exc:  # the API key's variable is not set
            raise LaunchInputError(str(exc)) from exc
        return run_serve(config, settings)
    preemption: Optional[PreemptionSettings] = options.get("preemption")
    if preemption is None:
        return RunSession(config, **options).run()
    # a preemption signal in the start-up or the release, not only while the loops run, ends
    # the run with the preemption's exit status (a scheduler requeues on it)
    stop = StopRequest()
    with stop.guarded(preemption):
        return RunSession(config, stop=stop, **options).run()


def _read_cluster_sizes(config: Config) -> None:
    """Cluster sizes the config leaves unset, read from the Ray the run just joined or started
    (Trinity-RFT reads them in its config check; here ``--dry-run`` never starts Ray). On a
    machine without GPUs ``gpu_per_node`` reads 0 and the CPU path is unchanged."""
    import ray

    from trinity.common.config import apply_cluster_sizes

    apply_cluster_sizes(config, ray.nodes())


def _reads_a_ray_queue(config: Config) -> bool:
    """The trainer reads a queue that lives in a Ray actor (``wrap_in_ray``, the default for a
    ``queue`` / ``priority_queue``), which another process may write."""
    trainer_input = config.buffer.trainer_input
    buffers = [trainer_input.experience_buffer, *(trainer_input.auxiliary_buffers or {}).values()]
    return any(
        b is not None
        and str(b.storage_type).lower() in ("queue", "priority_queue")
        and getattr(b, "wrap_in_ray", True)
        for b in buffers
    )


def _run_task_pipeline(config: Config) -> dict[str, float]:
    if config.data_processor is None or config.data_processor.task_pipeline is None:
        return {}
    from trinity.buffer.pipelines import check_and_run_task_pipeline

    metrics = check_and_run_task_pipeline(config)
    if metrics:
        logger.info("Task pipeline: %s", ", ".join(f"{k}={v:g}" for k, v in metrics.items()))
    return metrics


def _end_of_data() -> tuple[type[BaseException], ...]:
    """What a trainer's data source raises when it is used up."""
    from trinity.buffer.buffer_reader import EndOfStream
    from trinity.launcher.trainer.data import EndOfData

    return (EndOfStream, EndOfData, StopAsyncIteration)


def sync_policy_of(config: Any) -> Any:
    """The sync policy of a run that explores and trains (``synchronizer.sync_style``, its
    interval and offset; ``fully_async`` also reads ``explorer.max_inflight_batches`` and pushes
    every ``trainer_sync_interval`` steps, Trinity-RFT 0.6's key, which the rules default to
    ``sync_interval``)."""
    s = config.synchronizer
    interval = s.sync_interval
    if s.sync_style == "fully_async" and s.trainer_sync_interval:
        interval = s.trainer_sync_interval
    return sync_policy(
        s.sync_style,
        interval,
        s.sync_offset,
        max_inflight_batches=config.explorer.max_inflight_batches,
    )


def _runnable() -> list[Any]:
    from trinity.common.config import RUN_MODES

    return [m for m in RUN_MODES.values() if m.runnable]


def _create_monitor(config: Config) -> Any:
    from trinity.launcher.monitor import create_monitor

    return create_monitor(config)


def _in_thread(fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
    """``fn(*args)`` on a daemon thread (an interrupted run does not wait for it at exit)."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the future
            future.set_exception(exc)

    threading.Thread(target=work, name="trinity-trainer-build", daemon=True).start()
    return future


def drop_stale_queue(config: Config) -> None:
    """Kill the queue actor a killed run may have left in a Ray cluster that outlived it: its
    contents (and its count of writers, which never reached zero) are not the checkpoint's."""
    import ray

    from trinity.buffer.storage.ray_queue import kill_ray_queue

    pipeline = config.data_processor.experience_pipeline
    storage = pipeline.output or config.buffer.trainer_input.experience_buffer
    if storage is None or not ray.is_initialized() or not getattr(storage, "wrap_in_ray", True):
        return
    if kill_ray_queue(storage):
        logger.info("Removed the queue %r a previous run left in the Ray cluster", storage.name)
