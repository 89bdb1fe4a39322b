"""``mode: colocate``: the rollout engine and the trainer take turns on the same device.

Fast: an engine's sleep/wake contract on the real ``transformers`` engine (generation refused
asleep, weights loaded asleep are served after waking, the call log in order); the Ray request
(one GPU, or no CPU, suffices); ``--dry-run`` accepts the mode. Slow (real runs through the
command line, real engines): the quickstart in mode colocate learns and resumes after a
kill, and every step's engine call log reads generate (at the trainer's latest version) ->
sleep -> train -> update_weights -> wake_up; an engine killed while asleep is replaced asleep,
with the latest weights; a run stopped by SIGTERM (a preemption) exits 75 and the same command
resumes it, still taking turns.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


# ---------------------------------------------------------------------- engine contract
def test_an_asleep_engine_refuses_generation_and_serves_what_was_loaded_asleep(model_path):
    """The transformers engine: sleep moves the model to host memory and refuses generation;
    weights loaded while asleep are what it serves after waking, at their version; the call
    log holds every call in order."""
    import torch

    from trinity.launcher.engines import EngineSettings, create_engine
    from trinity.launcher.engines.base import EngineAsleepError

    async def main() -> None:
        engine = create_engine(
            EngineSettings(model_path=model_path, engine_type="transformers", dtype="float32")
        )
        await engine.start()
        messages = [{"role": "user", "content": "1+1="}]
        await engine.chat(messages, n=2, max_tokens=2, seed=1)
        await engine.sleep(1)
        assert await engine.is_sleeping()
        assert next(engine.model.parameters()).device.type == "cpu"
        with pytest.raises(EngineAsleepError, match="asleep"):
            await engine.chat(messages, max_tokens=2)
        with pytest.raises(EngineAsleepError):
            await engine.logprobs([1, 2, 3])
        new = {k: v.clone() + 0.01 for k, v in engine.model.state_dict().items()}
        await engine.update_weights(new, version=1)
        await engine.wake_up()
        assert next(engine.model.parameters()).device == engine.device
        [exp] = await engine.chat(messages, max_tokens=2, seed=1)
        assert exp.model_version == 1
        name = "model.embed_tokens.weight"
        assert torch.equal(engine.model.state_dict()[name].cpu(), new[name])
        assert await engine.take_call_log() == [
            ("generate", 0),
            ("sleep", 0),
            ("update_weights", 1),
            ("wake_up", 1),
            ("generate", 1),
        ]
        assert await engine.take_call_log() == []  # taken
        with pytest.raises(ValueError, match="allowed: 1 or 2"):
            await engine.sleep(3)
        await engine.shutdown()

    asyncio.run(main())


def test_one_gpu_or_no_cpu_suffices_and_call_logs_read_in_order():
    from trinity.common.config import load_config
    from trinity.launcher.colocate import (
        GPU_SHARE,
        colocated_engine,
        format_calls,
        ray_resources,
    )
    from trinity.launcher.engines import EngineSettings

    one_gpu = load_config({"mode": "colocate", "cluster": {"node_num": 1, "gpu_per_node": 1}})
    res = ray_resources(one_gpu)
    assert res["rollout_engine"]["num_gpus"] + res["trainer_rank"]["num_gpus"] <= 1
    assert res["total"]["num_gpus"] <= 1  # the one-rank trainer runs in the driver
    cpu = load_config({"mode": "colocate", "cluster": {"node_num": 1, "gpu_per_node": 0}})
    res = ray_resources(cpu)
    assert res["total"] == {"num_cpus": 0.0, "num_gpus": 0.0}
    settings = colocated_engine(EngineSettings(model_path="m"))
    assert settings.enable_sleep_mode and settings.gpu_share == GPU_SHARE
    calls = [("generate", 0)] * 3 + [("sleep", 0), ("update_weights", 1), ("wake_up", 1)]
    assert format_calls(calls) == ["generate@0 x3", "sleep@0", "update_weights@1", "wake_up@1"]


def test_dry_run_accepts_colocate_and_names_the_offset_it_refuses(tmp_path):
    config = yaml.safe_load(QUICKSTART.read_text())
    config["mode"] = "colocate"
    # --dry-run loads no model: a stand-in directory (validation refuses one that is not a model)
    (tmp_path / "config.json").write_text("{}")
    config["model"]["model_path"] = str(tmp_path)
    path = tmp_path / "colocate.yaml"

    def dry_run() -> subprocess.CompletedProcess:
        path.write_text(yaml.safe_dump(config))
        return subprocess.run(
            [str(BIN / "trinity-launch"), str(path), "--dry-run"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )

    ok = dry_run()
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "mode=colocate" in ok.stdout
    config["synchronizer"]["sync_offset"] = 1
    bad = dry_run()
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "synchronizer.sync_offset" in bad.stderr and "synchronous by construction" in bad.stderr


# ---------------------------------------------------------------------- real runs
def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        if os.environ.get("TRINITY_REQUIRE_VLLM") == "1":
            pytest.fail(f"{module} is required here (TRINITY_REQUIRE_VLLM=1) but not installed")
        pytest.skip(f"{module} is not installed")


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _check_turns(rows: list[dict]) -> None:
    """Each train step ``s``'s record: the engine generated at version ``s - 1`` (the trainer's
    latest) and only then slept; the trainer trained; the weights of ``s`` were loaded; the
    engine woke at ``s``. Nothing generated between sleep and wake."""
    for row in rows:
        s = row["step"]
        calls = row["colocate/calls"].split(", ")
        turn = calls.index(f"train@{s}")
        before, after = calls[:turn], calls[turn + 1 :]
        assert before[-1] == f"sleep@{s - 1}", (s, calls)
        # (a resumed run first loads the checkpoint's weights: update_weights@{s - 1})
        pattern = rf"(generate|score|update_weights)@{s - 1}( x\d+)?"
        assert all(re.fullmatch(pattern, c) for c in before[:-1]), (s, calls)
        assert after == [f"update_weights@{s}", f"wake_up@{s}"], (s, calls)
        assert row["colocate/stale_generations"] == 0
        assert row["sample/model_version/max"] == row["sample/model_version/min"] == s - 1


@pytest.mark.slow
def test_colocate_quickstart_learns_taking_turns_and_resumes_after_a_kill(tmp_path):
    """The quickstart (vLLM's CPU build, verl on CPU) in mode colocate for 50 steps, SIGKILLed
    (with its Ray processes) once its first checkpoint (step 10) exists and run again with the
    same command: it resumes as mode both does (every step once, each on its own step's
    experiences), the mean training reward of the last 5 steps is at least 0.25 above that of
    the first 5 (mode both goes from ~0.05 to ~0.5 in 40 steps; colocate measured 0.05 -> 0.37
    at 40, still rising), and every step took its turn in order, at the trainer's latest
    weights."""
    _needs("vllm")
    _needs("verl")
    from cli_process import kill_when, run_to_end

    model = tmp_path / "tiny-model"
    subprocess.run(
        [sys.executable, "-m", "trinity.launcher.tiny_model", str(model), "--preset", "arithmetic"],
        check=True,
        capture_output=True,
    )
    config = yaml.safe_load(QUICKSTART.read_text())
    config.update(mode="colocate", checkpoint_root_dir=str(tmp_path / "ckpt"))
    config["model"]["model_path"] = str(model)
    config["buffer"]["total_steps"] = 50
    taskset = config["buffer"]["explorer_input"]["taskset"]
    taskset["path"] = str(ROOT / taskset["path"])
    config["buffer"]["explorer_input"]["eval_tasksets"] = []  # the turns, not evaluation
    config["trainer"]["save_interval"] = 10
    path = tmp_path / "colocate.yaml"
    path.write_text(yaml.safe_dump(config))
    run = tmp_path / "ckpt" / "trinity-quickstart" / "cpu" / "grpo-arithmetic"
    latest = run / "latest_checkpointed_iteration.txt"

    kill_when(path, tmp_path / "killed.log", latest.exists, timeout=900)
    ckpt = int(latest.read_text())
    assert 10 <= ckpt < 50, f"killed at checkpoint {ckpt}, not mid-run"

    out = run_to_end(path, tmp_path / "resumed.log", timeout=1200)
    assert f"Resuming mode colocate from global_step_{ckpt}" in out
    rows = _records(run)
    assert [r["step"] for r in rows] == list(range(1, 51))  # none twice, none missing
    for row in rows:  # each step trained on its own step's 16 tasks x 8 samples
        ids = row["batch/experience_ids"].split()
        assert ids == sorted(f"{row['step']}/{t}/{r}" for t in range(16) for r in range(8))
    rewards = [r["batch/reward/mean"] for r in rows]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last - first >= 0.25, (first, last, rewards)
    _check_turns(rows)


@pytest.mark.slow
def test_a_preempted_colocated_run_checkpoints_and_resumes_taking_turns(
    tmp_path, both_config, arithmetic_tasks
):
    """SIGTERM to ``trinity-launch`` in mode colocate (the transformers engine, 6 steps of 4
    tasks, no periodic checkpoint) once 2 steps are recorded: the explore step in flight is
    abandoned, the train step in progress ends, a checkpoint of that step is written, the
    command exits 75 well inside the grace period; the same command resumes from it, every
    step is trained once on its own explore step's experiences, and every step took its turn
    in order, at the trainer's latest weights."""
    _needs("verl")
    from cli_process import preempt_after_steps, run_to_end

    config = both_config(
        tmp_path,
        "colocate-term",
        arithmetic_tasks(tmp_path, 24),  # 6 steps of 4 tasks
        model={"max_model_len": 64},
        trainer={"save_interval": 0},
    )
    config["mode"] = "colocate"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    run = tmp_path / "ckpt" / "both" / config["name"]
    _, step = preempt_after_steps(path, tmp_path / "term.log", run, 2, 6)

    out = run_to_end(path, tmp_path / "resumed.log")
    assert f"Resuming mode colocate from global_step_{step}" in out
    rows = _records(run)
    assert [r["step"] for r in rows] == list(range(1, 7))  # none twice, none missing
    for row in rows:  # each step trained on its own step's 4 tasks x 4 samples
        ids = row["batch/experience_ids"].split()
        assert ids == sorted(f"{row['step']}/{t}/{r}" for t in range(4) for r in range(4))
    _check_turns(rows)


KILL_ASLEEP = textwrap.dedent(
    '''
    """The arithmetic workflow that, once (explore step 3, task 0), starts a thread which
    waits until its rollout engine is asleep -- the trainer's turn -- and kills it (SIGKILL)."""
    import os
    import signal
    import threading
    import time

    import ray

    from trinity.common.workflows import WORKFLOWS
    from trinity.workflows.single_turn import ArithmeticWorkflow


    def _kill_when_asleep(engine, marker):
        pid = ray.get(engine.pids.remote())["pid"]
        while not ray.get(engine.is_sleeping.remote()):
            time.sleep(0.005)
        os.kill(pid, signal.SIGKILL)
        with open(marker, "w") as f:
            f.write(str(pid))


    @WORKFLOWS.register_module("kill_asleep_arithmetic")
    class KillAsleepArithmetic(ArithmeticWorkflow):
        async def run_async(self):
            args = self.workflow_args
            if self.task.batch_id == 3 and self.task.task_id == 0:
                threading.Thread(
                    target=_kill_when_asleep,
                    args=(self.model.engine, args["kill_marker"]),
                    daemon=True,
                ).start()
            return await super().run_async()
    '''
)


@pytest.mark.slow
def test_an_engine_killed_asleep_is_replaced_asleep_with_the_latest_weights(
    tmp_path, both_config, run_cli, arithmetic_tasks
):
    """``kill -9`` of the transformers engine while it sleeps in train step 3's turn: the weight
    push (or the wake) finds it dead, the supervisor starts a replacement, loads the latest
    weights, puts it to sleep like the others, the push and wake go on, and the run finishes
    its 5 steps with no generation at stale weights."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "killer.py").write_text(KILL_ASLEEP)
    marker = tmp_path / "killed"
    config = both_config(
        tmp_path,
        "colocate-kill",
        arithmetic_tasks(tmp_path, 20),  # 5 steps of 4 tasks
        model={"max_model_len": 64},
        buffer={
            "explorer_input": {
                "taskset": {
                    "default_workflow_type": "kill_asleep_arithmetic",
                    "workflow_args": {"kill_marker": str(marker)},
                }
            }
        },
        trainer={"save_interval": 0},
    )
    config["mode"] = "colocate"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    done = run_cli(path, "--plugin-dir", str(plugins), timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert marker.exists()  # the engine was killed
    log = done.stdout + done.stderr
    assert "restarted in" in log, log[-5000:]
    rows = _records(tmp_path / "ckpt" / "both" / config["name"])
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[-1]["rollout/engine_restarts_total"] == 1
    assert all(r["runner/failed_tasks"] == 0 for r in rows)
    # steps 1, 2, 4, 5 in order; step 3's turn ended on the replacement
    _check_turns([r for r in rows if r["step"] != 3])
    step3 = rows[2]["colocate/calls"].split(", ")
    # the replacement: loaded the latest weights, slept, got the push, woke
    assert step3[step3.index("train@3") + 1 :][-1] == "wake_up@3", step3
    assert all(r["colocate/stale_generations"] == 0 for r in rows)
    assert [r["sample/model_version/max"] for r in rows] == [0, 1, 2, 3, 4]
