"""Trinity-RFT's two-job asynchronous set-up: one job in mode ``explore`` and one in mode
``train``, sharing a ``queue`` experience buffer on one Ray cluster (its ``async_gsm8k``
example: ``ray start --head``, then ``trinity run`` of the explorer's config and of the
trainer's).

The queue lives in a named, detached Ray actor (``trinity_queue:<name>`` in the jobs' shared
namespace), so the trainer job -- a single CPU rank that would otherwise run without Ray --
joins the cluster to read it. The explorer writes its steps and ends (its writer released, the
queue closed); the trainer then trains exactly those steps and ends at the queue's end, with
the experiences the explorer counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_two_nodes import RAY_ENV, TwoNodes

pytest.importorskip("verl")
pytest.importorskip("vllm")
pytest.importorskip("psutil")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
STEPS = 3
BATCH = 4
REPEAT = 4


class OneHead(TwoNodes):
    """A Ray head alone (2 CPUs), started and stopped as :class:`TwoNodes` does it."""


@pytest.fixture(scope="module")
def head():
    cluster = OneHead()
    try:
        cluster.start_head()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def arithmetic_model(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tiny-arithmetic")
    subprocess.run(
        [sys.executable, "-m", "trinity.launcher.tiny_model", str(path), "--preset", "arithmetic"],
        check=True,
        capture_output=True,
    )
    return str(path)


def job_config(tmp_path: Path, model: str, mode: str) -> Path:
    """The quickstart as one of the two jobs: same project/name (so the same Ray namespace and
    checkpoint directory), the experience buffer a named queue."""
    config = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    config.update(name="async-two-jobs", mode=mode, checkpoint_root_dir=str(tmp_path / "ckpt"))
    config["model"]["model_path"] = model
    config["algorithm"]["repeat_times"] = REPEAT
    buffer = config["buffer"]
    # mode train needs train_batch_size set (as in Trinity-RFT): a step's experiences
    buffer.update(batch_size=BATCH, train_batch_size=BATCH * REPEAT, total_steps=STEPS)
    buffer["explorer_input"]["taskset"]["path"] = str(ROOT / "examples" / "data" / "arithmetic")
    buffer["explorer_input"].pop("eval_tasksets")
    buffer["trainer_input"] = {
        "experience_buffer": {"name": "shared_experiences", "storage_type": "queue"}
    }
    config["explorer"]["rollout_model"]["engine_type"] = "transformers"
    config["explorer"].update(runner_per_model=1, tasks_per_runner=4, eval_interval=1000)
    config["synchronizer"] = {"sync_method": "checkpoint", "sync_interval": 1}
    config["trainer"]["save_interval"] = 1000
    path = tmp_path / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def launch(path: Path, head: OneHead, timeout: float = 420) -> subprocess.CompletedProcess:
    env = dict(os.environ, **RAY_ENV, RAY_ADDRESS=head.address, OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "trinity.launcher.cli", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def records(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_trainer_job_trains_what_the_explorer_job_wrote(tmp_path, head, arithmetic_model):
    explore = launch(job_config(tmp_path, arithmetic_model, "explore"), head)
    assert explore.returncode == 0, explore.stdout[-3000:] + explore.stderr[-3000:]
    train = launch(job_config(tmp_path, arithmetic_model, "train"), head)
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]

    run = tmp_path / "ckpt" / "trinity-quickstart" / "cpu" / "async-two-jobs"
    rows = records(run)
    explored = [r for r in rows if "rollout/experiences" in r]
    trained = [r for r in rows if "batch/size" in r]
    assert [r["rollout/experiences"] for r in explored] == [BATCH * REPEAT] * STEPS
    assert [r["batch/size"] for r in trained] == [BATCH * REPEAT] * STEPS
    assert [r["step"] for r in trained] == list(range(1, STEPS + 1))
    # the trainer's batches are the explorer's steps, in order: the same rewards
    assert [r["batch/reward/mean"] for r in trained] == pytest.approx(
        [r["rollout/reward/mean"] for r in explored]
    )
    assert "Nothing left to do" not in train.stdout + train.stderr
