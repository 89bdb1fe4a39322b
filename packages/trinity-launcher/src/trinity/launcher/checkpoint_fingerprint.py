"""What a resumed run must match: the settings a checkpoint records (its fingerprint) and
compares with the resuming run's (split from :mod:`trinity.launcher.checkpoint`, which
re-exports these names)."""

from __future__ import annotations

import json
from typing import Any, Optional

from trinity.common.config import Config

__all__ = ["changed_settings", "explore_fingerprint", "run_fingerprint"]


def changed_settings(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``"key: <then> then, <now> now"`` for every setting of ``now`` that differs from the
    fingerprint a run recorded (``now`` goes through JSON first, as the record did)."""
    now = json.loads(json.dumps(now))
    return [
        f"{key}: {before.get(key)!r} then, {value!r} now"
        for key, value in now.items()
        if before.get(key) != value
    ]


def explore_fingerprint(config: Config) -> dict[str, Any]:
    """The settings that decide which tasks each explore step runs and where its
    experiences go: a mode ``explore`` run resumes only under the same ones."""
    tasksets = config.buffer.explorer_input.get_tasksets()
    out = config.data_processor.experience_pipeline.output
    out = out or config.buffer.trainer_input.experience_buffer
    return {
        "buffer.explorer_input.tasksets": [
            {"name": t.name, "path": str(t.path), "split": t.split} for t in tasksets
        ],
        "buffer.batch_size": config.buffer.batch_size,
        "algorithm.repeat_times": config.algorithm.repeat_times,
        "algorithm.algorithm_type": config.algorithm.algorithm_type,
        "output": {
            "storage_type": str(out.storage_type) if out else None,
            "path": str(out.path) if out else None,
            "name": out.name if out else None,
        },
    }


def run_fingerprint(config: Config, explorer: Any) -> dict[str, Any]:
    """The settings that decide which tasks and experiences each step holds: a run that
    explores and trains resumes only under the same ones."""
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


def _queue_refusal(config: Config) -> Optional[str]:
    """Why the trainer's input of a run that explores and trains cannot be restored exactly
    (``None``: it can -- a FIFO queue)."""
    exp = config.buffer.trainer_input.experience_buffer
    replay = getattr(getattr(exp, "replay_buffer", None), "enable", False)
    if exp is not None and str(exp.storage_type).lower() == "queue" and not replay:
        return None
    return "a replay buffer" if replay else f"storage_type {getattr(exp, 'storage_type', None)!r}"
