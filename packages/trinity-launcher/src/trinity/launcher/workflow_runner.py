"""The workflow runner: the actor in which user workflows run (its pool is :mod:`runner`).

A :class:`WorkflowRunner` holds a :class:`~trinity.launcher.engines.EngineModelWrapper` over one
rollout engine (plus one per auxiliary model) and runs tasks with core's
:func:`~trinity.common.workflows.run_task_async`, the path every package's tests use. It is a
plain class (tested in-process) that :class:`~trinity.launcher.runner.RunnerPool` starts as an
async Ray actor (:func:`_remote_runner_class`), so several tasks can run in one runner on its
event loop. It never raises for a workflow's own errors: a task's outcome comes back as a dict
(experiences as ``Experience.serialize_many`` bytes, or the traceback), and a dead engine is
reported as such so the pool can have it replaced instead of charging the task a retry.
"""

from __future__ import annotations

import asyncio
import os
import time
import traceback
from collections.abc import Sequence
from typing import Any, Optional

from trinity.common.experience import Experience
from trinity.common.workflows import Task, Workflow, is_resettable, run_task_async
from trinity.utils.gc_heap import freeze_startup_heap
from trinity.utils.log import get_logger
from trinity.utils.plugin_loader import load_plugins

__all__ = ["MAX_IDLE_WORKFLOWS", "WorkflowRunner"]

logger = get_logger(__name__)

#: Idle (workflow, model) pairs a runner keeps for reuse through ``Workflow.reset``.
MAX_IDLE_WORKFLOWS = 8


class WorkflowRunner:
    """Runs tasks against one rollout engine; started as an async Ray actor by the pool.

    Args:
        rollout_engine: the engine actor handle (or an in-process engine) of the policy model.
        auxiliary_engines: one engine per ``explorer.auxiliary_models`` entry; workflows get
            them as OpenAI clients (async ones when the workflow class has ``is_async``).
        runner_id: shown in logs and results.
        plugin_dirs: plugin directories imported before any task runs. Ray workers are fresh
            processes, so user workflows registered by ``--plugin-dir`` exist only after this.
    """

    def __init__(
        self,
        rollout_engine: Any,
        auxiliary_engines: Optional[Sequence[Any]] = None,
        *,
        runner_id: int = 0,
        plugin_dirs: Optional[Sequence[str]] = None,
        concurrent_mode: str = "sequential",
    ) -> None:
        load_plugins(list(plugin_dirs) if plugin_dirs else None)
        self.runner_id = runner_id
        self.concurrent_mode = concurrent_mode
        self._engine = rollout_engine
        self._auxiliary_engines = list(auxiliary_engines or [])
        self.model: Any = None
        self.auxiliary_models: list[Any] = []
        self._idle: list[tuple[Workflow, Any]] = []
        self._idle_models: list[Any] = []
        self._lock = asyncio.Lock()

    async def ready(self) -> int:
        """Connect to the engines (once); return this process's id."""
        async with self._lock:
            if self.model is None:
                from trinity.launcher.engines import EngineModelWrapper

                self.auxiliary_models = [
                    await EngineModelWrapper.create(e) for e in self._auxiliary_engines
                ]
                self.model = await EngineModelWrapper.create(self._engine)
                freeze_startup_heap()  # connected: nothing left to set up in this process
        return os.getpid()

    async def run_task(self, task: Task, run_id_base: int = 0) -> dict[str, Any]:
        """Run one task (its runs numbered from ``run_id_base``); never raises for the
        workflow's own errors.

        Returns ``{"ok": True, "experiences": bytes, "count": n, "seconds": s, ...}`` or
        ``{"ok": False, "error": "<traceback>", "seconds": s, ...}``.
        """
        start = time.perf_counter()
        base = {"runner_id": self.runner_id, "pid": os.getpid()}
        try:
            await self.ready()
            exps = await self._run(task, run_id_base)
            payload = Experience.serialize_many(exps)
        except (Exception, SystemExit):  # a workflow calling sys.exit() fails its task only
            failed = {
                **base,
                "ok": False,
                "error": traceback.format_exc(),
                "seconds": time.perf_counter() - start,
            }
            dead = await self.engine_death()
            if dead:  # not the task's fault: the pool restarts the engine and runs it again
                failed["engine_dead"] = dead
            return failed
        return {
            **base,
            "ok": True,
            "experiences": payload,
            "count": len(exps),
            "seconds": time.perf_counter() - start,
        }

    async def engine_death(self) -> Optional[str]:
        """Why this runner's rollout engine is dead, or ``None`` when it is healthy (asked
        after a failed task: a workflow may wrap or reword the engine's error)."""
        from trinity.launcher.engines.supervisor import engine_death

        try:
            return await engine_death(self._engine)
        except Exception as exc:  # the check itself failed: not a known death
            logger.debug("engine health check: %s", exc)
            return None

    async def _run(self, task: Task, run_id_base: int = 0) -> list[Experience]:
        cls = task.workflow_cls
        repeat_times = task.repeat_times or 1
        # A repeatable workflow samples every run in one call (n = repeat_times); any other
        # is called repeat_times times by run_task_async, one sample each.
        task.rollout_args.n = repeat_times if getattr(cls, "can_repeat", False) else 1
        workflow, model = await self._take(cls)
        seed_task = getattr(model, "seed_task", None)
        if callable(seed_task):  # reproducible samples whatever the engine's batching
            seed_task(task.batch_id, task.task_id, run_id_base)  # chunks of a task differ
        refresh = getattr(model, "refresh_model_version", None)
        if callable(refresh):  # stamp experiences with the weights served now
            await refresh()
        try:
            exps, workflow = await run_task_async(
                task,
                model,
                self.auxiliary_models,
                workflow,
                run_id_base=run_id_base,
                concurrent_mode=self.concurrent_mode,
            )
        except BaseException:
            self._idle_models.append(model)  # the model is fine; the workflow is dropped
            raise
        index = dict(task.index or {})
        for exp in exps:
            if exp.info is None:
                exp.info = {}
            exp.info["task_index"] = dict(index)
        if is_resettable(workflow):
            self._idle.append((workflow, model))
            del self._idle[:-MAX_IDLE_WORKFLOWS]
        else:
            self._idle_models.append(model)
            del self._idle_models[:-MAX_IDLE_WORKFLOWS]
        return exps

    async def _take(self, cls: type) -> tuple[Optional[Workflow], Any]:
        """An idle workflow of ``cls`` (reused through ``reset``) with its model, else an idle
        model (or a new clone) for a new workflow.

        Each running task has its own wrapper clone, so the histories of tasks running at
        once never mix; clones are reused, so what a wrapper loads lazily (a tokenizer) is
        loaded once per concurrent task, not once per task.
        """
        for i, (workflow, model) in enumerate(self._idle):
            if type(workflow) is cls:
                del self._idle[i]
                await model.clean_workflow_state()
                return workflow, model
        if self._idle_models:
            model = self._idle_models.pop()
            await model.clean_workflow_state()
            return None, model
        return None, self.model.clone_with_isolated_history()

    async def shutdown(self) -> None:
        """Nothing to release: the engines belong to the explorer."""


_REMOTE_RUNNER: Any = None


def _remote_runner_class() -> Any:
    """``ray.remote(WorkflowRunner)``, made once per process."""
    global _REMOTE_RUNNER
    if _REMOTE_RUNNER is None:
        import ray

        _REMOTE_RUNNER = ray.remote(WorkflowRunner)
    return _REMOTE_RUNNER
