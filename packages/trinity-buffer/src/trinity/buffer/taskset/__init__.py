"""Task sets: load rows (jsonl / json / parquet / csv / saved ``datasets``), validate them,
turn them into :class:`~trinity.common.workflows.Task` batches chosen by a selector, and
remember the read position across restarts.

Typical use (the explorer)::

    reader = get_taskset_reader(config.buffer.explorer_input.taskset, state=saved_or_None)
    while True:
        try:
            tasks = await reader.read_async()
        except StopAsyncIteration:
            break
        ...
    checkpoint["taskset"] = reader.state_dict()
"""

from .loading import (
    DATA_FILE_EXTENSIONS,
    MalformedRow,
    TasksetData,
    TasksetKeyError,
    TasksetLoadError,
    TasksetNotFoundError,
    load_taskset_data,
    resolve_data_files,
)
from .reader import (
    SELECTOR_METRIC,
    TASKSET_SCHEDULE_METRIC,
    TasksetReader,
    TasksetScheduler,
    feedback_from_metrics,
    get_taskset_reader,
    get_taskset_scheduler,
    row_to_task,
)
from .selectors import (
    SELECTORS,
    TASK_SELECTORS,
    BaseSelector,
    DifficultyBasedSelector,
    OfflineEasy2HardSelector,
    RandomSelector,
    SequentialSelector,
    ShuffleSelector,
    TaskSelector,
    build_selector,
)

#: Trinity-RFT's name of the task set reader.
TaskFileReader = TasksetReader

__all__ = [
    "DATA_FILE_EXTENSIONS",
    "MalformedRow",
    "TasksetData",
    "TasksetKeyError",
    "TasksetLoadError",
    "TasksetNotFoundError",
    "load_taskset_data",
    "resolve_data_files",
    "SELECTOR_METRIC",
    "TASKSET_SCHEDULE_METRIC",
    "feedback_from_metrics",
    "TasksetReader",
    "TaskFileReader",
    "TasksetScheduler",
    "get_taskset_reader",
    "get_taskset_scheduler",
    "row_to_task",
    "SELECTORS",
    "TASK_SELECTORS",
    "BaseSelector",
    "TaskSelector",
    "SequentialSelector",
    "ShuffleSelector",
    "RandomSelector",
    "OfflineEasy2HardSelector",
    "DifficultyBasedSelector",
    "build_selector",
]
