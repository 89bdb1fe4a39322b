"""One task set row as a :class:`~trinity.common.workflows.Task`.

Shared by the task set reader (files and SQL tables, :mod:`trinity.buffer.taskset`) and the
SQL storage's reader of task tables (:mod:`trinity.buffer.storage.sql`), so a row becomes the
same Task whichever reads it; it sits below both so neither imports the other.
"""

from __future__ import annotations

import copy
from typing import Any

from trinity.common.config import StorageConfig
from trinity.common.workflows import Task

__all__ = ["row_to_task"]


def row_to_task(
    row: dict[str, Any],
    index: int,
    config: StorageConfig,
    taskset_id: int = 0,
) -> Task:
    """Build the :class:`Task` for one row of a task set.

    The row's own workflow / reward function (columns ``format.workflow_key`` /
    ``format.reward_fn_key``) win over the task set's defaults. Names stay names: they are
    resolved through the registries when the task becomes a workflow, so reading a task set
    never imports workflow packages and tasks stay small and picklable.

    ``task_id`` is the row's stable index in the task set (the same row gets the same id in
    every epoch and after a restart); ``task.index`` carries ``taskset_id`` / ``index`` so
    feedback about a task (pass rates) can be routed back to the selector that chose it.
    """
    fmt = config.format
    workflow = row.get(fmt.workflow_key) if fmt.workflow_key else None
    reward_fn = row.get(fmt.reward_fn_key) if fmt.reward_fn_key else None
    return Task(
        workflow=workflow or config.default_workflow_type,
        reward_fn=reward_fn or config.default_reward_fn_type,
        repeat_times=config.repeat_times,
        # per-task copies: the explorer sets rollout_args.n per task, workflows may edit theirs
        format_args=fmt.model_copy(),
        rollout_args=config.rollout_args.model_copy(),
        # copies: a workflow that edits its arguments must not change every later task
        workflow_args=copy.deepcopy(dict(config.workflow_args)),
        reward_fn_args=copy.deepcopy(dict(config.reward_fn_args)),
        is_eval=config.is_eval,
        raw_task=row,
        task_id=index,
        index={"taskset_id": taskset_id, "index": index, "taskset_name": config.name},
    )
