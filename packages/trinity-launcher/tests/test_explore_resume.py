"""Resuming ``mode: explore``: a run SIGKILLed mid-way and restarted with the same command
writes each step's experiences exactly once, numbered and sampled as an uninterrupted run
writes them, and ``metrics.jsonl`` holds every step once. A run that may not resume is renamed
``<name>_<timestamp>`` and says so; mode ``bench`` says it does not resume. A run stopped by
SIGUSR1 (a preemption) finishes its step in flight, exits 75, and resumes the same way.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest
import yaml
from cli_process import kill_when, preempt_when
from cli_process import run_to_end as run_cli_to_end

pytest.importorskip("ray")

STEPS = 8


@pytest.fixture
def explore_config(tmp_path, model_path, arithmetic_tasks):
    tasks = arithmetic_tasks(tmp_path, 25)

    def write(name: str, **over) -> Path:
        config = {
            "mode": "explore",
            "project": "resume",
            "name": name,
            "checkpoint_root_dir": str(tmp_path / "ckpt"),
            "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
            "model": {"model_path": model_path, "max_prompt_tokens": 32, "max_response_tokens": 4},
            "cluster": {"gpu_per_node": 0},
            "buffer": {
                "batch_size": 4,
                "total_steps": STEPS,
                "total_epochs": 10,
                "explorer_input": {
                    "taskset": {
                        "name": "arithmetic",
                        "path": str(tasks),
                        "format": {"prompt_key": "question", "response_key": "answer"},
                        "default_workflow_type": "arithmetic_workflow",
                        "data_selector": {"selector_type": "shuffle", "seed": 3},
                    }
                },
                "trainer_input": {
                    "experience_buffer": {
                        "name": "exps",
                        "storage_type": "sql",
                        "path": str(tmp_path / f"{name}.db"),
                    }
                },
            },
            "explorer": {
                "runner_per_model": 2,
                "eval_on_startup": False,
                "rollout_model": {"engine_type": "transformers", "dtype": "float32", "seed": 1},
            },
            **over,
        }
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    return write


def run_to_end(config: Path, log: Path) -> str:
    return run_cli_to_end(config, log)


def rows(db: Path) -> list[tuple[str, bytes]]:
    """``(eid, experience bytes)`` of every row, in insertion order."""
    with sqlite3.connect(db) as conn:
        table = conn.execute("select name from sqlite_master where type='table'").fetchone()[0]
        return [(e, bytes(b)) for e, b in conn.execute(f"select eid, exp_bytes from {table}")]


def tokens(db: Path) -> dict[tuple, list[int]]:
    """``(step, task, run, turn) -> tokens`` (the eid's random suffix left out)."""
    from trinity.common.experience import Experience

    out = {}
    for _, data in rows(db):
        exp = Experience.deserialize(data)
        out[(exp.eid.batch, exp.eid.task, exp.eid.run, exp.eid.step)] = exp.tokens.tolist()
    return out


def steps_of(run: Path) -> list[int]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines]


@pytest.mark.slow
def test_a_killed_explore_run_resumes_without_doubling_its_output(tmp_path, explore_config):
    run_to_end(explore_config("straight"), tmp_path / "straight.log")
    straight = tokens(tmp_path / "straight.db")
    assert len(straight) == STEPS * 4 * 2
    assert steps_of(tmp_path / "ckpt" / "resume" / "straight") == list(range(1, STEPS + 1))

    config = explore_config("killed")
    run = tmp_path / "ckpt" / "resume" / "killed"
    kill_after = random.randint(2, STEPS - 2)  # a random step: every one must resume
    state_file = run / "explorer" / "explore_state.json"

    def reached() -> bool:  # the state file is written atomically (write, then rename)
        return state_file.exists() and json.loads(state_file.read_text())["step"] >= kill_after

    kill_when(config, tmp_path / "killed.log", reached)
    killed_at = json.loads(state_file.read_text())["step"]
    assert kill_after <= killed_at < STEPS, (kill_after, killed_at)
    # the killed run may have written the rows of a step it did not finish recording
    assert len(rows(tmp_path / "killed.db")) >= killed_at * 8

    out = run_to_end(config, tmp_path / "killed.log")
    assert f"Resuming mode explore after step {killed_at}" in out
    resumed = tokens(tmp_path / "killed.db")
    # each step's experiences exactly once, the same ids and the same samples
    assert len(rows(tmp_path / "killed.db")) == len(straight)
    assert resumed == straight
    assert steps_of(run) == list(range(1, STEPS + 1))
    assert json.loads(state_file.read_text())["step"] == STEPS


@pytest.mark.slow
def test_a_preempted_explore_run_stops_after_its_step_and_resumes_exactly(tmp_path, explore_config):
    """SIGUSR1 (Slurm's warning signal, the second of the default ``--preemption-signals``)
    to ``trinity-launch`` mid-run (after a SIGTERM in an earlier attempt's start-up, which
    exits 75 as well): no further step starts, the step in flight finishes and is
    recorded, the command exits 75 well inside the grace period; the same command resumes
    after that step and the output holds each step's experiences exactly once, nothing
    missing, no task explored twice."""
    import signal

    config = explore_config("usr1")
    run = tmp_path / "ckpt" / "resume" / "usr1"
    state_file = run / "explorer" / "explore_state.json"

    # first a SIGTERM while Ray starts (``ray.init`` has a SIGTERM handler of its own): no
    # step to finish, the start-up is abandoned with the same status, nothing left running
    log = tmp_path / "start.log"
    stopped = preempt_when(config, log, lambda: "Starting Ray" in log.read_text())
    assert "stopped by SIGTERM while the run was starting" in stopped.output
    assert stopped.took < 60 and not state_file.exists()

    def reached() -> bool:  # the state file is written atomically (write, then rename)
        return state_file.exists() and json.loads(state_file.read_text())["step"] >= 2

    stopped = preempt_when(config, tmp_path / "usr1.log", reached, sig=signal.SIGUSR1)
    out = stopped.output
    assert "SIGUSR1 received: stopping with a checkpoint" in out
    step = json.loads(state_file.read_text())["step"]
    assert 2 <= step < STEPS and f"stopped by SIGUSR1 at step {step}" in out, out[-3000:]
    assert stopped.took < 60, stopped.took  # well inside the default grace period (120 s)
    # a clean stop: the step in flight finished, its rows and its record written, no later one
    assert len(rows(tmp_path / "usr1.db")) == step * 4 * 2
    assert steps_of(run) == list(range(1, step + 1))

    out = run_to_end(config, tmp_path / "usr1-resumed.log")
    assert f"Resuming mode explore after step {step}" in out
    written = tokens(tmp_path / "usr1.db")
    assert len(rows(tmp_path / "usr1.db")) == len(written) == STEPS * 4 * 2  # none twice
    assert set(written) == {  # none missing
        (s, t, r, 0) for s in range(1, STEPS + 1) for t in range(4) for r in range(2)
    }
    assert steps_of(run) == list(range(1, STEPS + 1))
    # the task set read on from where the stop left it: the first 24 tasks (steps 1-6 of the
    # 25-task epoch, shuffled) are 24 different problems
    from trinity.common.experience import Experience

    prompts = {}
    for _, data in rows(tmp_path / "usr1.db"):
        exp = Experience.deserialize(data)
        if exp.eid.batch <= 6:
            prompts[(exp.eid.batch, exp.eid.task)] = tuple(exp.tokens[: exp.prompt_length].tolist())
    assert len(prompts) == len(set(prompts.values())) == 24


@pytest.mark.slow
def test_a_run_that_may_not_resume_is_renamed_and_says_so(tmp_path, explore_config):
    first = explore_config("again")
    config = yaml.safe_load(first.read_text())
    config["buffer"].update(batch_size=2, total_steps=1)
    first.write_text(yaml.safe_dump(config))
    run_to_end(first, tmp_path / "first.log")
    # continue_from_checkpoint false: a new run beside the old one, never appended to it
    config["continue_from_checkpoint"] = False
    config["buffer"]["trainer_input"]["experience_buffer"]["path"] = str(tmp_path / "new.db")
    again = tmp_path / "again2.yaml"
    again.write_text(yaml.safe_dump(config))
    out = run_to_end(again, tmp_path / "again.log")
    assert "holds an earlier run's output: this run is renamed 'again_" in out
    runs = sorted(p.name for p in (tmp_path / "ckpt" / "resume").iterdir())
    assert runs[0] == "again" and runs[1].startswith("again_") and len(runs) == 2
    assert steps_of(tmp_path / "ckpt" / "resume" / "again") == [1]
    # another output buffer with rows of an earlier run: said, not silent
    config["buffer"]["trainer_input"]["experience_buffer"]["path"] = str(tmp_path / "again.db")
    config["name"] = "third"
    third = tmp_path / "third.yaml"
    third.write_text(yaml.safe_dump(config))
    out = run_to_end(third, tmp_path / "third.log")
    assert "already holds experiences of an earlier run" in out
