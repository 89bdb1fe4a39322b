"""Task set readers: rows -> :class:`~trinity.common.workflows.Task` batches, with epochs,
selectors, feedback and a resumable position.

One :class:`TasksetReader` serves one ``buffer.explorer_input.taskset`` / ``tasksets[i]`` /
``eval_tasksets[i]``. Several train task sets are interleaved by :class:`TasksetScheduler`.

Resume: ``state_dict()`` is a small JSON-able dict (see :meth:`TasksetReader.state_dict`); a
reader built from the same config with ``load_state_dict(saved)`` (or ``state=saved`` in
:func:`get_taskset_reader`) returns exactly the batches the first reader would have
returned next, because every selector is a function of its seed and the number of tasks
drawn so far.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np

from trinity.buffer.task_rows import row_to_task
from trinity.common.config import DataSelectorConfig, StorageConfig, TasksetConfig
from trinity.common.constants import SELECTOR_METRIC
from trinity.common.workflows import Task
from trinity.utils.log import get_logger

from .loading import MalformedRow, TasksetData, TasksetKeyError, load_taskset_data
from .selectors import TaskSelector, _cyclic, build_selector

__all__ = [
    "SELECTOR_METRIC",
    "TASKSET_SCHEDULE_METRIC",
    "feedback_from_metrics",
    "TasksetReader",
    "TasksetScheduler",
    "get_taskset_reader",
    "get_taskset_scheduler",
    "row_to_task",
]

logger = get_logger(__name__)

#: Key of the ``pass_rate_calculator`` operator's metric: ``{(taskset_id, index): pass rate}``
#: (or ``{index: pass rate}`` when experiences carry a bare task index).
TASKSET_SCHEDULE_METRIC = "taskset_schedule"


def feedback_from_metrics(
    pipeline_metrics: Optional[dict[str, Any]], default_taskset_id: Optional[int] = 0
) -> dict[int, tuple[list[int], list[float]]]:
    """Per-task-set ``(indices, values)`` from an experience pipeline's metrics.

    Accepts both shapes Trinity-RFT has used: ``{SELECTOR_METRIC: {taskset_id: {"indices":
    [...], "values": [...]}}}`` and ``{TASKSET_SCHEDULE_METRIC: {(taskset_id, index): value}}``.
    A bare ``index`` key belongs to ``default_taskset_id`` (skipped when that is None).
    """
    out: dict[int, tuple[list[int], list[float]]] = {}
    metrics = pipeline_metrics or {}
    for taskset_id, entry in (metrics.get(SELECTOR_METRIC) or {}).items():
        indices, values = out.setdefault(int(taskset_id), ([], []))
        indices.extend(int(i) for i in entry["indices"])
        values.extend(float(v) for v in entry["values"])
    for key, value in (metrics.get(TASKSET_SCHEDULE_METRIC) or {}).items():
        if isinstance(key, (tuple, list)) and len(key) == 2:
            taskset_id, index = key
        elif isinstance(key, str) and key.count("/") == 1:  # "taskset_id/index" after JSON
            taskset_id, index = key.split("/")
        else:
            taskset_id, index = default_taskset_id, key
        if taskset_id is None or index is None:
            continue
        try:
            tid, idx = int(taskset_id), int(index)
        except (TypeError, ValueError):
            continue
        indices, values = out.setdefault(tid, ([], []))
        indices.append(idx)
        values.append(float(value))
    return out


_STATE_VERSION = 1


def _required_keys(config: StorageConfig) -> tuple[dict[str, str], dict[str, str]]:
    """Columns every row needs, and per-row name columns, from the task set's format."""
    fmt = config.format
    required: dict[str, str] = {}
    if fmt.prompt_key:  # prompt_key: "" opts out (tasks that carry no prompt text)
        required[fmt.prompt_key] = "prompt_key"
    if fmt.response_key and "response_key" in fmt.model_fields_set:
        required[fmt.response_key] = "response_key"
    optional: dict[str, str] = {}
    if fmt.workflow_key:
        optional[fmt.workflow_key] = "workflow_key"
    if fmt.reward_fn_key:
        optional[fmt.reward_fn_key] = "reward_fn_key"
    return required, optional


def _selector_config(config: StorageConfig) -> DataSelectorConfig:
    # task_selector is the deprecated spelling; config rules copy it into data_selector, but a
    # config built by hand may only have the old one
    if config.task_selector is not None and "data_selector" not in config.model_fields_set:
        return config.task_selector
    return config.data_selector


class TasksetReader:
    """Reads batches of :class:`Task` from one task set.

    * Train task sets (``is_eval`` False) run ``total_epochs`` passes (or ``total_steps``
      batches when set) in the order of their selector; a batch may straddle two epochs, and
      the final partial batch is dropped (every step sees a full batch).
    * Eval task sets are read once, in file order, with a last partial batch.

    ``read`` raises ``StopIteration`` (``read_async``: ``StopAsyncIteration``) when done,
    as Trinity-RFT readers do. Everything that can be wrong with the file or the config is
    raised by the constructor, before the first task is read.
    """

    def __init__(
        self,
        config: Union[TasksetConfig, StorageConfig],
        taskset_id: int = 0,
        data: Optional[TasksetData] = None,
    ) -> None:
        if config.path is None and data is None:
            raise ValueError(f"Task set {config.name or taskset_id!r} has no path.")
        self.config = config
        self.name = config.name or f"taskset_{taskset_id}"
        self.taskset_id = taskset_id
        self.is_eval = bool(config.is_eval)
        required, optional = _required_keys(config)
        if (
            data is None
            and str(getattr(config.storage_type, "value", config.storage_type)) == "sql"
        ):
            # a task set written into a SQL table (Trinity-RFT's sql task sets): its rows,
            # then the same selectors, epochs and positions as a file
            from trinity.buffer.storage.sql import read_task_rows

            data = TasksetData.from_rows(read_task_rows(config), source=str(config.path))
        if data is None:
            data = load_taskset_data(
                config.path,  # type: ignore[arg-type]
                split=config.split,
                subset_name=config.subset_name,
                required_keys=required,
                optional_str_keys=optional,
                name=self.name,
            )
        self.data = data
        self._check_columns(optional)
        selector_config = _selector_config(config)
        if self.is_eval:
            # evaluation must cover each task exactly once, in a reproducible order
            selector_config = selector_config.model_copy(update={"selector_type": "sequential"})
        self.selector: TaskSelector = build_selector(self.data, selector_config)
        self.batch_size = int(config.batch_size)
        self.total_epochs = 1 if self.is_eval else int(config.total_epochs)
        self._total_steps = None if self.is_eval else config.total_steps
        self.step = 0  # batches read so far
        self._lock = threading.RLock()
        if config.index:  # Trinity-RFT's saved read position in the config
            self.selector.load_state_dict({"current_index": int(config.index)})
            if self.batch_size:
                self.step = int(config.index) // self.batch_size

    def _check_columns(self, optional: dict[str, str]) -> None:
        columns = set(self.data.columns)
        for key, purpose in optional.items():
            if key in columns:
                continue
            default = (
                self.config.default_workflow_type
                if purpose == "workflow_key"
                else self.config.default_reward_fn_type
            )
            if default is None and purpose == "workflow_key":
                raise TasksetKeyError(
                    f"Task set {self.name!r} ({self.config.path}): no column {key!r} "
                    f"(format.{purpose}) and no default_workflow_type; columns present: "
                    f"{sorted(columns)}."
                )
            logger.warning(
                "Task set %r: format.%s is %r but no row has that column; every task uses %r.",
                self.name,
                purpose,
                key,
                default,
            )
        fmt = self.config.format
        if fmt.response_key and fmt.response_key not in columns:
            logger.info(
                "Task set %r has no column %r (format.response_key): tasks carry no reference "
                "answer. Set format.response_key if the data has one under another name.",
                self.name,
                fmt.response_key,
            )
        if self.config.default_workflow_type is None and not fmt.workflow_key:
            logger.warning(
                "Task set %r names no workflow (default_workflow_type / format.workflow_key); "
                "its tasks cannot be run.",
                self.name,
            )

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        return len(self.data)

    @property
    def current_index(self) -> int:
        """Tasks drawn so far (over all epochs)."""
        return self.selector.current_index

    @property
    def epoch(self) -> int:
        return self.selector.current_index // len(self.data)

    @property
    def total_steps(self) -> Optional[int]:
        """Batches this reader yields with its own batch size (None if it has none)."""
        n = len(self.data)
        if self.is_eval:
            return math.ceil(n / self.batch_size) if self.batch_size else 1
        if self._total_steps is not None:
            return int(self._total_steps)
        if not self.batch_size:
            return None
        return self.total_epochs * n // self.batch_size

    @property
    def malformed_rows(self) -> list[MalformedRow]:
        """Rows skipped at load time, with file and line."""
        return list(self.data.malformed)

    def metrics(self) -> dict[str, float]:
        """Monitor scalars: skipped rows (details are in the log), size, epoch."""
        prefix = f"taskset/{self.name}"
        return {
            f"{prefix}/skipped_rows": float(self.data.num_skipped),
            f"{prefix}/num_tasks": float(len(self.data)),
            f"{prefix}/epoch": float(self.epoch),
        }

    # ------------------------------------------------------------------ reading
    def _resolve_batch_size(self, batch_size: Optional[int]) -> int:
        bs = self.batch_size if batch_size is None else int(batch_size)
        if bs <= 0:
            if self.is_eval:
                return len(self.data)
            raise ValueError(
                f"Task set {self.name!r}: no batch size (pass read(batch_size=...) or set "
                "buffer.batch_size)."
            )
        return bs

    def read(self, batch_size: Optional[int] = None) -> list[Task]:
        """The next batch of tasks; ``StopIteration`` when the task set is exhausted."""
        with self._lock:
            bs = self._resolve_batch_size(batch_size)
            n = len(self.data)
            pos = self.selector.current_index
            if self.is_eval:
                if pos >= n:
                    raise StopIteration
                bs = min(bs, n - pos)
            elif self._total_steps is not None:
                if self.step >= self._total_steps:
                    raise StopIteration
            elif pos + bs > self.total_epochs * n:
                raise StopIteration
            indices = self.selector.get_indices(bs)
            self.step += 1
        return self.read_with_indices(indices)

    async def read_async(self, batch_size: Optional[int] = None) -> list[Task]:
        """:meth:`read` for async callers (``StopAsyncIteration`` when exhausted).

        Rows are in memory, so this does not block; StopIteration must not escape a
        coroutine (Python turns it into RuntimeError), hence the translation.
        """
        try:
            return self.read(batch_size)
        except StopIteration:
            raise StopAsyncIteration from None

    def draw(self, count: int) -> list[Task]:
        """``count`` tasks from the selector, ignoring epoch limits (for the scheduler)."""
        with self._lock:
            indices = self.selector.get_indices(count)
        return self.read_with_indices(indices)

    def read_with_indices(self, indices: Sequence[int]) -> list[Task]:
        """The tasks of the given row indices."""
        return [
            row_to_task(self.data.row(int(i)), int(i), self.config, self.taskset_id)
            for i in indices
        ]

    async def read_with_indices_async(self, indices: Sequence[int]) -> list[Task]:
        return self.read_with_indices(indices)

    def reset(self) -> None:
        """Start again from the first task (e.g. before each evaluation of an eval set).

        Learned selector state (difficulty estimates) is kept; only the position restarts.
        """
        with self._lock:
            self.selector.current_index = 0
            self.step = 0

    # ------------------------------------------------------------------ feedback
    def feedback(self, indices: Sequence[int], values: Sequence[float]) -> None:
        """Per-task feedback (e.g. pass rates) for adaptive selectors."""
        with self._lock:
            self.selector.feedback(list(indices), list(values))

    def update(self, pipeline_metrics: dict[str, Any]) -> None:
        """Feed this task set's part of a pipeline's metrics (see
        :func:`feedback_from_metrics`) to :meth:`feedback`."""
        found = feedback_from_metrics(pipeline_metrics, default_taskset_id=self.taskset_id)
        if self.taskset_id in found:
            self.feedback(*found[self.taskset_id])

    # ------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        """JSON-able read position::

        {"version": 1, "name": ..., "taskset_id": 0, "num_tasks": N,
         "step": batches read, "current_index": tasks drawn,
         "selector_type": "shuffle", "selector": {selector.state_dict()}}
        """
        with self._lock:
            return {
                "version": _STATE_VERSION,
                "name": self.name,
                "taskset_id": self.taskset_id,
                "num_tasks": len(self.data),
                "step": self.step,
                "current_index": self.selector.current_index,
                "selector_type": type(self.selector).__name__,
                "selector": self.selector.state_dict(),
            }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a position from :meth:`state_dict` (or Trinity-RFT's
        ``{"current_index": k}`` / ``{"latest_task_index": k}``)."""
        with self._lock:
            state = dict(state_dict or {})
            if "latest_task_index" in state and "current_index" not in state:
                state["current_index"] = state["latest_task_index"]
            n_saved = state.get("num_tasks")
            if n_saved is not None and int(n_saved) != len(self.data):
                logger.warning(
                    "Task set %r had %s tasks when its position was saved and has %d now "
                    "(the data changed); the resumed order will differ.",
                    self.name,
                    n_saved,
                    len(self.data),
                )
            saved_type = state.get("selector_type")
            selector_state = dict(state.get("selector") or {})
            if saved_type is not None and saved_type != type(self.selector).__name__:
                logger.warning(
                    "Task set %r: saved with selector %s, now %s; only the position is kept.",
                    self.name,
                    saved_type,
                    type(self.selector).__name__,
                )
                selector_state = {}
            selector_state.setdefault("current_index", int(state.get("current_index", 0)))
            self.selector.load_state_dict(selector_state)
            if "step" in state:
                self.step = int(state["step"])
            elif self.batch_size:
                self.step = self.selector.current_index // self.batch_size
            else:
                self.step = 0

    def __repr__(self) -> str:
        return (
            f"TasksetReader(name={self.name!r}, tasks={len(self.data)}, "
            f"selector={type(self.selector).__name__}, step={self.step})"
        )


class TasksetScheduler:
    """Interleaves several train task sets into one stream of batches.

    Each epoch covers every task of every task set once: the sequence of task-set ids
    (each id repeated as many times as its set has tasks) is shuffled per epoch, seeded by
    the epoch (Trinity-RFT 0.6's schedule; ``seed`` seeds the selectors), and cut into
    batches; each task set's own selector picks *which* of
    its tasks fill its slots. Stops after ``total_epochs`` (dropping the final partial batch)
    or ``total_steps``. The state is the position plus every reader's state.
    """

    def __init__(
        self,
        readers: Sequence[TasksetReader],
        batch_size: int,
        total_epochs: int = 1,
        total_steps: Optional[int] = None,
        seed: int = 42,
    ) -> None:
        if not readers:
            raise ValueError("TasksetScheduler needs at least one task set")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.readers = list(readers)
        self.batch_size = int(batch_size)
        self.total_epochs = int(total_epochs)
        self.total_steps = total_steps
        self.seed = int(seed)
        self._base = np.repeat(np.arange(len(self.readers)), [len(r) for r in self.readers])
        self._orders: dict[int, np.ndarray] = {}
        self.step = 0
        self.position = 0  # task slots consumed
        self._lock = threading.RLock()

    @classmethod
    def from_configs(
        cls,
        configs: Sequence[Union[TasksetConfig, StorageConfig]],
        batch_size: Optional[int] = None,
        total_epochs: Optional[int] = None,
        total_steps: Optional[int] = None,
        seed: Optional[int] = None,
        state: Optional[dict[str, Any]] = None,
    ) -> TasksetScheduler:
        readers = [TasksetReader(c, taskset_id=i) for i, c in enumerate(configs)]
        first = configs[0]
        sched = cls(
            readers,
            batch_size=batch_size or first.batch_size,
            total_epochs=total_epochs or first.total_epochs,
            total_steps=total_steps if total_steps is not None else first.total_steps,
            seed=_selector_config(first).seed if seed is None else seed,
        )
        if state:
            sched.load_state_dict(state)
        return sched

    def __len__(self) -> int:
        return len(self._base)

    def _order(self, epoch: int) -> np.ndarray:
        # Trinity-RFT 0.6's schedule: the epoch alone seeds the shuffle, so a run resumed
        # from its checkpoint (or from Trinity-RFT's) interleaves the task sets the same way
        if epoch not in self._orders:
            self._orders = {epoch: np.random.default_rng(epoch).permutation(self._base)}
        return self._orders[epoch]

    @property
    def epoch(self) -> int:
        return self.position // len(self._base)

    def read(self, batch_size: Optional[int] = None) -> list[Task]:
        with self._lock:
            bs = int(batch_size or self.batch_size)
            total = len(self._base)
            if self.total_steps is not None:
                if self.step >= self.total_steps:
                    raise StopIteration
            elif self.position + bs > self.total_epochs * total:
                raise StopIteration
            ids = _cyclic(lambda pos: self._order(pos // total), self.position, bs)
            batch: list[Task] = []
            for taskset_id, count in Counter(ids).items():
                batch.extend(self.readers[taskset_id].draw(count))
            self.position += bs
            self.step += 1
            return batch

    async def read_async(self, batch_size: Optional[int] = None) -> list[Task]:
        try:
            return self.read(batch_size)
        except StopIteration:
            raise StopAsyncIteration from None

    def draw(self, count: int) -> list[Task]:
        """``count`` more tasks in schedule order, not counted as a step and ignoring the
        epoch limit (the explorer's replacements for failed tasks)."""
        with self._lock:
            total = len(self._base)
            ids = _cyclic(lambda pos: self._order(pos // total), self.position, count)
            batch: list[Task] = []
            for taskset_id, n in Counter(ids).items():
                batch.extend(self.readers[taskset_id].draw(n))
            self.position += count
            return batch

    def update(self, pipeline_metrics: dict[str, Any]) -> None:
        """Feed a pipeline's pass rates back to each task set's selector.

        Bare task indices (no task-set id) are attributed only when there is one task set.
        """
        default = 0 if len(self.readers) == 1 else None
        for taskset_id, (indices, values) in feedback_from_metrics(
            pipeline_metrics, default
        ).items():
            if 0 <= taskset_id < len(self.readers):
                self.readers[taskset_id].feedback(indices, values)

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "version": _STATE_VERSION,
                "step": self.step,
                "position": self.position,
                "tasksets": [r.state_dict() for r in self.readers],
            }

    def load_state_dict(self, state_dict: Union[dict[str, Any], list[dict[str, Any]]]) -> None:
        """Restore :meth:`state_dict` output (or Trinity-RFT's list of selector states)."""
        with self._lock:
            if isinstance(state_dict, list):
                state_dict = {"tasksets": state_dict}
            states = state_dict.get("tasksets", [])
            if len(states) != len(self.readers):
                raise ValueError(
                    f"Saved scheduler state has {len(states)} task sets, the config has "
                    f"{len(self.readers)}."
                )
            for reader, state in zip(self.readers, states, strict=True):
                reader.load_state_dict(state)
            self.step = int(state_dict.get("step", 0))
            self.position = int(state_dict.get("position", self.step * self.batch_size))


def get_taskset_reader(
    taskset_config: Union[TasksetConfig, StorageConfig],
    taskset_id: int = 0,
    state: Optional[dict[str, Any]] = None,
) -> TasksetReader:
    """Build the reader of one task set (and restore ``state`` when resuming).

    Raises (before any task is read): ``TasksetNotFoundError`` for a missing file / split /
    subset, ``TasksetKeyError`` for a missing column, ``TasksetLoadError`` for an unreadable
    file, ``UnknownModuleError`` for an unknown selector type.
    """
    reader = TasksetReader(taskset_config, taskset_id=taskset_id)
    if state:
        reader.load_state_dict(state)
    return reader


def get_taskset_scheduler(
    taskset_configs: Sequence[Union[TasksetConfig, StorageConfig]],
    state: Optional[dict[str, Any]] = None,
    **kwargs: Any,
) -> TasksetScheduler:
    """A :class:`TasksetScheduler` over ``buffer.explorer_input.get_tasksets()``."""
    return TasksetScheduler.from_configs(taskset_configs, state=state, **kwargs)
