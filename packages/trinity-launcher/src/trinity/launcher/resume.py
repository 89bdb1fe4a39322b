"""Resuming runs that were killed: what each mode records, and the files both modes share.

Mode ``both`` resumes from the trainer's checkpoints (``both.py``); mode ``train`` from its
checkpoints with the readers' positions (``trainer/run.py``). This module holds the explorer's
side of mode ``explore``, which has no trainer checkpoint to hang its state on:

* after every explore step (its experiences written, its metrics logged) the explorer's state
  is written atomically to ``<checkpoint_job_dir>/explorer/explore_state.json``: the step, the
  task set's position, epoch and selector state (``Explorer.state_dict``), the end of the
  output buffer (``BufferWriter.position``: SQL row id, jsonl size, parquet parts), whether the
  step's evaluation is done, and the settings a resume must match;
* a restarted run with ``continue_from_checkpoint`` (the default) loads it, cuts the output
  buffer back to the recorded end (the rows a killed step wrote before its state was saved
  would otherwise be there twice), drops the later records of ``metrics.jsonl``, evaluates the
  last step if that was cut short, and explores on from the next step. The buffer then holds
  each finished step's experiences exactly once, in the same step numbering as an
  uninterrupted run (and the same content: task order and sampling seeds are functions of the
  step and task ids).

A run with other settings, or with ``continue_from_checkpoint: false``, does not resume: the
config check renames it ``<name>_<timestamp>`` (Trinity-RFT's rule), and a run that would
append to a buffer holding experiences of an earlier run says so.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Optional

from trinity.common.config import Config
from trinity.utils.log import get_logger

__all__ = [
    "EXPLORE_STATE_FILE",
    "ExploreProgress",
    "atomic_write",
    "changed_settings",
    "explore_fingerprint",
    "truncate_metrics",
]

logger = get_logger(__name__)

#: ``<checkpoint_job_dir>/explorer/explore_state.json``: mode ``explore``'s progress.
EXPLORE_STATE_FILE = os.path.join("explorer", "explore_state.json")
_STATE_VERSION = 1


def atomic_write(path: str, data: bytes) -> None:
    """Write ``path`` so that a kill leaves either the old or the new content (temp file,
    fsync, rename)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def truncate_metrics(path: str, last_step: int) -> int:
    """Keep the records of steps up to ``last_step`` in ``metrics.jsonl`` (a resumed run
    writes the later ones again); returns how many were dropped. A torn last line goes too."""
    if not os.path.isfile(path):
        return 0
    kept: list[str] = []
    dropped = 0
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            step = int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            dropped += 1
            continue
        if step <= last_step:
            kept.append(line)
        else:
            dropped += 1
    if dropped:
        atomic_write(path, "".join(f"{line}\n" for line in kept).encode("utf-8"))
    return dropped


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
    out = config.buffer.trainer_input.experience_buffer
    pipeline_out = config.data_processor.experience_pipeline.output
    out = pipeline_out or out
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


class ExploreProgress:
    """Mode ``explore``'s resume record (see the module docstring).

    Use: :meth:`load` before :meth:`Explorer.prepare` (it restores the explorer's position
    and cuts ``metrics.jsonl`` back), :meth:`restore_output` after it (the output buffer
    exists then), and :meth:`save` after every step and every evaluation.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.path = os.path.join(config.checkpoint_job_dir, EXPLORE_STATE_FILE)
        self.state: Optional[dict[str, Any]] = None

    # ------------------------------------------------------------------ resume
    def load(self, explorer: Any) -> Optional[int]:
        """Restore ``explorer`` to the last finished step; returns it (``None``: nothing to
        resume, the run starts at step 0).

        Raises:
            ValueError: the record belongs to a run with other settings (its message says
                which and what to do).
        """
        from trinity.launcher.monitor import METRICS_FILE

        if not self.config.continue_from_checkpoint or not os.path.isfile(self.path):
            return None
        state = json.loads(Path(self.path).read_text(encoding="utf-8"))
        if int(state.get("version", 0)) != _STATE_VERSION:
            raise ValueError(
                f"{self.path} has format version {state.get('version')!r}; this release reads "
                f"{_STATE_VERSION}: choose another name, or set continue_from_checkpoint: false "
                "to start a new run"
            )
        changed = changed_settings(state.get("fingerprint") or {}, explore_fingerprint(self.config))
        if changed:
            raise ValueError(
                f"{self.config.checkpoint_job_dir} holds a mode 'explore' run with other "
                f"settings ({'; '.join(changed)}): it resumes only with the task sets, batch "
                "size, repeat_times, algorithm and output it was started with. Restore them, "
                "choose another name, or set continue_from_checkpoint: false to start a new "
                "run (named <name>_<timestamp>; this one is left untouched)"
            )
        explorer.load_state_dict(state["explorer"])
        dropped = truncate_metrics(
            os.path.join(self.config.checkpoint_job_dir, METRICS_FILE), int(state["step"])
        )
        self.state = state
        logger.warning(
            "Resuming mode explore after step %d (%s)%s",
            state["step"],
            self.path,
            f"; {dropped} records of later steps dropped from metrics.jsonl" if dropped else "",
        )
        return int(state["step"])

    def restore_output(self, writer: Any) -> None:
        """Cut the output buffer back to where the last finished step left it; on a fresh
        start, say so when the buffer already holds experiences of an earlier run."""
        position = getattr(writer, "position", None)
        if self.state is None:
            if callable(position):
                try:
                    found = position()
                except Exception as exc:  # noqa: BLE001 - only a courtesy check
                    logger.debug("output position: %s", exc)
                    return
                if found:
                    logger.warning(
                        "The output buffer already holds experiences of an earlier run (end "
                        "at %r); this run appends after them",
                        found,
                    )
            return
        saved = self.state.get("output_position")
        if saved is None or not callable(position):
            return
        removed = writer.truncate(saved)
        if removed:
            logger.warning(
                "Removed %d experiences of step %d, which the killed run wrote but did not "
                "finish; it runs again",
                removed,
                int(self.state["step"]) + 1,
            )

    def needs_eval(self) -> bool:
        """The last finished step was due an evaluation the kill cut short."""
        if self.state is None or not self.config.buffer.explorer_input.eval_tasksets:
            return False
        step = int(self.state["step"])
        interval = self.config.explorer.eval_interval
        if step == 0:
            return bool(self.config.explorer.eval_on_startup) and not self.state.get("evaluated")
        return step % interval == 0 and not self.state.get("evaluated")

    # ------------------------------------------------------------------ record
    def save(self, explorer: Any, evaluated: bool = False) -> None:
        """Record ``explorer``'s position after its last step (and evaluation)."""
        writer = getattr(getattr(explorer, "pipeline", None), "writer", None)
        position = getattr(writer, "position", None)
        state = {
            "version": _STATE_VERSION,
            "step": explorer.step,
            "explorer": explorer.state_dict(),
            "output_position": position() if callable(position) else None,
            "evaluated": evaluated,
            "fingerprint": explore_fingerprint(self.config),
            "saved_at": time.time(),
        }
        atomic_write(self.path, json.dumps(state, indent=1).encode("utf-8"))
        self.state = state
