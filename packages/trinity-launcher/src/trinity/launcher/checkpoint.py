"""One checkpointer for every mode's run state: what a killed run needs to go on exactly where
it stopped, written so that a kill at any moment leaves a complete state behind.

What is recorded, and where (verl's and Trinity-RFT's layout, so their tools read it)::

    <job dir>/latest_checkpointed_iteration.txt     N of the last *complete* step checkpoint
    <job dir>/global_step_N/actor/ (critic/)        the trainer's engine shards (+ huggingface/)
    <job dir>/global_step_N/trainer_state.json      train step, sample-strategy (reader) state
    <job dir>/global_step_N/explorer/explorer_state.json   explorer position, metrics, settings
    <job dir>/global_step_N/explorer/experiences.bin       experiences queued, not yet trained
    <job dir>/global_step_N/checksums.json          size + SHA-256 of each file above
    <job dir>/explorer/explore_state.json           mode explore: the position after each step

* A run that **trains** (``train``, ``both``, ``colocate``) saves step checkpoints every
  ``trainer.save_interval`` train steps and at the end. When it also **explores**, the
  checkpoint carries the explorer's side, captured on the event loop between two explorer
  statements (:meth:`RunCheckpointer.capture`), so the explore position and the experiences
  queued but not trained (the :class:`ExperienceLedger`) always agree: a step still in flight
  is simply run again. The manifest of checksums comes after every other file
  (:mod:`trinity.launcher.checkpoint_integrity`), the "latest" marker last, atomically. A
  save that fails (a full disk) removes its partial directory and raises
  :class:`CheckpointSaveError` naming it and the previous checkpoint, which stays the latest.
* A run that only **explores** (``explore``) has no trainer step to hang its state on: it
  records its position after every explore step and evaluation, with the end of its output
  buffer, so a resume cuts back rows a killed step wrote and evaluates a step whose
  evaluation the kill cut short.

Resuming (``continue_from_checkpoint``, the default) is decided before anything starts
(:meth:`RunCheckpointer.find`): a state written under other settings, a damaged one, or one
the mode cannot continue from is refused with a message that says what to do. The records of
steps after the state are dropped from ``metrics.jsonl``; they are written again. The
checkpoint it loads is :func:`resume_checkpoint`'s: the latest one if it matches its
checksums, else (with a warning naming the damaged files) the newest earlier one that does;
the trainer loads that one and the marker is moved back to it. Retention
(``trainer.max_checkpoints_to_keep``) never deletes the checkpoint resumed from.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from trinity.common.config import Config, RunModeSpec, run_mode_spec
from trinity.common.experience import Experience
from trinity.launcher.checkpoint_fingerprint import (
    _queue_refusal,
    changed_settings,
    explore_fingerprint,
    run_fingerprint,
)
from trinity.launcher.checkpoint_integrity import (
    MANIFEST_FILE,
    CheckpointSaveError,
    manifest_bytes,
    resume_step,
    save_failure,
    step_numbers,
)
from trinity.launcher.errors import LaunchInputError
from trinity.launcher.run.ledger import (  # noqa: F401 - part of what a checkpoint holds
    EXPERIENCE_IDS_KEY,
    ExperienceLedger,
    experience_ids,
)
from trinity.utils.log import get_logger

__all__ = [
    "EXPERIENCE_IDS_KEY",
    "EXPLORER_DIR",
    "EXPLORER_EXPERIENCES_FILE",
    "EXPLORER_STATE_FILE",
    "EXPLORE_STATE_FILE",
    "FINISHED_FILE",
    "LATEST_FILE",
    "MANIFEST_FILE",
    "METRICS_FILE",
    "TRAINER_STATE_FILE",
    "CheckpointSaveError",
    "CheckpointSettings",
    "ExperienceLedger",
    "ResumePoint",
    "RunCheckpointer",
    "atomic_write",
    "changed_settings",
    "experience_ids",
    "explore_fingerprint",
    "json_scalars",
    "latest_checkpoint",
    "resume_checkpoint",
    "run_fingerprint",
    "truncate_metrics",
]

logger = get_logger(__name__)

LATEST_FILE = "latest_checkpointed_iteration.txt"
TRAINER_STATE_FILE = "trainer_state.json"
#: Where a step checkpoint keeps the explorer's side, inside ``global_step_N/``.
EXPLORER_DIR = "explorer"
EXPLORER_STATE_FILE = "explorer_state.json"
EXPLORER_EXPERIENCES_FILE = "experiences.bin"
#: ``<checkpoint_job_dir>/explorer/explore_state.json``: mode ``explore``'s position.
EXPLORE_STATE_FILE = os.path.join(EXPLORER_DIR, "explore_state.json")
#: ``<checkpoint_job_dir>/finished.json``: the run ended normally (at which step, under which
#: limits), so the same command again has nothing to do
FINISHED_FILE = "finished.json"
#: the run's metrics records (one JSON object per line; :mod:`trinity.launcher.monitor`)
METRICS_FILE = "metrics.jsonl"
_STATE_VERSION = 1
_WAY_OUT = (
    "choose another name, or set continue_from_checkpoint: false to start a new run "
    "(named <name>_<timestamp>; this one is left untouched)"
)


# ---------------------------------------------------------------------- files
def atomic_write(path: str, data: bytes) -> None:
    """Write ``path`` so that a kill leaves either the old or the new content (temp file,
    fsync, rename)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: no half-written temp file left behind
        if os.path.lexists(tmp):
            os.remove(tmp)
        raise


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


def _marked_step(job_dir: str) -> Optional[int]:
    try:
        return int(Path(job_dir, LATEST_FILE).read_text().strip())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None


def latest_checkpoint(job_dir: str) -> Optional[int]:
    """The step of the last *complete* checkpoint in ``job_dir`` as its "latest" marker says
    (``None``: there is none). Cheap, and not checked against the checksums: what a resume
    loads is :func:`resume_checkpoint`'s."""
    step = _marked_step(job_dir)
    if step is None or not os.path.isdir(os.path.join(job_dir, f"global_step_{step}")):
        return None
    return step


def resume_checkpoint(job_dir: str) -> Optional[int]:
    """The step checkpoint a resume loads (``None``: there is none): the latest one if its
    files match its checksums (or it has none: an older release), else the newest earlier one
    that does, with a warning naming each damaged file. The one function every resume reads
    (:meth:`RunCheckpointer.find`, :meth:`RunCheckpointer.restore_trainer`), so the trainer
    loads the step the check passed, and mode both the explorer side of that same step.
    Reads every byte of the checkpoint (see :mod:`trinity.launcher.checkpoint_integrity`).

    Raises:
        LaunchInputError: the latest checkpoint is damaged and no earlier one is intact.
    """
    marked = _marked_step(job_dir)
    if marked is None:
        return None
    return resume_step(job_dir, marked, LATEST_FILE, _WAY_OUT)


def json_scalars(metrics: dict[str, Any]) -> dict[str, Any]:
    """The JSON-able scalars of ``metrics`` (finite numbers as floats, strings, booleans)."""
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, (bool, str)):
            out[str(key)] = value
        elif isinstance(value, numbers.Real) and math.isfinite(float(value)):
            out[str(key)] = float(value)
    return out


# ---------------------------------------------------------------------- the checkpointer
@dataclass(frozen=True)
class CheckpointSettings:
    """What the checkpointer reads of a config (it never needs the rest)."""

    job_dir: str
    mode: RunModeSpec
    resume: bool = True
    #: ``trainer.max_checkpoints_to_keep`` (0: all)
    keep: int = 0
    eval_interval: int = 1
    eval_on_startup: bool = False
    has_eval: bool = False
    #: runs that explore and train: why their queue cannot be restored (``None``: it can)
    queue_refusal: Optional[str] = None
    #: the settings a resume must match (see :func:`run_fingerprint`, :func:`explore_fingerprint`)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    #: where the run stops (``buffer.total_steps``, ``buffer.total_epochs``): a finished run
    #: re-run under the same ones has nothing left to do
    limits: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Config, explorer: Any = None) -> CheckpointSettings:
        spec = run_mode_spec(config.mode)
        if spec.explores and spec.trains:
            fingerprint = run_fingerprint(config, explorer) if explorer is not None else {}
        elif spec.explores:
            fingerprint = explore_fingerprint(config)
        else:
            fingerprint = {}
        return cls(
            job_dir=config.checkpoint_job_dir,
            mode=spec,
            resume=bool(config.continue_from_checkpoint),
            keep=int(config.trainer.max_checkpoints_to_keep),
            eval_interval=int(config.explorer.eval_interval),
            eval_on_startup=bool(config.explorer.eval_on_startup),
            has_eval=bool(config.buffer.explorer_input.eval_tasksets),
            queue_refusal=_queue_refusal(config) if spec.explores and spec.trains else None,
            fingerprint=fingerprint,
            limits={
                "buffer.total_steps": config.buffer.total_steps,
                "buffer.total_epochs": config.buffer.total_epochs,
            },
        )


@dataclass
class ResumePoint:
    """What a resuming run continues from (found by :meth:`RunCheckpointer.find`).

    Attributes:
        train_step: the trainer's checkpoint step (``None``: the run does not train).
        explore_step: the explorer's committed step (``None``: the run does not explore).
        explorer: the explorer's ``state_dict`` (position, task-set and selector state).
        experiences: experiences queued but not trained at the checkpoint (first back in).
        metrics: metrics of steps after the checkpoint that were not yet in the file.
        output_position: mode explore: where the output buffer ended after the step.
        evaluated: mode explore: the step's evaluation (if due) was done.
    """

    train_step: Optional[int] = None
    explore_step: Optional[int] = None
    explorer: Optional[dict[str, Any]] = None
    experiences: list[Experience] = field(default_factory=list)
    metrics: dict[int, dict[str, Any]] = field(default_factory=dict)
    output_position: Any = None
    evaluated: bool = True

    @property
    def last_step(self) -> int:
        """The last step whose records stay in ``metrics.jsonl``."""
        return int(self.train_step if self.train_step is not None else self.explore_step or 0)


class RunCheckpointer:
    """Saves and restores a run's state (see the module docstring).

    Use: :meth:`find` before anything starts (refusals are bad input); :meth:`restore` on the
    built explorer / trainer; :meth:`restore_output` once the explorer's output is open;
    then :meth:`capture` + :meth:`save` at each step checkpoint, or :meth:`record_explore`
    after each step of a run that only explores.
    """

    def __init__(self, settings: CheckpointSettings) -> None:
        self.settings = settings
        self.job_dir = settings.job_dir
        #: what this run resumed from (``None``: a fresh start)
        self.resumed: Optional[ResumePoint] = None
        #: the train step of the last step checkpoint this run has (written or resumed from)
        self.saved_step = 0
        #: the step checkpoint this run resumed from: retention never deletes it
        self.resumed_step: Optional[int] = None
        #: files written after this (the synchronizer's HF export of a step, made before
        #: that step's checkpoint) belong to this run; older ones in a step directory are
        #: leftovers of an earlier run
        self.created_at = time.time()

    # ------------------------------------------------------------------ paths
    def step_dir(self, step: int) -> str:
        return os.path.join(self.job_dir, f"global_step_{step}")

    @property
    def metrics_path(self) -> str:
        return os.path.join(self.job_dir, METRICS_FILE)

    @property
    def explore_state_path(self) -> str:
        return os.path.join(self.job_dir, EXPLORE_STATE_FILE)

    # ------------------------------------------------------------------ finding a resume point
    def find(self) -> Optional[ResumePoint]:
        """The state this run resumes from (``None``: it starts fresh), checked.

        Raises:
            LaunchInputError: the run directory holds a state this run cannot continue from
                (other settings, damaged, written by a mode that cannot be continued); the
                message says what to do.
        """
        s = self.settings
        if not s.resume or not self.job_dir or not s.mode.resumable:
            return None
        if s.mode.trains:
            step = resume_checkpoint(self.job_dir)
            if step is None:
                return None
            point = ResumePoint(train_step=step)
            if s.mode.explores:
                self._read_explorer_side(point)
        else:
            point = self._read_explore_record()
            if point is None:
                return None
        return point

    def _read_explorer_side(self, point: ResumePoint) -> None:
        step = int(point.train_step or 0)
        job_dir = self.job_dir
        if self.settings.queue_refusal is not None:
            raise LaunchInputError(
                f"{job_dir} holds a checkpoint (global_step_{step}), but mode 'both' resumes "
                f"only with a FIFO queue as buffer.trainer_input.experience_buffer, not "
                f"{self.settings.queue_refusal} (its contents at the checkpoint cannot be "
                f"restored exactly); {_WAY_OUT}"
            )
        directory = os.path.join(self.step_dir(step), EXPLORER_DIR)
        try:
            state = json.loads(Path(directory, EXPLORER_STATE_FILE).read_text())
            data = Path(directory, EXPLORER_EXPERIENCES_FILE).read_bytes()
        except FileNotFoundError:
            raise LaunchInputError(
                f"{job_dir} holds a checkpoint (global_step_{step}) without the explorer's "
                f"state ({EXPLORER_DIR}/{EXPLORER_STATE_FILE}): it was not written by a mode "
                f"'both' run (mode 'train', or an older release), so mode 'both' cannot "
                f"resume from it; {_WAY_OUT}"
            ) from None
        exps = Experience.deserialize_many(data) if data else []
        if len(exps) != int(state.get("experiences", 0)):
            raise LaunchInputError(
                f"global_step_{step} is damaged: {directory}: {EXPLORER_EXPERIENCES_FILE} holds "
                f"{len(exps)} experiences, {EXPLORER_STATE_FILE} says "
                f"{state.get('experiences')}; {_WAY_OUT}"
            )
        if int(state.get("version", 0)) != _STATE_VERSION:
            raise LaunchInputError(
                f"global_step_{step}/{EXPLORER_DIR}/{EXPLORER_STATE_FILE} has format version "
                f"{state.get('version')!r}; this release reads {_STATE_VERSION}; {_WAY_OUT}"
            )
        changed = changed_settings(state.get("fingerprint") or {}, self.settings.fingerprint)
        if changed:
            raise LaunchInputError(
                f"{job_dir} holds a checkpoint (global_step_{step}) of a run "
                f"with other settings ({'; '.join(changed)}); a mode 'both' run resumes only "
                "with the task sets, batch sizes, repeat_times and algorithm it was started "
                "with: restore them, choose another name, or set continue_from_checkpoint: "
                "false to start a new run (named <name>_<timestamp>; this one is left untouched)"
            )
        point.explorer = state["explorer"]
        point.explore_step = int(state["explorer"].get("step", 0))
        point.experiences = exps
        point.metrics = {int(k): dict(v) for k, v in (state.get("metrics") or {}).items()}

    def _read_explore_record(self) -> Optional[ResumePoint]:
        path = self.explore_state_path
        if not os.path.isfile(path):
            return None
        state = json.loads(Path(path).read_text(encoding="utf-8"))
        if int(state.get("version", 0)) != _STATE_VERSION:
            raise LaunchInputError(
                f"{path} has format version {state.get('version')!r}; this release reads "
                f"{_STATE_VERSION}: choose another name, or set continue_from_checkpoint: false "
                "to start a new run"
            )
        changed = changed_settings(state.get("fingerprint") or {}, self.settings.fingerprint)
        if changed:
            raise LaunchInputError(
                f"{self.job_dir} holds a mode 'explore' run with other "
                f"settings ({'; '.join(changed)}): it resumes only with the task sets, batch "
                "size, repeat_times, algorithm and output it was started with. Restore them, "
                "choose another name, or set continue_from_checkpoint: false to start a new "
                "run (named <name>_<timestamp>; this one is left untouched)"
            )
        return ResumePoint(
            explore_step=int(state["step"]),
            explorer=state["explorer"],
            output_position=state.get("output_position"),
            evaluated=bool(state.get("evaluated")),
        )

    # ------------------------------------------------------------------ restoring
    def restore(self, point: Optional[ResumePoint], explorer: Any = None) -> int:
        """Put ``explorer`` back at ``point`` (before it prepares) and drop the records of
        later steps from ``metrics.jsonl`` (before anything opens it); returns how many were
        dropped. The trainer's side is :meth:`restore_trainer` (once it is built)."""
        self.resumed = point
        if point is None:
            return 0
        if explorer is not None and point.explorer is not None:
            explorer.load_state_dict(point.explorer)
        if point.train_step is not None:
            self.saved_step = self.resumed_step = int(point.train_step)
        return truncate_metrics(self.metrics_path, point.last_step)

    def restore_trainer(self, trainer: Any, step: Optional[int] = None) -> Optional[int]:
        """Load ``trainer`` from step checkpoint ``step`` (default: :func:`resume_checkpoint`'s,
        the latest intact one); returns its step (``None``: there is none). When that is not
        the one the "latest" marker names (a damaged one was skipped), the marker is moved
        back to it: the run goes on from there, and verl's tools load the same step."""
        if step is None:
            step = resume_checkpoint(self.job_dir) if self.job_dir else None
        if step is None:
            return None
        directory = self.step_dir(step)
        trainer.load_checkpoint(directory)
        state = json.loads(Path(directory, TRAINER_STATE_FILE).read_text())
        trainer.load_state_dict(state)
        self.saved_step = int(state["global_step"])
        self.resumed_step = step
        if _marked_step(self.job_dir) != step:
            atomic_write(os.path.join(self.job_dir, LATEST_FILE), str(step).encode())
        logger.info("Resumed from %s (step %d)", directory, self.saved_step)
        return self.saved_step

    def restore_output(self, writer: Any) -> None:
        """Mode explore: cut the output buffer back to where the last finished step left it;
        on a fresh start, say so when the buffer already holds experiences of an earlier run."""
        position = getattr(writer, "position", None)
        if self.settings.mode.trains or not callable(position):
            return  # runs that train resume their queue from the step checkpoint
        point = self.resumed
        if point is None:
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
        if point.output_position is None:
            return
        removed = writer.truncate(point.output_position)
        if removed:
            logger.warning(
                "Removed %d experiences of step %d, which the killed run wrote but did not "
                "finish; it runs again",
                removed,
                int(point.explore_step or 0) + 1,
            )

    def first_eval_due(self, explore_step: int) -> bool:
        """An evaluation runs before the first explore step of this run: at step 0 with
        ``eval_on_startup``, or (mode explore) the resumed step's evaluation the kill cut short."""
        s = self.settings
        if not s.has_eval:
            return False
        point = self.resumed
        if point is None or s.mode.trains:  # a fresh start, or a step checkpoint
            return s.eval_on_startup and explore_step == 0
        step = int(point.explore_step or 0)
        if step == 0:
            return s.eval_on_startup and not point.evaluated
        return step % s.eval_interval == 0 and not point.evaluated

    # ------------------------------------------------------------------ saving
    def capture(
        self,
        train_step: int,
        explorer: Any,
        ledger: ExperienceLedger,
        pending_metrics: dict[int, dict[str, Any]],
    ) -> dict[str, Any]:
        """The explorer's side at train step ``train_step``, taken on the event loop between
        two explorer statements, so the position and the ledger agree. ``pending_metrics``:
        records not yet written (the merger's); the explorer's own of later steps join them."""
        pending: dict[int, dict[str, Any]] = {}
        for s, metrics in getattr(explorer, "unlogged", {}).items():
            if s > train_step:
                pending.setdefault(s, {}).update(json_scalars(metrics))
        for s, metrics in pending_metrics.items():
            pending.setdefault(s, {}).update(json_scalars(metrics))
        return {
            "state": {
                "version": _STATE_VERSION,
                "trainer_step": train_step,
                "explorer": explorer.state_dict(),
                "fingerprint": self.settings.fingerprint,
                "metrics": {str(s): m for s, m in sorted(pending.items())},
            },
            "experiences": ledger.pending(),
        }

    def save(self, trainer: Any, explorer_side: Optional[dict[str, Any]] = None) -> str:
        """A complete step checkpoint of ``trainer`` (and the explorer's side captured for the
        same step): the trainer's files, the explorer's, the manifest of checksums, then the
        "latest" marker, atomically (a kill while writing leaves the previous checkpoint as
        the latest). Returns its directory. Blocking: run it off the event loop.

        A directory of the same step already there is a save that never completed (or the
        damaged checkpoint a resume skipped): it is replaced, not mixed in; only the Hugging
        Face weights this run's synchronizer exported there (``sync_method: checkpoint``,
        written before the step's checkpoint) stay. When writing
        fails, the partial directory is removed (it would waste a full disk and is no
        checkpoint) and nothing is pruned.

        Raises:
            CheckpointSaveError: a file could not be written (``OSError``: a full disk...);
                the message names the step directory, the OS error and the checkpoint that
                stays the latest. Other errors are raised as they are, after the cleanup.
        """
        step = int(trainer.global_step)
        directory = self.step_dir(step)
        try:
            self._clear_leftovers(directory)
            trainer.save_checkpoint_files(directory)
            Path(directory, TRAINER_STATE_FILE).write_text(
                json.dumps(_jsonable(trainer.state_dict()), indent=2)
            )
            if explorer_side is not None:
                self._write_explorer_side(directory, explorer_side)
            atomic_write(os.path.join(directory, MANIFEST_FILE), manifest_bytes(directory))
            atomic_write(os.path.join(self.job_dir, LATEST_FILE), str(step).encode())
        except Exception as exc:
            raise self._save_failed(directory, exc) from exc
        self.saved_step = step
        self._prune()
        return directory

    def _clear_leftovers(self, directory: str) -> None:
        """Empty step ``directory`` of everything but this run's HF export
        (``actor/huggingface`` with no file older than this checkpointer)."""
        if not os.path.lexists(directory):
            return
        export = Path(directory, "actor", "huggingface")
        if not (export.is_dir() and _written_since(export, self.created_at)):
            shutil.rmtree(directory)
            return
        for entry in Path(directory).iterdir():
            if entry.name != "actor":
                _remove(entry)
        for entry in Path(directory, "actor").iterdir():
            if entry.name != "huggingface":
                _remove(entry)

    def _save_failed(self, directory: str, exc: Exception) -> Exception:
        """Remove the partial ``directory`` of a failed save; the error to raise."""
        shutil.rmtree(directory, ignore_errors=True)
        marker = os.path.join(self.job_dir, LATEST_FILE)
        return save_failure(directory, exc, latest_checkpoint(self.job_dir), marker)

    @staticmethod
    def _write_explorer_side(step_dir: str, side: dict[str, Any]) -> None:
        directory = os.path.join(step_dir, EXPLORER_DIR)
        os.makedirs(directory, exist_ok=True)
        experiences = side["experiences"]
        data = Experience.serialize_many(experiences) if experiences else b""
        atomic_write(os.path.join(directory, EXPLORER_EXPERIENCES_FILE), data)
        state = dict(side["state"], experiences=len(experiences))
        atomic_write(
            os.path.join(directory, EXPLORER_STATE_FILE), json.dumps(state, indent=1).encode()
        )

    def _prune(self) -> None:
        """``trainer.max_checkpoints_to_keep``: keep the ``keep`` newest checkpoints up to the
        latest (the one the marker names: just saved, or resumed from), and always that one
        and the one this run resumed from. Directories after the latest are no checkpoints
        (a save cut short, the damaged one a resume skipped): they count for nothing and go."""
        keep = self.settings.keep
        steps = step_numbers(self.job_dir)
        if keep <= 0 or not steps:
            return
        latest = _marked_step(self.job_dir)
        latest = steps[-1] if latest is None else latest
        kept = set([s for s in steps if s <= latest][-keep:]) | {latest, self.resumed_step}
        for step in steps:
            if step not in kept:
                shutil.rmtree(self.step_dir(step), ignore_errors=True)

    # ------------------------------------------------------------------ the end
    def _last_step(self) -> Optional[int]:
        """The step the run's state is at: the latest step checkpoint (runs that train) or
        the recorded explore step (runs that only explore)."""
        if self.settings.mode.trains:
            return latest_checkpoint(self.job_dir)
        try:
            return int(json.loads(Path(self.explore_state_path).read_text())["step"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def mark_finished(self) -> None:
        """The run ended normally: record where, under which limits (after its last state)."""
        if not self.job_dir or not self.settings.mode.resumable:
            return
        record = {
            "mode": self.settings.mode.name,
            "step": self._last_step(),
            "limits": self.settings.limits,
            "fingerprint": self.settings.fingerprint,
            "finished_at": time.time(),
        }
        atomic_write(os.path.join(self.job_dir, FINISHED_FILE), json.dumps(record).encode())

    def finished(self) -> Optional[dict[str, Any]]:
        """The record of a run that already ended normally and would do nothing more (its
        state is still the one it finished at, under the same limits and settings), or
        ``None``: there is work left (or nothing was run yet)."""
        s = self.settings
        if not s.resume or not self.job_dir or not s.mode.resumable:
            return None
        try:
            record = json.loads(Path(self.job_dir, FINISHED_FILE).read_text())
        except (FileNotFoundError, NotADirectoryError, ValueError):
            return None
        now = json.loads(json.dumps({"limits": s.limits, "fingerprint": s.fingerprint}))
        if (
            record.get("mode") != s.mode.name
            or record.get("step") is None
            or record.get("step") != self._last_step()
            or record.get("limits") != now["limits"]
            or record.get("fingerprint") != now["fingerprint"]
        ):
            return None
        return record

    def record_explore(self, explorer: Any, evaluated: bool = False) -> None:
        """Mode explore: record ``explorer``'s position after its last step (and evaluation)."""
        writer = getattr(getattr(explorer, "pipeline", None), "writer", None)
        position = getattr(writer, "position", None)
        state = {
            "version": _STATE_VERSION,
            "step": explorer.step,
            "explorer": explorer.state_dict(),
            "output_position": position() if callable(position) else None,
            "evaluated": evaluated,
            "fingerprint": self.settings.fingerprint,
            "saved_at": time.time(),
        }
        atomic_write(self.explore_state_path, json.dumps(state, indent=1).encode("utf-8"))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


#: how much earlier than ``time.time()`` a file written after it may be stamped: file times
#: come from the kernel's coarse clock (a tick, a few ms, behind), so a file written right
#: after a ``time.time()`` reading can carry an earlier mtime
_MTIME_SLACK_S = 0.5


def _written_since(directory: Path, since: float) -> bool:
    """Whether ``directory`` holds files and none was last written before ``since`` (less the
    file clock's slack, :data:`_MTIME_SLACK_S`)."""
    times = [p.stat().st_mtime for p in directory.rglob("*") if p.is_file()]
    return bool(times) and min(times) >= since - _MTIME_SLACK_S


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
