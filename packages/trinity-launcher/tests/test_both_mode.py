"""``mode: both`` through the real command line: explorer (transformers engine in a Ray actor,
workflow runners) and trainer (verl FSDP2 on CPU) concurrently, GRPO on the arithmetic task set,
weights synchronised through memory or checkpoints every ``sync_interval`` steps, the explorer
``sync_offset`` steps ahead. The model version of every step's experiences shows the schedule."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")
pytest.importorskip("ray")

from trinity.launcher.both import required_version  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("interval", "offset", "expected"),
    [
        (1, 0, [0, 1, 2, 3, 4]),
        (2, 0, [0, 0, 2, 2, 4]),
        (1, 1, [0, 0, 1, 2, 3]),
        (2, 1, [0, 0, 0, 2, 2]),
        (3, 2, [0, 0, 0, 0, 0, 3]),
    ],
)
def test_required_version(interval, offset, expected):
    got = [required_version(e, interval, offset) for e in range(1, len(expected) + 1)]
    assert got == expected


def run_both(tmp_path: Path, model_path: str, name: str, **sync) -> tuple[list[dict], Path]:
    done = launch_both(tmp_path, model_path, name, **sync)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "Mode both finished" in done.stdout
    run = tmp_path / "ckpt" / "both" / name
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return rows, run


def launch_both(tmp_path: Path, model_path: str, name: str, **sync) -> subprocess.CompletedProcess:
    tasks = tmp_path / "tasks.jsonl"
    rows = (REPO / "examples" / "data" / "arithmetic" / "train.jsonl").read_text().splitlines()
    tasks.write_text("\n".join(rows[:8]) + "\n")
    config = {
        "mode": "both",
        "project": "both",
        "name": name,
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 1e-3}},
        "model": {"model_path": model_path, "max_prompt_tokens": 32, "max_response_tokens": 4},
        "cluster": {"gpu_per_node": 0},
        "buffer": {
            # 8 tasks x 2 epochs / 4 per step: the run ends when the task set does (the
            # explorer closes its writer, the trainer drains the queue and stops)
            "batch_size": 4,
            "total_epochs": 2,
            "explorer_input": {
                "taskset": {
                    "name": "arithmetic",
                    "path": str(tasks),
                    "format": {"prompt_key": "question", "response_key": "answer"},
                    "default_workflow_type": "arithmetic_workflow",
                }
            },
        },
        "explorer": {
            "runner_per_model": 4,
            "eval_on_startup": False,
            "rollout_model": {"engine_type": "transformers", "dtype": "float32", "seed": 1},
        },
        "synchronizer": sync,
        "trainer": {"save_interval": 2},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    ray_tmp = tempfile.mkdtemp(prefix="tr-ray-")  # Ray's socket paths must stay short
    env = dict(os.environ, TRINITY_RAY_TMPDIR=ray_tmp, OMP_NUM_THREADS="1")
    env.pop("RAY_ADDRESS", None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "trinity.launcher.cli", "run", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return done


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "interval", "offset"),
    [("memory", 1, 0), ("checkpoint", 2, 0), ("memory", 1, 1)],
)
def test_explorer_and_trainer_follow_the_sync_schedule(
    tmp_path, model_path, method, interval, offset
):
    rows, run = run_both(
        tmp_path,
        model_path,
        f"{method}-{interval}-{offset}",
        sync_method=method,
        sync_interval=interval,
        sync_offset=offset,
    )
    # one record per step, holding explorer and trainer metrics of that step
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        assert {"rollout/reward/mean", "actor/loss", "time/explore_step", "time/train_step"} <= set(
            r
        )
        assert r["batch/size"] == 16  # 4 tasks x 4 repeats
    # the weights each explore step generated with
    versions = [r["rollout/model_version"] for r in rows]
    assert versions == [required_version(e, interval, offset) for e in range(1, 5)]
    # ... and what the trainer saw: the same experiences
    assert [r["sample/model_version/max"] for r in rows] == versions
    synced = [r["step"] for r in rows if "time/sync" in r]
    assert synced == [s for s in range(1, 5) if s % interval == 0]
    assert (run / "latest_checkpointed_iteration.txt").read_text() == "4"
    if method == "checkpoint":  # the engines loaded the weights the trainer wrote
        for step in synced:
            hf = run / f"global_step_{step}" / "actor" / "huggingface"
            assert any(p.suffix == ".safetensors" for p in hf.iterdir())


def test_a_checkpoint_mode_both_cannot_resume_from_is_refused_plainly(tmp_path, model_path):
    # a checkpoint without the explorer's side (mode train wrote it): exit status 2, nothing
    # started. Resuming proper and the other refusals are in test_both_resume.py.
    run = tmp_path / "ckpt" / "both" / "again"
    (run / "global_step_2").mkdir(parents=True)
    (run / "latest_checkpointed_iteration.txt").write_text("2")
    done = launch_both(tmp_path, model_path, "again", sync_method="memory")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert "without the explorer's state" in done.stderr
    assert "global_step_2" in done.stderr
    assert "Starting Ray" not in done.stdout + done.stderr
