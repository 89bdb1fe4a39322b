"""The explorer: task sets in, experiences out, evaluations on a schedule.

One explore step reads ``buffer.batch_size`` tasks from the train task set, runs them on the
:class:`~trinity.launcher.runner.RunnerPool`, passes the experiences through the
:class:`~trinity.buffer.pipelines.ExperiencePipeline` (with the algorithm's advantage function
when the algorithm computes advantages outside the trainer, e.g. GRPO) into
``buffer.trainer_input.experience_buffer``, and reports the step's metrics. Exploration stops
at ``buffer.total_steps`` or when the task set is exhausted (``buffer.total_epochs``).

Evaluation reads every ``eval_tasksets`` entry from its start, each time, and reports per task
set, for the reward and every numeric ``Experience.metrics`` key, the mean / best / worst /
standard deviation over the ``repeat_times`` runs of each task, averaged over the tasks
(``eval/<task set>/<key>/mean@k`` ...): see :func:`eval_metrics`.

The explorer talks to engines only through handles, so tests inject model-free ``FakeEngine``
actors and a run builds real ones from the config (``create_rollout_engines``).
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

from trinity.common.config import Config, ExperienceBufferConfig
from trinity.common.experience import Experience
from trinity.launcher.explore_metrics import (  # noqa: F401 - re-exported
    LearningSignalWatch,
    _eval_line,
    _number,
    eval_metrics,
    rollout_metrics,
)
from trinity.launcher.progress import Monitor, ProgressReporter
from trinity.launcher.runner import BatchResult, RunnerPool, TaskResult, assign_task_ids
from trinity.utils.log import get_logger

__all__ = [
    "Explorer",
    "eval_metrics",
    "find_checkpoints",
    "build_experience_pipeline",
    "pipeline_advantage_fn",
    "rollout_metrics",
]

logger = get_logger(__name__)

#: ``global_step_<N>`` directories in ``checkpoint_job_dir`` hold the trainer's checkpoints.
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
#: Where a checkpoint's Hugging Face weights may lie, relative to its step directory.
HF_WEIGHT_SUBDIRS = ("actor/huggingface", "huggingface", "actor", "")


# ---------------------------------------------------------------------- helpers
def pipeline_advantage_fn(config: Config) -> Any:
    """The advantage function the experience pipeline runs, or ``None``.

    ``None`` when the algorithm type computes advantages in the trainer (PPO's GAE needs
    critic values only the trainer has); otherwise the configured ``algorithm.advantage_fn``
    built with its resolved arguments (GRPO's group advantages need whole groups, which only
    the explorer's pipeline sees).
    """
    from trinity.algorithm import resolve_algorithm

    resolved = resolve_algorithm(config)
    if resolved.compute_advantage_in_trainer:
        return None
    fn = resolved.build_advantage_fn()
    in_trainer = getattr(fn, "compute_in_trainer", None)
    if callable(in_trainer) and in_trainer():
        logger.warning(
            "algorithm.advantage_fn %r computes advantages in the trainer although "
            "algorithm_type %r computes them in the explorer; the explorer computes none",
            resolved.advantage_fn,
            resolved.algorithm_type,
        )
        return None
    return fn


def find_checkpoints(job_dir: Optional[str]) -> list[tuple[int, str]]:
    """``(N, weights dir)`` of every ``global_step_N`` under ``job_dir`` holding Hugging Face
    safetensors weights, by N. Step directories without weights are skipped (logged)."""
    if not job_dir or not os.path.isdir(job_dir):
        return []
    found: list[tuple[int, str]] = []
    for entry in os.listdir(job_dir):
        match = _STEP_DIR.match(entry)
        if not match:
            continue
        base = os.path.join(job_dir, entry)
        for sub in HF_WEIGHT_SUBDIRS:
            candidate = os.path.join(base, sub) if sub else base
            if os.path.isdir(candidate) and any(
                f.endswith(".safetensors") for f in os.listdir(candidate)
            ):
                found.append((int(match.group(1)), candidate))
                break
        else:
            logger.warning(
                "Checkpoint %s has no Hugging Face weights (*.safetensors); skipped", base
            )
    return sorted(found)


def _check_engine_configs(config: Config) -> None:
    """Refuse engine settings that cannot start, before anything is started."""
    from trinity.launcher.engines import ENGINE_TYPES, engine_settings

    explorer = config.explorer
    entries = [("explorer.rollout_model", explorer.rollout_model, config.model)]
    entries += [
        (f"explorer.auxiliary_models[{i}]", aux, None)
        for i, aux in enumerate(explorer.auxiliary_models)
    ]
    for where, model_cfg, model in entries:
        try:
            settings = engine_settings(model_cfg, model)
        except ValueError as exc:
            raise ValueError(str(exc).replace("explorer.rollout_model", where)) from None
        if settings.engine_type not in ENGINE_TYPES:
            raise ValueError(
                f"{where}.engine_type: {settings.engine_type!r} is not supported by this "
                f"release; supported: {', '.join(sorted(t for t in ENGINE_TYPES if t != 'fake'))}"
            )


# ---------------------------------------------------------------------- the explorer


def build_experience_pipeline(config: Config, advantage_fn: Any, operators: list[Any]) -> Any:
    """The experience pipeline that writes what is explored (or, mode ``serve``, committed)
    to ``data_processor.experience_pipeline.output`` or the trainer's experience buffer."""
    from trinity.buffer import get_buffer_writer
    from trinity.buffer.pipelines import ExperiencePipeline

    pipeline_config = config.data_processor.experience_pipeline
    output = pipeline_config.output or config.buffer.trainer_input.experience_buffer
    if output is None:
        raise ValueError(
            "buffer.trainer_input.experience_buffer: the explorer has nowhere to write "
            "experiences; set its storage_type and path"
        )
    input_writer = None
    if pipeline_config.save_input and pipeline_config.input_save_path:
        input_writer = get_buffer_writer(
            ExperienceBufferConfig(
                name="explorer_output",
                storage_type="sql",
                path=pipeline_config.input_save_path,
                wrap_in_ray=False,  # written by this process only (as Trinity-RFT 0.6 does)
            )
        )
    return ExperiencePipeline(
        pipeline_config,
        writer=get_buffer_writer(output),
        advantage_fn=advantage_fn,
        input_writer=input_writer,
        operators=operators,
    )


class Explorer:
    """Runs exploration and evaluation of one config.

    Everything that depends only on the config and local files (task sets, eval task sets,
    pipeline operators, the algorithm, engine settings) is checked by the constructor, so a
    bad input fails before Ray or any engine starts. :meth:`prepare` starts the rest.

    Args:
        config: a checked config (``check_and_update`` done).
        rollout_engines: engine actor handles to use instead of building
            ``explorer.rollout_model``'s engines (tests inject ``FakeEngine`` actors); they
            stay running after :meth:`shutdown`.
        auxiliary_engines: likewise, per ``explorer.auxiliary_models`` entry.
        plugin_dirs: loaded by every workflow runner (default: ``TRINITY_PLUGIN_DIRS``).
        monitor: metrics sink (default: ``<checkpoint_job_dir>/metrics.jsonl`` plus the
            config's ``monitor.monitor_type``, see :func:`trinity.launcher.monitor.create_monitor`).
        progress: progress display (default: none; the launcher passes one).
        tasks_per_runner: see :class:`~trinity.launcher.runner.RunnerPool` (default:
            ``explorer.tasks_per_runner``).
        on_commit: ``on_commit(step, experiences)``, called as each explore step commits,
            with the experiences about to be written to the trainer's buffer (the run's
            :class:`~trinity.launcher.checkpoint.ExperienceLedger`; see :meth:`explore_step`).
        generation_lock: held while a step's tasks run on the engines; whoever replaces the
            engines' weights takes it too (the run's weight pushes), so a step never mixes
            versions (default: a lock of its own).
    """

    def __init__(
        self,
        config: Config,
        *,
        rollout_engines: Optional[Sequence[Any]] = None,
        auxiliary_engines: Optional[Sequence[Sequence[Any]]] = None,
        plugin_dirs: Optional[Sequence[str]] = None,
        monitor: Optional[Monitor] = None,
        progress: Optional[ProgressReporter] = None,
        tasks_per_runner: Optional[int] = None,
        on_commit: Optional[Callable[[int, list[Experience]], None]] = None,
        generation_lock: Optional[asyncio.Lock] = None,
    ) -> None:
        from trinity.buffer import get_taskset_reader
        from trinity.buffer.operators.experience_operator import create_operators
        from trinity.buffer.taskset.reader import get_taskset_scheduler
        from trinity.common.config import run_mode_spec

        self.config = config
        self.mode = config.mode
        explorer_input = config.buffer.explorer_input
        self.explores = run_mode_spec(self.mode).explores
        self.taskset: Any = None
        if self.explores:
            tasksets = explorer_input.get_tasksets()
            if not tasksets:
                raise ValueError(
                    f"mode '{self.mode}' needs a train task set: set buffer.explorer_input.taskset"
                )
            self.taskset = (
                get_taskset_reader(tasksets[0])
                if len(tasksets) == 1
                else get_taskset_scheduler(tasksets)
            )
        self.eval_configs = list(explorer_input.eval_tasksets)
        self.eval_readers = [
            get_taskset_reader(cfg, taskset_id=i) for i, cfg in enumerate(self.eval_configs)
        ]
        pipeline_config = config.data_processor.experience_pipeline
        self.operators = create_operators(pipeline_config.operators) if self.explores else []
        self.advantage_fn = pipeline_advantage_fn(config) if self.explores else None
        if rollout_engines is None or (
            auxiliary_engines is None and config.explorer.auxiliary_models
        ):
            _check_engine_configs(config)
        self.rollout_engines: Optional[list[Any]] = (
            list(rollout_engines) if rollout_engines is not None else None
        )
        self.auxiliary_engines: Optional[list[list[Any]]] = (
            [list(g) for g in auxiliary_engines] if auxiliary_engines is not None else None
        )
        self._own_engines: list[Any] = []
        self.plugin_dirs = list(plugin_dirs) if plugin_dirs is not None else None
        if monitor is None and config.checkpoint_job_dir:
            from trinity.launcher.monitor import create_monitor

            monitor = create_monitor(config)
        self.monitor = monitor
        self.progress = progress
        self.tasks_per_runner = (
            config.explorer.tasks_per_runner if tasks_per_runner is None else tasks_per_runner
        )
        self.pool: Optional[RunnerPool] = None
        #: replaces rollout engines that die (set by :meth:`prepare`)
        self.supervisor: Any = None
        #: the run's :class:`~trinity.launcher.placement.Placement` (given to :meth:`prepare`):
        #: engines this explorer builds, and their runners, go in its bundles
        self.placement: Any = None
        self.pipeline: Any = None
        self._output_closed = False
        self.step = 0
        self.last_metrics: dict[str, float] = {}
        self.on_commit = on_commit
        self.generation_lock = generation_lock if generation_lock is not None else asyncio.Lock()
        #: metrics of committed steps not yet logged (their write is in progress), by step
        self.unlogged: dict[int, dict[str, Any]] = {}
        #: warns when every response is clipped or every group's rewards are identical
        self.signal_watch = LearningSignalWatch(
            max_response_tokens=config.explorer.rollout_model.max_response_tokens
            or config.model.max_response_tokens
        )
        self._committed: dict[str, Any] = self._current_state()

    # ------------------------------------------------------------------ lifecycle
    @property
    def total_steps(self) -> Optional[int]:
        """Steps this run will take, when known in advance."""
        if self.config.buffer.total_steps:
            return int(self.config.buffer.total_steps)
        taskset = self.taskset
        if taskset is None:
            return None
        total = getattr(taskset, "total_steps", None)
        if isinstance(total, int):
            return total
        if hasattr(taskset, "readers"):  # a scheduler over several task sets
            return taskset.total_epochs * len(taskset) // taskset.batch_size
        return None

    async def prepare(self, placement: Any = None) -> None:
        """Start the engines (unless injected), the runner pool and the pipeline's writer;
        engines this explorer builds, and their runners, go in ``placement``'s bundles (a
        :class:`~trinity.launcher.placement.Placement`; default: wherever Ray puts them)."""
        import ray

        if not ray.is_initialized():
            raise RuntimeError("Explorer.prepare() needs Ray: call ray.init() first")
        from trinity.launcher.engines import create_auxiliary_engines, create_rollout_engines

        self.placement = placement
        placed = self.placement is not None and self.rollout_engines is None
        if self.rollout_engines is None:
            self.rollout_engines = create_rollout_engines(self.config, placement=self.placement)
            self._own_engines += self.rollout_engines
        if self.auxiliary_engines is None:
            self.auxiliary_engines = create_auxiliary_engines(self.config, placement=self.placement)
            self._own_engines += [h for g in self.auxiliary_engines for h in g]
        handles = [*self.rollout_engines, *(h for g in self.auxiliary_engines for h in g)]
        self.supervisor = self._build_supervisor()
        self.pool = RunnerPool.from_config(
            self.config,
            self.rollout_engines,
            self.auxiliary_engines,
            plugin_dirs=self.plugin_dirs,
            tasks_per_runner=self.tasks_per_runner,
            supervisor=self.supervisor,
            runner_options=self.placement.runner_options if placed else None,
        )
        # The runner processes start (import their modules and plugins) while the engines load
        # their models; they meet their engines once those are ready.
        self.pool.prestart()
        await asyncio.gather(*(h.ready.remote() for h in handles))
        await self.supervisor.start()
        await self.pool.start()
        if self.explores:
            self.pipeline = self._build_pipeline()
            await self.pipeline.prepare()

    def _build_supervisor(self) -> Any:
        """The supervisor that replaces dead rollout engines (it shares
        ``self.rollout_engines``, so a replacement is what everyone sees next)."""
        from trinity.launcher.engines.supervisor import EngineSupervisor

        explorer = self.config.explorer
        assert self.rollout_engines is not None
        return EngineSupervisor(
            self.rollout_engines,
            owned=[any(h is o for o in self._own_engines) for h in self.rollout_engines],
            max_restarts=explorer.max_engine_restarts,
            window=explorer.engine_restart_window,
            engine_options=[
                self.placement.engine_options(i) if owned and self.placement is not None else None
                for i, owned in enumerate(
                    any(h is o for o in self._own_engines) for h in self.rollout_engines
                )
            ],
        )

    def _build_pipeline(self) -> Any:
        return build_experience_pipeline(self.config, self.advantage_fn, self.operators)

    async def write_restored(self, exps: list[Experience]) -> None:
        """Write experiences a resumed run carried over (explored, not trained) to the output
        first, as they were (no operators, no advantages again)."""
        await self.pipeline.writer.write_async(exps)

    async def flush_output(self) -> None:
        """Let a reader take what the output holds now, even less than a batch (see
        :meth:`trinity.buffer.buffer_writer.BufferWriter.flush`)."""
        flush = getattr(getattr(self.pipeline, "writer", None), "flush_async", None)
        if callable(flush):
            await flush()

    async def close_output(self) -> None:
        """Release the output (a reader drains it, then sees its end); once."""
        if self.pipeline is not None and not self._output_closed:
            self._output_closed = True
            await self.pipeline.close()

    async def shutdown(self) -> None:
        """Release the writer, the runners and the engines this explorer started."""
        if self.pipeline is not None:
            await self.close_output()
            self.pipeline = None
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None
        if self.supervisor is not None:  # replacements the supervisor started are ours too
            own = self._own_engines + self.supervisor.owned_handles()
            self._own_engines = list({id(h): h for h in own}.values())
            self.supervisor = None
        if self._own_engines:
            import ray

            async def stop(handle: Any) -> None:
                try:
                    await asyncio.wait_for(handle.shutdown.remote(), 60)
                except Exception as exc:  # a dead engine has nothing left to release
                    logger.debug("engine shutdown: %s", exc)
                ray.kill(handle, no_restart=True)

            await asyncio.gather(*(stop(h) for h in self._own_engines))
            self._own_engines = []
        if self.monitor is not None:
            self.monitor.close()
        if self.progress is not None:
            self.progress.close()

    def _log(self, metrics: dict[str, Any], step: int) -> None:
        if self.supervisor is not None and "rollout/tasks" in metrics:  # an explore step's
            # record: engines restarted since the previous one (during it, or during a sync)
            metrics["rollout/engine_restarts"] = float(self.supervisor.take_unreported())
            metrics["rollout/engine_restarts_total"] = float(self.supervisor.total_restarts)
        if self.monitor is not None:
            self.monitor.log(metrics, step)

    def _require_pool(self) -> RunnerPool:
        if self.pool is None:
            raise RuntimeError("call `await explorer.prepare()` first")
        return self.pool

    # ------------------------------------------------------------------ exploring
    async def explore_step(self) -> bool:
        """Run one step; ``False`` (and nothing run) once the task set is exhausted or
        ``buffer.total_steps`` is reached."""
        pool = self._require_pool()
        if self.taskset is None:
            raise RuntimeError(f"mode '{self.mode}' does not explore")
        total = self.config.buffer.total_steps
        if total is not None and self.step >= total:
            return False
        start = time.perf_counter()
        try:
            tasks = await self.taskset.read_async()
        except StopAsyncIteration:
            return False
        step = self.step + 1
        assign_task_ids(tasks, batch_id=step)
        async with self.generation_lock:
            batch = await self._run_step_tasks(pool, tasks, step)
        exps = batch.experiences
        metrics: dict[str, Any] = {"rollout/tasks": float(len(tasks))}

        def add_timings() -> None:
            seconds = time.perf_counter() - start
            metrics["time/explore_step"] = seconds
            metrics["rollout/tasks_per_second"] = len(tasks) / seconds if seconds > 0 else 0.0
            metrics["rollout/tokens_per_second"] = (
                metrics.get("rollout/response_tokens", 0.0) / seconds if seconds > 0 else 0.0
            )

        def commit(written: list[Experience], pipeline_metrics: dict[str, Any]) -> None:
            # The step is done here, synchronously, before its experiences are written: the
            # selectors have their feedback, the counter moves on, and ``on_commit`` (mode
            # both's checkpoint ledger) sees exactly what the buffer is about to receive, so
            # a checkpoint taken at any moment holds a consistent (position, experiences) pair.
            update = getattr(self.taskset, "update", None)
            if callable(update):  # pass rates back to adaptive task selectors
                update(pipeline_metrics)
            self.step = step
            self._committed = self._current_state()
            metrics.update(batch.metrics)
            metrics.update(rollout_metrics(exps))
            metrics.update(self.signal_watch.update(metrics))
            metrics.update({k: v for k, v in pipeline_metrics.items() if _number(v) is not None})
            reader_metrics = getattr(self.taskset, "metrics", None)
            if callable(reader_metrics):
                metrics.update(reader_metrics())
            add_timings()  # so far; the write's time is added once it is done
            self.unlogged[step] = metrics
            if self.on_commit is not None:
                self.on_commit(step, written)

        pipeline_metrics = await self.pipeline.process(exps, before_write=commit)
        metrics.update({k: v for k, v in pipeline_metrics.items() if _number(v) is not None})
        add_timings()
        self.last_metrics = metrics
        self._log(metrics, step)
        self.unlogged.pop(step, None)
        if self.progress is not None:
            self.progress.step(step, metrics)
        return True

    async def _run_step_tasks(self, pool: RunnerPool, tasks: list[Any], step: int) -> BatchResult:
        """Run one step's tasks; while fewer than ``explorer.min_batch_fraction`` of them
        succeeded, run replacement tasks (the next ones of the task set) in their place, at
        most ``explorer.max_replacement_rounds`` rounds.

        Returns one :class:`BatchResult` over every task run (replacements appended; its
        ``runner/*`` counters summed over the rounds, ``rollout/replacement_tasks`` and
        ``rollout/replacement_rounds`` added).

        Raises:
            RuntimeError: no task of the step succeeded, even after the replacements: a step
                with no experience is not a step, and a workflow that fails every task would
                otherwise loop forever. The message carries the last task's error.
        """
        cfg = self.config.explorer
        batch = await pool.run_tasks(tasks)
        results = list(batch.results)
        metrics = dict(batch.metrics)
        replaced = rounds = 0
        wanted = math.ceil(cfg.min_batch_fraction * len(tasks))
        while rounds < cfg.max_replacement_rounds:
            ok = sum(1 for r in results if r.ok)
            if ok >= wanted:
                break
            # replacements: the next tasks in the task set's order, not counted as a step
            # (``total_steps`` counts steps); past the last epoch they wrap to the next order
            draw = getattr(self.taskset, "draw", None)
            if not callable(draw):
                break
            extra = draw(wanted - ok)
            if not extra:
                break
            rounds += 1
            replaced += len(extra)
            assign_task_ids(extra, batch_id=step, first_task_id=len(results))
            logger.warning(
                "explore step %d: %d of %d tasks succeeded (explorer.min_batch_fraction %g); "
                "running %d replacement tasks (round %d/%d)",
                step,
                ok,
                len(tasks),
                cfg.min_batch_fraction,
                len(extra),
                rounds,
                cfg.max_replacement_rounds,
            )
            more = await pool.run_tasks(extra)
            results += more.results
            for key, value in more.metrics.items():
                if key.startswith("runner/") and not key.startswith("runner/task_seconds"):
                    metrics[key] = metrics.get(key, 0.0) + value
                elif key == "time/run_tasks":
                    metrics[key] = metrics.get(key, 0.0) + value
        metrics["rollout/replacement_tasks"] = float(replaced)
        metrics["rollout/replacement_rounds"] = float(rounds)
        ok_results = [r for r in results if r.ok]
        if not ok_results or not any(r.experiences for r in ok_results):
            last = next((r.error for r in reversed(results) if r.error), None) or "no error"
            raise RuntimeError(
                f"explore step {step}: none of its {len(results)} tasks produced an experience "
                f"({len(results) - len(ok_results)} failed, {replaced} of them replacements, "
                f"explorer.max_replacement_rounds {cfg.max_replacement_rounds}); the last "
                f"error:\n{last}"
            )
        if len(ok_results) < wanted:
            logger.warning(
                "explore step %d: only %d of %d tasks succeeded after %d replacement rounds; "
                "the trainer trains on what the step produced",
                step,
                len(ok_results),
                len(tasks),
                rounds,
            )
        return BatchResult(results, metrics)

    # ------------------------------------------------------------------ resume
    def _current_state(self) -> dict[str, Any]:
        taskset_state = getattr(self.taskset, "state_dict", None)
        return {
            "step": self.step,
            "taskset": taskset_state() if callable(taskset_state) else None,
        }

    def state_dict(self) -> dict[str, Any]:
        """The explore step counter and the train task set's position after the last
        *committed* step (JSON-able).

        A step in flight (tasks read, not yet committed) is not part of it: resuming from this
        state reads and runs that step's tasks again, and nothing of it reached the buffer.
        """
        return dict(self._committed)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue after the step :meth:`state_dict` recorded (before :meth:`prepare`)."""
        self.step = int(state.get("step", 0))
        saved = state.get("taskset")
        if saved and self.taskset is not None:
            self.taskset.load_state_dict(saved)
        self._committed = self._current_state()

    async def explore(self) -> dict[str, float]:
        """Explore until the task set or ``buffer.total_steps`` ends, evaluating at step 0
        (``explorer.eval_on_startup``) and every ``explorer.eval_interval`` steps: the run
        layer's explore loop with this explorer alone (nothing saved; a run of mode
        ``explore`` also records its position, see :mod:`trinity.launcher.session`).

        Returns the last step's metrics.
        """
        from trinity.launcher.run.coordinator import Coordinator, RunSettings

        coordinator = Coordinator(
            RunSettings.from_config(self.config),
            explorer=self,
            generation_lock=self.generation_lock,
        )
        return await coordinator.run()

    # ------------------------------------------------------------------ evaluating
    async def eval(self, step: Optional[int] = None) -> dict[str, float]:
        """Evaluate every eval task set from its start; log and return the metrics."""
        pool = self._require_pool()
        step = self.step if step is None else step
        metrics: dict[str, float] = {}
        for cfg, reader in zip(self.eval_configs, self.eval_readers, strict=True):
            start = time.perf_counter()
            reader.reset()
            results: list[TaskResult] = []
            while True:
                try:
                    tasks = reader.read()
                except StopIteration:
                    break
                assign_task_ids(tasks, batch_id=f"{step}/{reader.name}", first_task_id=len(results))
                async with self.generation_lock:
                    results += (await pool.run_tasks(tasks)).results
            found = eval_metrics(reader.name, results, cfg.repeat_times or 1)
            found[f"time/eval/{reader.name}"] = time.perf_counter() - start
            metrics.update(found)
            if self.progress is not None:
                self.progress.message(_eval_line(step, reader.name, found, cfg.repeat_times or 1))
        self._log(metrics, step)
        return metrics

    async def load_weights(
        self, path: Optional[str], version: int, *, state_dict: Any = None
    ) -> None:
        """Load weights into every rollout engine as model version ``version``: those at
        ``path`` (safetensors file or HF directory), or ``state_dict`` (a state dict or the
        Ray object ref of one). The supervisor records them, so an engine that dies later
        comes back with them, and replaces an engine found dead on the way."""
        if self.supervisor is not None:
            await self.supervisor.update_weights(version, state=state_dict, path=path)
            return
        engines = self.rollout_engines or []
        kwargs = {"path": path} if state_dict is None else {"state_dict": state_dict}
        await asyncio.gather(*(h.update_weights.remote(version=version, **kwargs) for h in engines))

    async def bench(self) -> dict[int, dict[str, float]]:
        """Evaluate every eval task set (mode ``bench``); return ``{step: metrics}``.

        With ``explorer.bench_on_latest_checkpoint`` false: the model as loaded (step 0),
        then every ``global_step_N`` checkpoint of ``checkpoint_job_dir`` in order of N. With
        it true: only the latest checkpoint (the model as loaded when there is none).
        """
        checkpoints = find_checkpoints(self.config.checkpoint_job_dir)
        targets: list[tuple[int, Optional[str]]]
        if self.config.explorer.bench_on_latest_checkpoint:
            targets = [checkpoints[-1]] if checkpoints else [(0, None)]
        else:
            targets = [(0, None), *checkpoints]
        results: dict[int, dict[str, float]] = {}
        for step, path in targets:
            if path is not None:
                if self.progress is not None:
                    self.progress.message(f"bench: loading checkpoint {path} (step {step})")
                await self.load_weights(path, step)
            results[step] = await self.eval(step)
        return results
