"""The pool of workflow runners: where user workflows run, kept running whatever they do.

A :class:`~trinity.launcher.workflow_runner.WorkflowRunner` (its own module; re-exported here)
runs tasks against one rollout engine as an async Ray actor.

:class:`RunnerPool` owns ``explorer.runner_per_model`` runners per rollout engine and runs a
batch of tasks on them. User code is untrusted in the sense that it may hang, raise or kill
its process, and a batch must survive all three:

* a task that raises is retried up to ``explorer.max_retry_times`` times, then recorded as
  failed (a log line names the task and carries the workflow's traceback);
* a task that exceeds ``explorer.max_timeout`` seconds counts as a hang: its runner is
  retired (it takes no new tasks, finishes what else it is running, then is killed; a thread
  stuck in a sync workflow cannot be interrupted any other way) and a fresh actor takes its
  place; the task is retried;
* a runner whose process dies (``RayActorError``) is replaced; every task that was running
  on it is retried (each is charged one retry: which of them killed it cannot be known);
* a task that failed because its rollout engine died (the runner asks the engine's health
  after any failure) is not charged a retry: the pool has the explorer's
  :class:`~trinity.launcher.engines.supervisor.EngineSupervisor` replace the engine, starts
  that engine's runners afresh on the new handle, and runs the task again.

The batch completes without the tasks that failed; :class:`BatchResult` carries them with
their errors, and the ``runner/*`` metrics count what happened.

Experiences travel back from a runner as :meth:`Experience.serialize_many` bytes (safetensors
+ JSON), never pickled.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import os
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from trinity.common.experience import Experience
from trinity.common.workflows import Task
from trinity.launcher.ray_refs import await_ref, cancel_and_settle, crash_errors, kill
from trinity.launcher.workflow_runner import (  # noqa: F401 - re-exported
    MAX_IDLE_WORKFLOWS,
    WorkflowRunner,
    _remote_runner_class,
)
from trinity.utils.log import get_logger
from trinity.utils.plugin_loader import PLUGIN_DIRS_ENV, get_plugin_dirs

__all__ = [
    "BatchResult",
    "RunnerPool",
    "TaskResult",
    "WorkflowRunner",
    "assign_task_ids",
    "describe_task",
]

logger = get_logger(__name__)

#: Seconds a freshly started runner actor may take to import its modules and plugins.
RUNNER_START_TIMEOUT = 300.0


def assign_task_ids(tasks: Sequence[Task], batch_id: Any, first_task_id: int = 0) -> None:
    """Stamp ``batch_id`` and consecutive task ids on ``tasks`` (in place).

    The runner copies them into every experience's EID (``batch/task/run``). The explorer
    uses its step as the batch id and the position in the batch as the task id, so ids are
    unique within a step even when one task-set row appears twice in a batch (a batch that
    straddles two epochs); the row itself stays in ``task.index``.
    """
    for i, task in enumerate(tasks):
        task.batch_id = batch_id
        task.task_id = first_task_id + i


def describe_task(task: Task) -> str:
    """``task 3/1 (taskset 'math' row 17)``: how logs and errors name a task."""
    text = f"task {task.batch_id}/{task.task_id}"
    index = task.index or {}
    if "index" in index:
        name = index.get("taskset_name") or index.get("taskset_id", "")
        text += f" (taskset {name!r} row {index['index']})"
    return text


# ---------------------------------------------------------------------- results
@dataclass
class TaskResult:
    """What became of one task of a batch."""

    task: Task
    ok: bool = False
    experiences: list[Experience] = field(default_factory=list)
    #: the last failure: a traceback, ``timeout ...`` or ``runner died ...``
    error: Optional[str] = None
    attempts: int = 0
    seconds: float = 0.0
    #: the runner of the last attempt
    runner_id: Optional[int] = None


@dataclass
class BatchResult:
    """The tasks of one :meth:`RunnerPool.run_tasks` call, in input order, and its metrics."""

    results: list[TaskResult]
    metrics: dict[str, float]

    @property
    def experiences(self) -> list[Experience]:
        return [e for r in self.results for e in r.experiences]

    @property
    def failed(self) -> list[TaskResult]:
        return [r for r in self.results if not r.ok]


# ---------------------------------------------------------------------- the pool
class _Runner:
    """The pool's record of one runner actor."""

    def __init__(self, handle: Any, runner_id: int, slot: int, engine_index: int) -> None:
        self.handle = handle
        self.runner_id = runner_id
        self.slot = slot
        self.engine_index = engine_index
        self.in_flight = 0
        self.usable = True  # False once retired (hung) or dead
        self.killed = False
        #: the pool's count of restarts of its engine when it started (stale once it moves)
        self.engine_generation = 0


class _TaskState:
    """One unit of work: a task, or a chunk of its runs (``max_repeat_times_per_runner``)."""

    def __init__(self, task: Task, run_id_base: int = 0) -> None:
        self.result = TaskResult(task=task)
        self.run_id_base = run_id_base


def _merge_chunks(task: Task, parts: list[TaskResult]) -> TaskResult:
    """One result for a task whose runs were split across runners: ok when every chunk is;
    the experiences of the chunks that succeeded are kept either way."""
    if len(parts) == 1:
        return parts[0]
    failed = [p for p in parts if not p.ok]
    return TaskResult(
        task=task,
        ok=not failed,
        experiences=[e for p in parts if p.ok for e in p.experiences],
        error=failed[0].error if failed else None,
        attempts=max(p.attempts for p in parts),
        seconds=max(p.seconds for p in parts),
        runner_id=parts[-1].runner_id,
    )


class RunnerPool:
    """``runner_per_model`` :class:`WorkflowRunner` actors per rollout engine.

    Args:
        rollout_engines: engine actor handles of the policy model; runner ``i`` serves engine
            ``i // runner_per_model``.
        auxiliary_engines: per auxiliary model, its engine handles; a runner uses engine
            ``slot % len(group)`` of each group.
        runner_per_model: ``explorer.runner_per_model``.
        max_timeout: ``explorer.max_timeout``, seconds one attempt of a task may take.
        max_retry_times: ``explorer.max_retry_times``, further attempts after a failure.
        tasks_per_runner: tasks one runner runs at once on its event loop. 1 (the default)
            keeps Trinity-RFT's meaning of ``runner_per_model`` (concurrent tasks per engine)
            and keeps a hung or crashing task from touching any other task; raise it for
            async workflows that mostly wait on I/O.
        plugin_dirs: imported by every runner before it runs a task (default: the
            directories this process loaded, from ``TRINITY_PLUGIN_DIRS``).
        env_vars: environment of the runner actors (``explorer.env_vars`` and the run's
            variables); ``TRINITY_PLUGIN_DIRS`` is always set from ``plugin_dirs``.
        num_cpus: Ray CPUs reserved per runner (runners mostly wait on engines: 0).
        start_timeout: seconds a new runner may take to import its modules and plugins and
            meet its engines.
        runner_options: ``engine index -> Ray actor options`` of that engine's runners (its
            placement-group bundle, :meth:`~trinity.launcher.placement.Placement.
            runner_options`); they override ``num_cpus``.
    """

    def __init__(
        self,
        rollout_engines: Sequence[Any],
        auxiliary_engines: Optional[Sequence[Sequence[Any]]] = None,
        *,
        runner_per_model: int = 8,
        max_timeout: float = 1800,
        max_retry_times: int = 2,
        tasks_per_runner: int = 1,
        plugin_dirs: Optional[Sequence[str]] = None,
        env_vars: Optional[dict[str, str]] = None,
        num_cpus: float = 0,
        start_timeout: float = RUNNER_START_TIMEOUT,
        concurrent_mode: str = "sequential",
        max_repeat_times_per_runner: Optional[int] = None,
        supervisor: Any = None,
        runner_options: Optional[Callable[[int], dict[str, Any]]] = None,
    ) -> None:
        from trinity.common.workflows import CONCURRENT_MODES

        if not rollout_engines:
            raise ValueError("RunnerPool needs at least one rollout engine")
        for name, value, low in (
            ("explorer.runner_per_model", runner_per_model, 1),
            ("explorer.max_retry_times", max_retry_times, 0),
            ("tasks_per_runner", tasks_per_runner, 1),
        ):
            if int(value) < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        if max_timeout <= 0:
            raise ValueError(f"explorer.max_timeout must be > 0, got {max_timeout}")
        if concurrent_mode not in CONCURRENT_MODES:
            raise ValueError(
                f"explorer.concurrent_mode: {concurrent_mode!r} is not one of "
                f"{', '.join(CONCURRENT_MODES)}"
            )
        if max_repeat_times_per_runner is not None and max_repeat_times_per_runner < 1:
            raise ValueError(
                "explorer.max_repeat_times_per_runner must be >= 1, got "
                f"{max_repeat_times_per_runner}"
            )
        self.concurrent_mode = concurrent_mode
        self.max_repeat_times_per_runner = max_repeat_times_per_runner
        self.rollout_engines = list(rollout_engines)
        self.auxiliary_engines = [list(g) for g in (auxiliary_engines or [])]
        for k, group in enumerate(self.auxiliary_engines):
            if not group:
                raise ValueError(f"explorer.auxiliary_models[{k}] has no engine")
        self.runner_per_model = int(runner_per_model)
        self.max_timeout = float(max_timeout)
        self.max_retry_times = int(max_retry_times)
        self.tasks_per_runner = int(tasks_per_runner)
        if plugin_dirs is None:
            plugin_dirs = [str(p) for p in get_plugin_dirs(None)]
        self.plugin_dirs = [str(p) for p in plugin_dirs]
        self.env_vars = {k: str(v) for k, v in (env_vars or {}).items()}
        self.env_vars[PLUGIN_DIRS_ENV] = os.pathsep.join(self.plugin_dirs)
        self.num_cpus = num_cpus
        self.runner_options = runner_options
        self.start_timeout = float(start_timeout)
        self.size = len(self.rollout_engines) * self.runner_per_model
        self._slots: list[Optional[_Runner]] = [None] * self.size
        self._starting: dict[int, asyncio.Task] = {}
        self._starting_handles: dict[int, Any] = {}
        #: slot -> (runner id, handle) of runners created by :meth:`prestart`, not yet started
        self._prestarted: dict[int, tuple[int, Any]] = {}
        self._retired: list[_Runner] = []
        self._ids = itertools.count()
        self._last_start_error: Optional[str] = None
        self._counts: dict[str, float] = {}
        self.total_replaced = 0
        #: replaces dead rollout engines (:class:`~trinity.launcher.engines.supervisor.
        #: EngineSupervisor`); without one a task of a dead engine fails like any other
        self.supervisor = supervisor
        self._engine_generation = [0] * len(self.rollout_engines)
        self._restarting: dict[int, asyncio.Task] = {}

    @classmethod
    def from_config(
        cls,
        config: Any,
        rollout_engines: Sequence[Any],
        auxiliary_engines: Optional[Sequence[Sequence[Any]]] = None,
        **kwargs: Any,
    ) -> RunnerPool:
        """The pool of ``config.explorer``'s settings over the given engines."""
        from trinity.launcher.logs import worker_env_vars

        explorer = config.explorer
        env = worker_env_vars(config)  # the run's variables at the run's (or --log-level) level
        env.update(explorer.env_vars or {})
        kwargs.setdefault("env_vars", env)
        return cls(
            rollout_engines,
            auxiliary_engines,
            runner_per_model=explorer.runner_per_model,
            max_timeout=explorer.max_timeout,
            max_retry_times=explorer.max_retry_times,
            concurrent_mode=explorer.concurrent_mode,
            max_repeat_times_per_runner=explorer.max_repeat_times_per_runner,
            **kwargs,
        )

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start every runner and wait until each has loaded the plugins and met its engine.

        Raises:
            RuntimeError: a runner could not start (e.g. a plugin failed to import); the
                message carries the runner's error.
        """
        results = await asyncio.gather(
            *(self._start_runner(slot) for slot in range(self.size)), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            self.shutdown()
            raise RuntimeError(f"could not start the workflow runners: {errors[0]}") from errors[0]

    def _create_actor(self, slot: int, runner_id: int) -> Any:
        engine = self.rollout_engines[slot // self.runner_per_model]
        aux = [group[slot % len(group)] for group in self.auxiliary_engines]
        options: dict[str, Any] = {
            "num_cpus": self.num_cpus,
            "max_restarts": 0,
            "runtime_env": {"env_vars": dict(self.env_vars)},
            # Ray's GCS keeps an event record of every actor call (up to 100,000 calls): a
            # run's tasks and engine calls made it grow ~130 MB per 1,000 quickstart steps
            # (benchmarks/soak.py). Nothing reads them (no dashboard), so none are recorded.
            "enable_task_events": False,
        }
        if self.runner_options is not None:
            options.update(self.runner_options(slot // self.runner_per_model))
        return (
            _remote_runner_class()
            .options(**options)
            .remote(
                engine,
                aux,
                runner_id=runner_id,
                plugin_dirs=self.plugin_dirs,
                concurrent_mode=self.concurrent_mode,
            )
        )

    def prestart(self) -> None:
        """Create every slot's runner actor now, so that its process starts (imports its
        modules and plugins) while the engines load; :meth:`start` then waits for them and
        has each meet its engine. Idempotent."""
        for slot in range(self.size):
            if slot not in self._prestarted:
                runner_id = next(self._ids)
                handle = self._create_actor(slot, runner_id)
                self._starting_handles[runner_id] = handle  # so that shutdown() can kill it
                self._prestarted[slot] = (runner_id, handle)

    async def _start_runner(self, slot: int) -> _Runner:
        generation = self._engine_generation[slot // self.runner_per_model]
        if slot in self._prestarted:
            runner_id, handle = self._prestarted.pop(slot)
        else:
            runner_id = next(self._ids)
            handle = self._create_actor(slot, runner_id)
            self._starting_handles[runner_id] = handle  # so that shutdown() can kill it
        try:
            await asyncio.wait_for(await_ref(handle.ready.remote()), self.start_timeout)
        except BaseException as exc:
            kill(handle)
            if isinstance(exc, asyncio.TimeoutError):
                raise RuntimeError(
                    f"workflow runner {runner_id} did not start within {self.start_timeout:.0f} s"
                ) from None
            raise
        finally:
            self._starting_handles.pop(runner_id, None)
        runner = _Runner(handle, runner_id, slot, slot // self.runner_per_model)
        runner.engine_generation = generation
        self._slots[slot] = runner
        return runner

    async def _replace_in_background(self, slot: int) -> None:
        try:
            await self._start_runner(slot)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._last_start_error = f"{type(exc).__name__}: {exc}"
            logger.error("Could not start a replacement workflow runner: %s", exc)
        finally:
            self._starting.pop(slot, None)

    def _replace(self, runner: _Runner, reason: str) -> None:
        """Take ``runner`` out of service and start a fresh actor in its slot."""
        if not runner.usable:
            return
        runner.usable = False
        self._count("runner/replaced_runners")
        self.total_replaced += 1
        logger.warning("Replacing workflow runner %d: %s", runner.runner_id, reason)
        if self._slots[runner.slot] is runner:
            self._slots[runner.slot] = None
        self._retired.append(runner)
        self._reap()
        if runner.engine_index in self._restarting or runner.slot in self._starting:
            return  # the engine's restart (or a start under way) fills the slot
        self._starting[runner.slot] = asyncio.ensure_future(
            self._replace_in_background(runner.slot)
        )

    # ------------------------------------------------------------------ dead engines
    def _engine_slots(self, index: int) -> range:
        return range(index * self.runner_per_model, (index + 1) * self.runner_per_model)

    def _engine_down(self, index: int, reason: str) -> None:
        """Take engine ``index``'s runners out of service and restart the engine."""
        if index in self._restarting:
            return
        dead = self.rollout_engines[index]
        for slot in self._engine_slots(index):
            starting = self._starting.pop(slot, None)
            if starting is not None:  # it would bind the dead handle (its actor is killed)
                starting.cancel()
            runner = self._slots[slot]
            if runner is not None and runner.usable:
                runner.usable = False
                self._slots[slot] = None
                self._retired.append(runner)
        self._reap()
        self._restarting[index] = asyncio.ensure_future(self._restart_engine(index, dead, reason))

    async def _restart_engine(self, index: int, dead: Any, reason: str) -> None:
        handle = await self.supervisor.restart(index, dead, reason)
        self.rollout_engines[index] = handle
        self._engine_generation[index] += 1
        await asyncio.gather(*(self._start_runner(s) for s in self._engine_slots(index)))

    def _raise_failed_restart(self, running: dict[asyncio.Task, Any]) -> None:
        """Forget finished restarts; re-raise one that failed (past the bound: the run stops)."""
        for index, restart in list(self._restarting.items()):
            if not restart.done():
                continue
            del self._restarting[index]
            if restart.cancelled() or restart.exception() is None:
                continue
            for attempt in running:
                attempt.cancel()
            raise restart.exception()  # type: ignore[misc]

    def _reap(self) -> None:
        """Kill retired runners that no longer run any task of ours."""
        for runner in list(self._retired):
            if runner.in_flight == 0:
                kill(runner.handle)
                runner.killed = True
                self._retired.remove(runner)

    async def wait_ready(self) -> None:
        """Wait until the replacement runners (and engines) being started are up (or have
        failed)."""
        while self._starting or self._restarting:
            pending = [*self._starting.values(), *self._restarting.values()]
            await asyncio.gather(*pending, return_exceptions=True)
            self._restarting = {i: t for i, t in self._restarting.items() if not t.done()}

    def shutdown(self) -> None:
        """Kill every runner (the engines are left alone: they belong to the caller)."""
        for task in [*self._starting.values(), *self._restarting.values()]:
            task.cancel()
        self._starting.clear()
        self._restarting.clear()
        for handle in self._starting_handles.values():
            kill(handle)
        self._starting_handles.clear()
        self._prestarted.clear()
        for runner in [*self._slots, *self._retired]:
            if runner is not None and not runner.killed:
                kill(runner.handle)
                runner.killed = True
        self._slots = [None] * self.size
        self._retired.clear()

    @property
    def runners(self) -> list[Any]:
        """Handles of the runners in service (for tests and diagnostics)."""
        return [r.handle for r in self._slots if r is not None]

    # ------------------------------------------------------------------ running
    def _count(self, key: str, n: float = 1) -> None:
        self._counts[key] = self._counts.get(key, 0) + n

    def _free_runner(self) -> Optional[_Runner]:
        free = [
            r
            for r in self._slots
            if r is not None and r.usable and r.in_flight < self.tasks_per_runner
        ]
        return min(free, key=lambda r: r.in_flight) if free else None

    async def _attempt(self, runner: _Runner, state: _TaskState) -> tuple[str, Any]:
        """One attempt: ``("ok", result)``, ``("error", tb)``, ``("timeout", msg)`` or
        ``("crash", msg)``."""
        try:
            ref = runner.handle.run_task.remote(state.result.task, state.run_id_base)
            result = await asyncio.wait_for(await_ref(ref), self.max_timeout)
        except asyncio.TimeoutError:
            # Cancel the task before its runner is replaced: Ray's recursive cancel also
            # cancels the engine calls it is waiting on. Killing the runner alone would leave
            # them queued on the engine, and the next tasks would wait behind abandoned work
            # (on a loaded machine each then times out in turn).
            await cancel_and_settle(ref)
            message = (
                f"timeout: no result within explorer.max_timeout ({self.max_timeout:g} s) "
                f"on workflow runner {runner.runner_id}"
            )
            if self.supervisor is not None:  # a dead engine may hang its callers
                from trinity.launcher.engines.supervisor import engine_death

                try:
                    dead = await engine_death(self.rollout_engines[runner.engine_index])
                except Exception:  # the check itself failed: a plain timeout
                    dead = None
                if (
                    dead
                    and runner.engine_generation == self._engine_generation[runner.engine_index]
                ):
                    return "engine_dead", (
                        f"rollout engine {runner.engine_index} died ({dead}):\n{message}"
                    )
            return "timeout", message
        except crash_errors() as exc:
            return "crash", f"workflow runner {runner.runner_id} died: {exc}"
        except Exception as exc:  # e.g. the task could not be sent (unpicklable arguments)
            return "error", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if not result.get("ok"):
            if result.get("engine_dead") and self.supervisor is not None:
                return "engine_dead", (
                    f"rollout engine {runner.engine_index} died ({result['engine_dead']}):\n"
                    + (result.get("error") or "")
                )
            return "error", result.get("error") or "unknown error"
        return "ok", result

    async def run_tasks(self, tasks: Sequence[Task]) -> BatchResult:
        """Run ``tasks`` on the pool; return when each has succeeded or used its retries.

        Raises:
            RuntimeError: no runner is left and none can be started.
        """
        self._counts = {}
        if self.supervisor is not None:  # engines replaced outside a batch (during a sync)
            for index, handle in enumerate(self.supervisor.handles):
                if handle is not self.rollout_engines[index]:
                    self._engine_down(index, "replaced while no task ran")
        groups = [self._split(t) for t in tasks]
        states = [s for group in groups for s in group]
        queue: deque[_TaskState] = deque(states)
        running: dict[asyncio.Task, tuple[_TaskState, _Runner]] = {}
        started = time.perf_counter()
        while queue or running:
            while queue:
                runner = self._free_runner()
                if runner is None:
                    break
                state = queue.popleft()
                state.result.attempts += 1
                runner.in_flight += 1
                attempt = asyncio.ensure_future(self._attempt(runner, state))
                running[attempt] = (state, runner)
            waitables = set(running) | set(self._starting.values())
            waitables |= set(self._restarting.values())
            if not waitables:
                raise RuntimeError(
                    "no workflow runner is left and none could be started"
                    + (f": {self._last_start_error}" if self._last_start_error else "")
                )
            done, _ = await asyncio.wait(waitables, return_when=asyncio.FIRST_COMPLETED)
            for finished in done:
                if finished not in running:
                    continue  # a replacement runner came up (or failed: logged)
                state, runner = running.pop(finished)
                runner.in_flight -= 1
                kind, value = finished.result()
                self._settle(state, runner, kind, value, queue)
            self._raise_failed_restart(running)
            self._reap()
        results = [
            _merge_chunks(task, [s.result for s in group])
            for task, group in zip(tasks, groups, strict=True)
        ]
        return BatchResult(results, self._batch_metrics(results, time.perf_counter() - started))

    def _split(self, task: Task) -> list[_TaskState]:
        """``task`` as one unit, or, with ``max_repeat_times_per_runner`` below its
        ``repeat_times``, as chunks of runs (ids ``0..m-1``, ``m..2m-1``, ...) that different
        runners take at once; the chunks' experiences share the task's EID, so a GRPO group
        stays one group."""
        size = self.max_repeat_times_per_runner
        total = task.repeat_times or 1
        if size is None or total <= size:
            return [_TaskState(task)]
        chunks = []
        for base in range(0, total, size):
            part = copy.copy(task)
            part.rollout_args = copy.copy(task.rollout_args)
            part.repeat_times = min(size, total - base)
            chunks.append(_TaskState(part, run_id_base=base))
        return chunks

    def _settle(
        self,
        state: _TaskState,
        runner: _Runner,
        kind: str,
        value: Any,
        queue: deque[_TaskState],
    ) -> None:
        result = state.result
        task = result.task
        result.runner_id = runner.runner_id
        if kind == "ok":
            result.ok = True
            result.error = None
            result.experiences = Experience.deserialize_many(value["experiences"])
            result.seconds = float(value.get("seconds", 0.0))
            return
        if kind == "engine_dead":
            # not the task's failure: not charged a retry, run again once the engine is back
            # (on this engine's fresh runners, or any other engine's)
            result.attempts -= 1
            self._count("runner/engine_dead_tasks")
            if runner.engine_generation == self._engine_generation[runner.engine_index]:
                self._engine_down(runner.engine_index, value.splitlines()[0])
            else:  # a runner of the engine before its restart: retire it, nothing else
                self._replace(runner, "its engine was restarted")
            logger.warning("%s lost its engine; it runs again: %s", describe_task(task), value)
            queue.appendleft(state)
            return
        if kind == "timeout":
            self._count("runner/timeouts")
            self._replace(runner, f"{describe_task(task)} exceeded explorer.max_timeout")
        elif kind == "crash":
            if runner.usable:  # count each dead runner once, not each task it was running
                self._count("runner/crashes")
            self._replace(runner, f"its process died while running {describe_task(task)}")
        else:
            self._count("runner/errors")
        result.error = value
        tries = f"attempt {result.attempts}/{self.max_retry_times + 1}"
        if result.attempts <= self.max_retry_times:
            self._count("runner/retries")
            logger.warning("%s failed (%s), retrying:\n%s", describe_task(task), tries, value)
            queue.append(state)
        else:
            logger.error(
                "%s failed (%s); the batch goes on without it:\n%s",
                describe_task(task),
                tries,
                value,
            )

    def _batch_metrics(self, results: list[TaskResult], seconds: float) -> dict[str, float]:
        ok = [r for r in results if r.ok]
        metrics = {
            "runner/tasks": float(len(results)),
            "runner/finished_tasks": float(len(ok)),
            "runner/failed_tasks": float(len(results) - len(ok)),
            "runner/retries": 0.0,
            "runner/timeouts": 0.0,
            "runner/errors": 0.0,
            "runner/crashes": 0.0,
            "runner/replaced_runners": 0.0,
            "runner/engine_dead_tasks": 0.0,
            "time/run_tasks": seconds,
        }
        metrics.update({k: float(v) for k, v in self._counts.items()})
        if ok:
            task_seconds = [r.seconds for r in ok]
            metrics["runner/task_seconds/mean"] = sum(task_seconds) / len(task_seconds)
            metrics["runner/task_seconds/max"] = max(task_seconds)
        return metrics
