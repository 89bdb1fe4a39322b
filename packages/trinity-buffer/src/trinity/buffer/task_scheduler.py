"""Trinity-RFT 0.6's ``trinity.buffer.task_scheduler``: the scheduler over the train task sets,
built from the explorer's saved state and the whole config.

``TasksetScheduler(explorer_state, config)`` and ``get_taskset_scheduler(explorer_state,
config)`` take Trinity-RFT's arguments: ``explorer_state`` is ``{}`` for a fresh run, or
``{"latest_iteration": step, "taskset_states": [one state per task set]}`` (the older
``{"latest_task_index": k}`` too); ``state_dict()`` gives the list of task set states and
``feedback(pipeline_metrics)`` routes the pipeline's pass rates to the selectors. Each task set
is read through ``get_buffer_reader``, so a reader registered for its ``storage_type`` (a
``TaskFileReader`` subclass) is used. The schedule itself is
:class:`trinity.buffer.taskset.TasksetScheduler`'s, which the explorer runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from trinity.buffer.buffer_reader import get_buffer_reader
from trinity.buffer.taskset.reader import TasksetReader
from trinity.buffer.taskset.reader import TasksetScheduler as _Scheduler
from trinity.common.config import Config

__all__ = ["TasksetScheduler", "get_taskset_scheduler"]


class TasksetScheduler(_Scheduler):
    """The task set scheduler with Trinity-RFT 0.6's constructor (see the module docstring)."""

    def __init__(self, explorer_state: Optional[Mapping[str, Any]], config: Config) -> None:
        state = dict(explorer_state or {})
        configs = config.buffer.explorer_input.get_tasksets()
        readers = []
        for i, taskset_config in enumerate(configs):
            reader = get_buffer_reader(taskset_config)
            if not isinstance(reader, TasksetReader):
                raise TypeError(
                    f"task set {taskset_config.name!r}: its reader {type(reader).__name__} does "
                    "not read tasks (a TaskFileReader subclass is needed)"
                )
            reader.taskset_id = i
            readers.append(reader)
        buffer = config.buffer
        super().__init__(
            readers,
            batch_size=buffer.batch_size,
            total_epochs=buffer.total_epochs,
            total_steps=buffer.total_steps,
        )
        if "latest_task_index" in state and "taskset_states" not in state:
            state["taskset_states"] = [{"current_index": state["latest_task_index"]}]
        if "taskset_states" in state:
            self.load_state_dict(
                {"tasksets": state["taskset_states"], "step": state.get("latest_iteration", 0)}
            )

    def state_dict(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """The state of each task set, in order (Trinity-RFT's ``taskset_states``)."""
        return [reader.state_dict() for reader in self.readers]

    def feedback(self, pipeline_metrics: Mapping[str, Any]) -> None:
        """Feed a pipeline's pass rates back to each task set's selector."""
        self.update(dict(pipeline_metrics))


def get_taskset_scheduler(
    explorer_state: Optional[Mapping[str, Any]], config: Config
) -> TasksetScheduler:
    """The scheduler of ``config``'s train task sets, resumed from ``explorer_state``."""
    return TasksetScheduler(explorer_state, config)
