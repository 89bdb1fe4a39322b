"""What a mode ``both`` checkpoint holds of the explorer, and how it is written and read.

``global_step_N/explorer/`` carries the explorer's committed position and the experiences it
wrote to the queue that the trainer had not read (the :class:`ExperienceLedger` tracks them as
they are written and read), plus the settings a resume must match (:func:`run_fingerprint`).
Both files are replaced atomically, the state file last. A resuming run checks, before anything
starts, that it can resume from the checkpoint (:func:`read_resume_state`,
:func:`check_fingerprint`) and drops a queue actor a killed run left behind
(:func:`drop_stale_queue`).
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional

from trinity.common.config import Config
from trinity.common.experience import Experience
from trinity.launcher.resume import atomic_write, changed_settings
from trinity.utils.log import get_logger

logger = get_logger(__name__)

#: Where a checkpoint keeps the explorer's side, inside ``global_step_N/``.
EXPLORER_DIR = "explorer"
EXPLORER_STATE_FILE = "explorer_state.json"
EXPLORER_EXPERIENCES_FILE = "experiences.bin"
#: ``metrics.jsonl`` key: the run ids (``explore step/task/run``) of a train step's experiences.
EXPERIENCE_IDS_KEY = "batch/experience_ids"
_EXPLORER_STATE_VERSION = 1


class ExperienceLedger:
    """Experiences the explorer has committed to the trainer's queue that the trainer has not
    read yet, in write order -- what a checkpoint must carry so none is lost or trained twice.

    The explorer adds each step's experiences when it commits the step (just before they are
    written, see :meth:`Explorer.explore_step`); the trainer's reads remove them. The queue is
    FIFO, so reading experience ``x`` means everything written before ``x`` was read too (one
    a sample strategy read and dropped, e.g. as stale, counts as read).
    """

    def __init__(self) -> None:
        self._items: OrderedDict[str, Experience] = OrderedDict()

    def add(self, exps: list[Experience]) -> None:
        for exp in exps:
            self._items[exp.eid.uid] = exp

    def consume(self, exps: list[Experience]) -> None:
        left = {exp.eid.uid for exp in exps} & self._items.keys()
        while left:
            uid, _ = self._items.popitem(last=False)
            left.discard(uid)

    def pending(self) -> list[Experience]:
        return list(self._items.values())

    def __len__(self) -> int:
        return len(self._items)


def experience_ids(exps: list[Experience]) -> str:
    """The run ids (``explore step/task/run``) of ``exps``, sorted, space-separated."""
    return " ".join(sorted(exp.eid.rid for exp in exps))


def run_fingerprint(config: Config, explorer: Any) -> dict[str, Any]:
    """The settings that decide which tasks and experiences each step holds: a mode ``both``
    checkpoint resumes only under the same ones."""
    taskset = explorer.taskset
    readers = list(getattr(taskset, "readers", None) or ([taskset] if taskset else []))
    exp = config.buffer.trainer_input.experience_buffer
    return {
        "buffer.explorer_input.tasksets": [
            {"name": r.name, "path": str(r.config.path), "tasks": len(r)} for r in readers
        ],
        "buffer.batch_size": config.buffer.batch_size,
        "buffer.train_batch_size": config.buffer.train_batch_size,
        "algorithm.repeat_times": config.algorithm.repeat_times,
        "algorithm.algorithm_type": config.algorithm.algorithm_type,
        "buffer.trainer_input.experience_buffer.storage_type": exp.storage_type if exp else None,
    }


def _json_scalars(metrics: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, (bool, str)):
            out[str(key)] = value
        elif isinstance(value, numbers.Real) and math.isfinite(float(value)):
            out[str(key)] = float(value)
    return out


def write_explorer_checkpoint(
    step_dir: str, state: dict[str, Any], experiences: list[Experience]
) -> None:
    """``step_dir/explorer/``: the explorer's state (JSON) and the unread experiences (the
    buffer's own ``Experience.serialize_many`` bytes)."""
    directory = os.path.join(step_dir, EXPLORER_DIR)
    os.makedirs(directory, exist_ok=True)
    data = Experience.serialize_many(experiences) if experiences else b""
    atomic_write(os.path.join(directory, EXPLORER_EXPERIENCES_FILE), data)
    state = dict(state, experiences=len(experiences))
    atomic_write(os.path.join(directory, EXPLORER_STATE_FILE), json.dumps(state, indent=1).encode())


def read_explorer_checkpoint(step_dir: str) -> Optional[tuple[dict[str, Any], list[Experience]]]:
    """What :func:`write_explorer_checkpoint` wrote (``None``: the checkpoint has no explorer
    state, e.g. it was written by mode ``train``)."""
    directory = os.path.join(step_dir, EXPLORER_DIR)
    try:
        state = json.loads(Path(directory, EXPLORER_STATE_FILE).read_text())
        data = Path(directory, EXPLORER_EXPERIENCES_FILE).read_bytes()
    except FileNotFoundError:
        return None
    exps = Experience.deserialize_many(data) if data else []
    if len(exps) != int(state.get("experiences", 0)):
        raise ValueError(
            f"{directory}: {EXPLORER_EXPERIENCES_FILE} holds {len(exps)} experiences, "
            f"{EXPLORER_STATE_FILE} says {state.get('experiences')}"
        )
    return state, exps


def read_resume_state(config: Config, step: int) -> tuple[dict[str, Any], list[Experience]]:
    """The explorer's side of checkpoint ``step``, or a :class:`LaunchInputError` saying why
    this run cannot resume from it (checked before anything starts)."""
    from trinity.launcher.modes import LaunchInputError

    job_dir = config.checkpoint_job_dir
    way_out = (
        "choose another name, or set continue_from_checkpoint: false to start a new run "
        "(named <name>_<timestamp>; this one is left untouched)"
    )
    exp = config.buffer.trainer_input.experience_buffer
    replay = getattr(getattr(exp, "replay_buffer", None), "enable", False)
    if exp is None or str(exp.storage_type).lower() != "queue" or replay:
        kind = (
            "a replay buffer" if replay else f"storage_type {getattr(exp, 'storage_type', None)!r}"
        )
        raise LaunchInputError(
            f"{job_dir} holds a checkpoint (global_step_{step}), but mode 'both' resumes only "
            f"with a FIFO queue as buffer.trainer_input.experience_buffer, not {kind} (its "
            f"contents at the checkpoint cannot be restored exactly); {way_out}"
        )
    step_dir = os.path.join(job_dir, f"global_step_{step}")
    try:
        found = read_explorer_checkpoint(step_dir)
    except ValueError as exc:
        raise LaunchInputError(f"global_step_{step} is damaged: {exc}; {way_out}") from exc
    if found is None:
        raise LaunchInputError(
            f"{job_dir} holds a checkpoint (global_step_{step}) without the explorer's state "
            f"({EXPLORER_DIR}/{EXPLORER_STATE_FILE}): it was not written by a mode 'both' run "
            f"(mode 'train', or an older release), so mode 'both' cannot resume from it; "
            f"{way_out}"
        )
    state, exps = found
    if int(state.get("version", 0)) != _EXPLORER_STATE_VERSION:
        raise LaunchInputError(
            f"global_step_{step}/{EXPLORER_DIR}/{EXPLORER_STATE_FILE} has format version "
            f"{state.get('version')!r}; this release reads {_EXPLORER_STATE_VERSION}; {way_out}"
        )
    return state, exps


def check_fingerprint(config: Config, explorer: Any, step: int, state: dict[str, Any]) -> None:
    from trinity.launcher.modes import LaunchInputError

    changed = changed_settings(state.get("fingerprint") or {}, run_fingerprint(config, explorer))
    if changed:
        raise LaunchInputError(
            f"{config.checkpoint_job_dir} holds a checkpoint (global_step_{step}) of a run "
            f"with other settings ({'; '.join(changed)}); a mode 'both' run resumes only with "
            "the task sets, batch sizes, repeat_times and algorithm it was started with: "
            "restore them, choose another name, or set continue_from_checkpoint: false to "
            "start a new run (named <name>_<timestamp>; this one is left untouched)"
        )


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
