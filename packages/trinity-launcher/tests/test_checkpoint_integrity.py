"""Checkpoint integrity for long jobs: checksums written with each step checkpoint and checked
at resume (a damaged latest one falls back to the newest intact one, which the trainer then
loads), a full disk during a save (a real tmpfs: the previous checkpoint stays the latest and
the error names the path), and retention after a fallback. No Ray, no engines: a fake trainer
with the methods :class:`RunCheckpointer` calls."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from trinity.common.config import RUN_MODES
from trinity.launcher.checkpoint import (
    LATEST_FILE,
    MANIFEST_FILE,
    CheckpointSaveError,
    CheckpointSettings,
    RunCheckpointer,
    latest_checkpoint,
    resume_checkpoint,
)
from trinity.launcher.checkpoint_integrity import verify_checkpoint
from trinity.launcher.errors import LaunchInputError

SHARD = "actor/model_world_size_1_rank_0.pt"


class FakeTrainer:
    """What the checkpointer calls of a trainer: its engine's files are one shard (``payload``
    bytes that depend on the step) and a small JSON file, as verl's actor directory holds."""

    def __init__(self, step: int = 0, payload: int = 4096, fail: Optional[Exception] = None):
        self.global_step = step
        self.payload = payload
        self.fail = fail
        self.loaded: Optional[str] = None

    def _bytes(self, step: int) -> bytes:
        return bytes([step % 251]) * self.payload

    def save_checkpoint_files(self, directory: str) -> None:
        actor = os.path.join(directory, "actor")
        os.makedirs(actor, exist_ok=True)
        Path(actor, "extra_state.json").write_text(json.dumps({"step": self.global_step}))
        if self.fail is not None:
            raise self.fail
        with open(os.path.join(directory, SHARD), "wb") as f:
            f.write(self._bytes(self.global_step))

    def state_dict(self) -> dict[str, Any]:
        return {"global_step": self.global_step, "sample_strategy": {"read": 3}}

    def load_checkpoint(self, directory: str) -> None:
        step = json.loads(Path(directory, "actor", "extra_state.json").read_text())["step"]
        assert Path(directory, SHARD).read_bytes() == self._bytes(step), "loaded a bad shard"
        self.loaded = directory

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.global_step = int(state["global_step"])


def checkpointer(job: Path, mode: str = "train", keep: int = 0) -> RunCheckpointer:
    return RunCheckpointer(CheckpointSettings(job_dir=str(job), mode=RUN_MODES[mode], keep=keep))


def explorer_side(step: int) -> dict[str, Any]:
    return {
        "state": {
            "version": 1,
            "trainer_step": step,
            "explorer": {"step": step + 1, "taskset": {"current_index": 8 * (step + 1)}},
            "fingerprint": {},
            "metrics": {},
        },
        "experiences": [],
    }


def save_steps(job: Path, *steps: int, mode: str = "train", keep: int = 0) -> None:
    saver = checkpointer(job, mode, keep)
    for step in steps:
        saver.save(FakeTrainer(step), explorer_side(step) if mode == "both" else None)


def marker(job: Path) -> str:
    return (job / LATEST_FILE).read_text()


# ---------------------------------------------------------------------- the manifest
def test_the_manifest_lists_every_file_with_its_size_and_sha256(tmp_path):
    save_steps(tmp_path, 1, mode="both")
    step_dir = tmp_path / "global_step_1"
    manifest = json.loads((step_dir / MANIFEST_FILE).read_text())
    assert sorted(manifest["files"]) == [
        "actor/extra_state.json",
        SHARD,
        "explorer/experiences.bin",
        "explorer/explorer_state.json",
        "trainer_state.json",
    ]
    for rel, entry in manifest["files"].items():
        data = (step_dir / rel).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert verify_checkpoint(str(step_dir)) == []
    assert marker(tmp_path) == "1" and not list(tmp_path.rglob("*.tmp"))
    # files added after the save (save_hf_checkpoint: last) are not checked
    (step_dir / "actor" / "huggingface").mkdir()
    (step_dir / "actor" / "huggingface" / "model.safetensors").write_bytes(b"weights")
    assert verify_checkpoint(str(step_dir)) == []


def damage(path: Path, how: str) -> None:
    if how == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif how == "bytes changed":
        data = bytearray(path.read_bytes())
        data[7] ^= 0xFF
        path.write_bytes(bytes(data))
    else:
        path.unlink()


EXPECTED = {
    "truncated": "100 bytes, 4096 when saved",
    "bytes changed": "SHA-256 differs",
    "missing": "missing",
}


@pytest.mark.parametrize("how", sorted(EXPECTED))
def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog, how):
    """The warning names the step dir, the file and what is wrong; the trainer loads the
    previous step (not the damaged one), and the marker moves back to it."""
    save_steps(tmp_path, 1, 2)
    damage(tmp_path / "global_step_2" / SHARD, how)
    resumer = checkpointer(tmp_path)
    with caplog.at_level("WARNING", logger="trinity"):
        point = resumer.find()
    assert point is not None and point.train_step == 1
    warned = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(
        f"Checkpoint {tmp_path / 'global_step_2'} is damaged: {SHARD}: "
    )
    assert EXPECTED[how] in warned[0]
    assert "Resuming from global_step_1" in caplog.text
    resumer.restore(point)
    trainer = FakeTrainer()
    assert resumer.restore_trainer(trainer, point.train_step) == 1
    assert trainer.loaded == str(tmp_path / "global_step_1") and trainer.global_step == 1
    assert marker(tmp_path) == "1"

    # the trainer alone (Trainer.resume: no step given) takes the same one
    save_steps(tmp_path, 1, 2)
    damage(tmp_path / "global_step_2" / SHARD, how)
    alone = FakeTrainer()
    assert checkpointer(tmp_path).restore_trainer(alone) == 1
    assert alone.loaded == str(tmp_path / "global_step_1")


def test_mode_both_takes_the_explorer_side_of_the_step_it_falls_back_to(tmp_path):
    save_steps(tmp_path, 2, 4, mode="both")
    damage(tmp_path / "global_step_4" / "explorer" / "explorer_state.json", "truncated")
    point = checkpointer(tmp_path, "both").find()
    assert point is not None and (point.train_step, point.explore_step) == (2, 3)
    assert point.explorer == explorer_side(2)["state"]["explorer"]


@pytest.mark.parametrize("earlier", [None, "damaged"])
def test_no_intact_checkpoint_is_refused_naming_the_path_and_file(tmp_path, earlier):
    save_steps(tmp_path, *([1, 2] if earlier else [2]))
    damage(tmp_path / "global_step_2" / SHARD, "truncated")
    if earlier:
        damage(tmp_path / "global_step_1" / "trainer_state.json", "missing")
    with pytest.raises(LaunchInputError) as caught:
        checkpointer(tmp_path).find()
    message = str(caught.value)
    assert f"checkpoint {tmp_path / 'global_step_2'} is damaged ({SHARD}: 100 bytes" in message
    assert "continue_from_checkpoint: false" in message and "restore the files" in message
    if earlier:
        assert f"{tmp_path / 'global_step_1'} damaged too" in message
    assert marker(tmp_path) == "2"  # refused: nothing changed


def test_a_checkpoint_of_an_older_release_without_manifest_is_accepted(tmp_path, caplog):
    save_steps(tmp_path, 1, 2)
    for step in (1, 2):
        (tmp_path / f"global_step_{step}" / MANIFEST_FILE).unlink()
    damage(tmp_path / "global_step_2" / SHARD, "bytes changed")  # not seen: nothing to check
    with caplog.at_level("DEBUG", logger="trinity"):
        assert resume_checkpoint(str(tmp_path)) == 2
    assert f"{tmp_path / 'global_step_2'} has no {MANIFEST_FILE}" in caplog.text
    # an earlier one of an older release is a fallback when its save got to trainer_state.json
    (tmp_path / "global_step_3" / "actor").mkdir(parents=True)
    (tmp_path / LATEST_FILE).write_text("3")
    assert verify_checkpoint(str(tmp_path / "global_step_3")) is None
    assert resume_checkpoint(str(tmp_path)) == 3  # the marked one: the marker came after it
    save_steps(tmp_path, 3)
    damage(tmp_path / "global_step_3" / SHARD, "truncated")
    (tmp_path / "global_step_2" / "trainer_state.json").unlink()  # a save cut short
    assert resume_checkpoint(str(tmp_path)) == 1


def test_a_missing_marked_directory_falls_back_to_an_intact_one(tmp_path):
    save_steps(tmp_path, 1, 2)
    shutil.rmtree(tmp_path / "global_step_2")
    assert latest_checkpoint(str(tmp_path)) is None
    assert resume_checkpoint(str(tmp_path)) == 1


# ---------------------------------------------------------------------- failed saves
@pytest.mark.parametrize("wrapped", [False, True])
def test_an_os_error_while_saving_keeps_the_previous_checkpoint(tmp_path, wrapped):
    """(Without a real full disk; see the tmpfs test.) A worker's OSError arrives wrapped (Ray's
    ``RayTaskError`` keeps it as ``cause``)."""
    save_steps(tmp_path, 1, keep=1)
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/shared/rank_3.pt")
    if wrapped:
        full = RuntimeError("ray task failed")
        full.cause = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # type: ignore[attr-defined]
    saver = checkpointer(tmp_path, keep=1)
    with pytest.raises(CheckpointSaveError) as caught:
        saver.save(FakeTrainer(2, fail=full))
    message = str(caught.value)
    assert f"could not write checkpoint {tmp_path / 'global_step_2'}: No space left" in message
    assert "global_step_1 stays the latest checkpoint" in message
    assert caught.value.errno == errno.ENOSPC and isinstance(caught.value, OSError)
    assert marker(tmp_path) == "1" and sorted(os.listdir(tmp_path)) == [
        "global_step_1",
        LATEST_FILE,
    ]
    assert saver.saved_step == 0  # nothing pruned, nothing recorded


def test_other_errors_while_saving_clean_up_and_are_raised_as_they_are(tmp_path):
    save_steps(tmp_path, 1)
    with pytest.raises(ValueError, match="engine refused"):
        checkpointer(tmp_path).save(FakeTrainer(2, fail=ValueError("engine refused")))
    assert marker(tmp_path) == "1" and not (tmp_path / "global_step_2").exists()


def test_a_leftover_directory_of_the_same_step_is_replaced_not_mixed_in(tmp_path):
    save_steps(tmp_path, 1)
    stale = tmp_path / "global_step_2" / "actor" / "model_world_size_2_rank_1.pt"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"from a save that was killed")
    save_steps(tmp_path, 2)
    assert not stale.exists() and verify_checkpoint(str(tmp_path / "global_step_2")) == []


def test_this_runs_hf_export_of_the_step_stays_and_an_earlier_runs_goes(tmp_path):
    # sync_method checkpoint: the synchronizer exports the step's HF weights into
    # global_step_N/actor/huggingface before that step's checkpoint is saved
    def export(step: int) -> Path:
        hf = tmp_path / f"global_step_{step}" / "actor" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "model.safetensors").write_bytes(b"weights of step %d" % step)
        return hf

    stale = export(2)  # left by an earlier run
    os.utime(stale / "model.safetensors", (time.time() - 3600,) * 2)
    leftover = tmp_path / "global_step_3" / "actor" / "model_world_size_2_rank_1.pt"
    saver = checkpointer(tmp_path)
    fresh = export(3)
    # file times come from the kernel's coarse clock: a file written just after the
    # checkpointer started can be stamped a few ms before it (seen in CI); still this run's
    os.utime(fresh / "model.safetensors", (saver.created_at - 0.01,) * 2)
    leftover.write_bytes(b"from a save that was killed")
    saver.save(FakeTrainer(2))
    saver.save(FakeTrainer(3))
    assert not stale.exists()
    assert (fresh / "model.safetensors").read_bytes() == b"weights of step 3"
    assert not leftover.exists()
    assert verify_checkpoint(str(tmp_path / "global_step_3")) == []


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (needs root and mount; skipped otherwise), unmounted at the end."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("left", [0, 64 * 1024 + 8192])
def test_a_full_disk_during_a_save_leaves_the_previous_checkpoint(small_disk, left):
    """A real ENOSPC, with no room left (0) or about room for the shard alone (the failure
    may then hit a later file: the manifest, the marker)."""
    job = small_disk / "run"
    payload = 64 * 1024
    saver = checkpointer(job, keep=1)
    saver.save(FakeTrainer(1, payload=payload))
    filler = small_disk / "filler"
    stat = os.statvfs(small_disk)
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, stat.f_bavail * stat.f_frsize - left))
    with pytest.raises(CheckpointSaveError) as caught:
        saver.save(FakeTrainer(2, payload=payload))
    message = str(caught.value)
    assert f"could not write checkpoint {job / 'global_step_2'}:" in message
    assert os.strerror(errno.ENOSPC) in message and caught.value.errno == errno.ENOSPC
    assert "global_step_1 stays the latest checkpoint" in message
    assert not (job / "global_step_2").exists()
    assert marker(job) == "1" and not list(job.rglob("*.tmp"))
    trainer = FakeTrainer(payload=payload)
    assert checkpointer(job).restore_trainer(trainer) == 1
    assert trainer.loaded == str(job / "global_step_1")
    # space again: the same save goes through, and retention runs
    filler.unlink()
    saver.save(FakeTrainer(2, payload=payload))
    assert marker(job) == "2" and sorted(p.name for p in job.glob("global_step_*")) == [
        "global_step_2"
    ]
    assert verify_checkpoint(str(job / "global_step_2")) == []


# ---------------------------------------------------------------------- retention
def test_retention_after_a_fallback_keeps_the_checkpoint_resumed_from(tmp_path):
    """keep=1: resumed from global_step_2 (global_step_4 damaged), then saves at 3 and 4. The
    damaged directory counts for nothing (before, it was "the newest" and the checkpoint just
    written was deleted); the one resumed from stays the whole run."""
    save_steps(tmp_path, 2, 4)
    damage(tmp_path / "global_step_4" / SHARD, "truncated")
    run = checkpointer(tmp_path, keep=1)
    point = run.find()
    assert point is not None and point.train_step == 2
    run.restore(point)
    trainer = FakeTrainer()
    run.restore_trainer(trainer, point.train_step)
    trainer.global_step = 3
    run.save(trainer)

    def steps() -> list[str]:
        return sorted(p.name for p in tmp_path.glob("global_step_*"))

    assert steps() == ["global_step_2", "global_step_3"] and marker(tmp_path) == "3"
    trainer.global_step = 4
    run.save(trainer)
    assert steps() == ["global_step_2", "global_step_4"] and marker(tmp_path) == "4"
    assert verify_checkpoint(str(tmp_path / "global_step_4")) == []
    # a later run resumed from 4 keeps only its own
    later = checkpointer(tmp_path, keep=1)
    later.restore(later.find())
    trainer.global_step = 5
    later.save(trainer)
    assert steps() == ["global_step_4", "global_step_5"]
