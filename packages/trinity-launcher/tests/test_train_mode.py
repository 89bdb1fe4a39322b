"""``mode: train`` end to end through the real command line: SFT and DPO on verl's FSDP2 engine
(CPU, gloo) from jsonl data sets, checkpoints every ``save_interval``, Hugging Face weights at the
end, and a SIGKILLed run -- or one stopped by SIGTERM (a preemption: exit 75) -- that,
restarted with the same command, ends with exactly the weights of an uninterrupted run."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("verl")


pytestmark = pytest.mark.slow


def sft_rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, 4), rng.randint(0, 4)
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": f"{a}+{b}="},
                    {"role": "assistant", "content": str(a + b)},
                ]
            }
        )
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def train_config(tmp_path: Path, model_path: str, data: str, **over) -> Path:
    config = {
        "mode": "train",
        "project": "train-mode",
        "name": over.pop("name", "run"),
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {
            "algorithm_type": over.pop("algorithm_type", "sft"),
            "optimizer": {"lr": 1e-3},
        },
        "model": {"model_path": model_path, "max_model_len": 64},
        "cluster": {"gpu_per_node": 0},
        "buffer": {
            "batch_size": 8,
            "train_batch_size": 8,
            "total_epochs": over.pop("total_epochs", 2),
            "trainer_input": {
                "experience_buffer": {
                    "name": "data",
                    "storage_type": "file",
                    "path": data,
                    "format": over.pop(
                        "format", {"prompt_type": "messages", "messages_key": "messages"}
                    ),
                }
            },
        },
        "trainer": {
            "save_interval": over.pop("save_interval", 4),
            # trainer ranks (Ray workers when > 1), verl's name
            "trainer_config": {"trainer": {"n_gpus_per_node": over.pop("ranks", 1)}},
        },
        "monitor": {"monitor_type": "tensorboard"},
    }
    assert not over, over
    path = tmp_path / f"{config['name']}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def launch(config: Path, **kwargs) -> subprocess.Popen:
    # a progress line for every train step (the tests wait for given steps)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TRINITY_PROGRESS_INTERVAL="1")
    return subprocess.Popen(
        [sys.executable, "-m", "trinity.launcher.cli", "run", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        **kwargs,
    )


def run_to_end(config: Path) -> str:
    proc = launch(config)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out[-4000:]
    return out


def job_dir(tmp_path: Path, name: str = "run") -> Path:
    return tmp_path / "ckpt" / "train-mode" / name


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    path = run / f"global_step_{step}" / "actor" / "huggingface"
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).state_dict()


def test_sft_trains_checkpoints_and_exports(tmp_path, model_path):
    data = write_jsonl(tmp_path / "sft.jsonl", sft_rows(40))
    config = train_config(tmp_path, model_path, data)
    out = run_to_end(config)
    run = job_dir(tmp_path)
    rows = metrics(run)
    assert [r["step"] for r in rows] == list(range(1, 11))  # 40 rows x 2 epochs / 8
    losses = [r["actor/loss"] for r in rows]
    assert losses[-1] < losses[0] - 0.5, losses  # the answers' NLL goes down
    assert "train step 10:" in out
    assert sorted(p.name for p in run.glob("global_step_*")) == [
        "global_step_10",
        "global_step_4",
        "global_step_8",
    ]
    assert (run / "latest_checkpointed_iteration.txt").read_text() == "10"
    state = json.loads((run / "global_step_10" / "trainer_state.json").read_text())
    assert state["sample_strategy"]["experience_buffer"] == {"epoch": 2, "index": 0}
    final = weights(run, 10)
    assert set(final) >= {"model.embed_tokens.weight"}
    assert list((run / "monitor" / "tensorboard").iterdir())

    # the same command again: the run finished under these settings, so it says there is
    # nothing left to do and starts nothing (no verl, no Ray), trains nothing
    again = run_to_end(config)
    assert "Nothing left to do: this run already finished (mode train, step 10" in again
    assert "train step" not in again and "Resumed from" not in again
    assert len(metrics(run)) == 10


def test_sft_on_two_trainer_ranks_matches_one(tmp_path, model_path):
    """The trainer as two Ray worker ranks (gloo) takes the steps one rank takes: the same
    losses, nearly the same weights (sums over ranks round differently), a checkpoint of
    two shards."""
    data = write_jsonl(tmp_path / "sft.jsonl", sft_rows(24, seed=5))
    one = train_config(tmp_path, model_path, data, name="one", total_epochs=1, save_interval=0)
    two = train_config(
        tmp_path, model_path, data, name="two", total_epochs=1, save_interval=0, ranks=2
    )
    run_to_end(one)
    out = run_to_end(two)
    assert "Trainer: 2 Ray worker rank(s) on cpu" in out
    got, expected = metrics(job_dir(tmp_path, "two")), metrics(job_dir(tmp_path, "one"))
    assert [r["step"] for r in got] == [1, 2, 3]
    for a, b in zip(got, expected, strict=True):
        assert a["actor/loss"] == pytest.approx(b["actor/loss"], rel=1e-4)
        assert a["actor/num_tokens"] == b["actor/num_tokens"]
    actor = job_dir(tmp_path, "two") / "global_step_3" / "actor"
    assert sorted(p.name for p in actor.glob("model_*.pt")) == [
        "model_world_size_2_rank_0.pt",
        "model_world_size_2_rank_1.pt",
    ]
    w1, w2 = weights(job_dir(tmp_path, "one"), 3), weights(job_dir(tmp_path, "two"), 3)
    for key, value in w1.items():
        assert torch.allclose(w2[key], value, atol=1e-5), key


#: the resume tests' run: SFT on 48 rows x 3 epochs of 8 (18 steps), a checkpoint every 5
RESUME_ROWS, RESUME_EPOCHS, RESUME_STEPS = 48, 3, 48 * 3 // 8


def resume_config(tmp_path: Path, model_path: str, name: str) -> Path:
    data = write_jsonl(tmp_path / "sft.jsonl", sft_rows(RESUME_ROWS, seed=3))
    return train_config(
        tmp_path, model_path, data, name=name, total_epochs=RESUME_EPOCHS, save_interval=5
    )


@pytest.fixture(scope="module")
def straight_weights(tmp_path_factory, model_path) -> dict[str, torch.Tensor]:
    """The final weights of the resume tests' run, uninterrupted (run once for the module:
    the kill and the preemption tests compare with the same reference)."""
    tmp_path = tmp_path_factory.mktemp("straight")
    run_to_end(resume_config(tmp_path, model_path, "straight"))
    return weights(job_dir(tmp_path, "straight"), RESUME_STEPS)


def test_killed_run_resumes_to_the_same_weights(tmp_path, model_path, straight_weights):
    steps = RESUME_STEPS
    expected = straight_weights
    killed = resume_config(tmp_path, model_path, "killed")
    proc = launch(killed, start_new_session=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("train step 12:"):
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "".join(seen)[-3000:]
    run = job_dir(tmp_path, "killed")
    assert (run / "latest_checkpointed_iteration.txt").read_text() == "10"

    out = run_to_end(killed)
    assert "Resumed from" in out and "(step 10)" in out
    assert "train step 11:" in out and f"train step {steps}:" in out
    logged = [r["step"] for r in metrics(run)]
    assert logged == list(range(1, steps + 1))  # the records after step 10 were dropped once
    got = weights(run, steps)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key

    # killed again, this time while it saves the checkpoint of step 15: the previous one (10,
    # or 15 if the save had finished) stays usable and the run ends with the same weights
    again = resume_config(tmp_path, model_path, "in-save")
    run = job_dir(tmp_path, "in-save")
    proc = launch(again, start_new_session=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("train step 14:"):
            break
    deadline = time.monotonic() + 120
    while not (run / "global_step_15").exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "".join(seen)[-3000:]
    latest = int((run / "latest_checkpointed_iteration.txt").read_text())
    assert latest in (10, 15)
    out = run_to_end(again)
    assert f"(step {latest})" in out and f"train step {steps}:" in out
    assert [r["step"] for r in metrics(run)] == list(range(1, steps + 1))
    got = weights(run, steps)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key


def test_a_preempted_run_checkpoints_its_step_and_resumes_to_the_same_weights(
    tmp_path, model_path, straight_weights
):
    """SIGTERM to ``trinity-launch`` a few steps in (train steps take tens of milliseconds
    here: an early signal leaves the run time to receive it): the train step in progress
    finishes, a checkpoint of that step is written, the command exits 75 well inside
    the grace period; the same command resumes from that step (no step trained twice or
    skipped) and ends with exactly the weights of an uninterrupted run."""
    from cli_process import preempt_after_steps

    config = resume_config(tmp_path, model_path, "term")
    run = job_dir(tmp_path, "term")
    _, step = preempt_after_steps(config, tmp_path / "term.log", run, 3, RESUME_STEPS)
    state = json.loads((run / f"global_step_{step}" / "trainer_state.json").read_text())
    position = {"epoch": step * 8 // RESUME_ROWS, "index": step * 8 % RESUME_ROWS}
    assert state["sample_strategy"]["experience_buffer"] == position  # the next batch: step + 1

    out = run_to_end(config)
    assert "Resumed from" in out and f"(step {step})" in out
    assert f"train step {step + 1}:" in out and f"train step {RESUME_STEPS}:" in out
    assert [r["step"] for r in metrics(run)] == list(range(1, RESUME_STEPS + 1))
    got = weights(run, RESUME_STEPS)
    for key, value in straight_weights.items():
        assert torch.equal(got[key], value), key


def test_dpo_trains_against_the_initial_policy(tmp_path, model_path):
    rng = random.Random(1)
    rows = []
    for _ in range(24):
        a, b = rng.randint(0, 4), rng.randint(0, 4)
        rows.append({"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(a + b + 1)})
    data = write_jsonl(tmp_path / "dpo.jsonl", rows)
    config = train_config(
        tmp_path,
        model_path,
        data,
        name="dpo",
        algorithm_type="dpo",
        total_epochs=4,
        format={"prompt_type": "plaintext", "prompt_key": "prompt"},
    )
    run_to_end(config)
    rows = metrics(job_dir(tmp_path, "dpo"))
    assert len(rows) == 24 * 4 // 8
    # the reference is the initial policy: the first step's DPO loss is ln 2
    assert rows[0]["actor/dpo_loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert rows[-1]["actor/dpo_loss"] < rows[0]["actor/dpo_loss"]
    assert rows[-1]["actor/accuracy_mean"] > 0.5
    assert all("time/ref_logprob" in r for r in rows)
