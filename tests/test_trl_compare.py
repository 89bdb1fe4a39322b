"""``benchmarks/trl_compare.py``: its summaries (pure functions) and a smoke run of both configs
with both sides (``--smoke``: a few steps each, Trinity and TRL's ``GRPOTrainer``, the bare vLLM
floor, plus the train-step check). Timings are recorded, never asserted: on a shared CI machine they measure
the machine's load. TRL's environment (``.venvs/benchmark``) is built by ``scripts/test.sh``
and ``scripts/bench_env.sh``."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("trl_compare", ROOT / "benchmarks" / "trl_compare.py")
trl_compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trl_compare)


def _run(times, rewards):
    return {
        "steps": [
            {"step": i + 1, "t": t, "reward": r}
            for i, (t, r) in enumerate(zip(times, rewards, strict=True))
        ]
    }


def test_summary_reads_startup_step_time_and_time_to_target():
    times = [10.0, 11.0, 11.5, 12.0, 12.5, 13.0, 13.5, 14.0]
    rewards = [0.0, 0.1, 0.2, 0.9, 0.9, 0.9, 0.9, 0.9]
    s = trl_compare.summarize(_run(times, rewards))
    assert s["startup_s"] == 10.0  # launch to the end of step 1
    assert s["s_per_step"] == 0.5  # median gap from step 3 on (the first gap is warm-up)
    # first 5-step window with mean >= 0.8: steps 4..8 -> ends at step 8 (t = 14.0)
    assert s["time_to_0.8_s"] == 14.0
    assert s["final_reward"] == pytest.approx(0.9)
    never = trl_compare.summarize(_run(times, [0.1] * 8))
    assert never["time_to_0.8_s"] is None


def test_floor_time_to_target_counts_the_steps_the_learning_sides_needed():
    # the floor learns nothing: its time to 0.8 is its start-up plus (n - 1) of its steps,
    # n being the step at which a learning side first reached the 5-step mean
    learner = _run([10.0, 11.0, 11.5, 12.0, 12.5, 13.0, 13.5, 14.0], [0.0] * 3 + [0.9] * 5)
    reached = trl_compare.summarize(learner)["time_to_0.8_s"]
    assert trl_compare.steps_to(learner, reached) == 8
    assert trl_compare.steps_to(learner, None) is None
    floor = {**_run([5.0, 5.1, 5.3, 5.5], [0.0] * 4), "ray_init_s": 2.5}
    f = trl_compare.floor_summary(floor, 8)
    assert f["startup_s"] == 5.0 and f["s_per_step"] == pytest.approx(0.2)
    assert f["time_to_0.8_s"] == pytest.approx(5.0 + 7 * 0.2)
    assert f["engine_time_to_0.8_s"] == f["time_to_0.8_s"]  # no train-step check ran
    assert f["ray_init_s"] == 2.5 and f["steps_to_0.8"] == 8
    trained = trl_compare.floor_summary(floor, 8, train_s=0.05)
    assert trained["engine_time_to_0.8_s"] == pytest.approx(5.0 + 7 * 0.2)
    assert trained["time_to_0.8_s"] == pytest.approx(5.0 + 7 * 0.2 + 8 * 0.05)
    assert trl_compare.floor_summary(floor, None)["time_to_0.8_s"] is None


def test_trinity_config_shares_the_settings_with_trl(tmp_path):
    import yaml

    path = trl_compare.trinity_config("realistic", "trinity-offset1", "/m", 7, tmp_path)
    cfg = yaml.safe_load(path.read_text())
    assert (
        cfg["model"]["max_response_tokens"]
        == trl_compare.CONFIGS["realistic"]["max_response_tokens"]
    )
    assert cfg["algorithm"]["optimizer"]["lr"] == trl_compare.CONFIGS["realistic"]["lr"]
    assert cfg["buffer"]["batch_size"] == trl_compare.SHARED["batch_size"]
    assert cfg["algorithm"]["repeat_times"] == trl_compare.SHARED["repeat_times"]
    assert cfg["synchronizer"]["sync_offset"] == 1
    assert "eval_tasksets" not in cfg["buffer"]["explorer_input"]
    from trinity.common.config import load_config

    load_config(str(path))  # a valid config


def test_the_fully_async_side_and_the_floor_ratios(tmp_path):
    import yaml

    from trinity.common.config import load_config

    path = trl_compare.trinity_config("quickstart", "trinity-async", "/m", 7, tmp_path)
    cfg = yaml.safe_load(path.read_text())
    assert cfg["synchronizer"]["sync_style"] == "fully_async"
    assert cfg["synchronizer"]["sync_offset"] == 0
    load_config(str(path))  # a valid config

    floor = {"s_per_step": 0.03, "bare_train_step_s": 0.04, "time_to_0.8_s": 15.0}
    sides = {
        "trinity": {"s_per_step": 0.14, "time_to_0.8_s": 30.0},
        "trinity-async": {"s_per_step": 0.105, "time_to_0.8_s": None},
        "trl": {"s_per_step": 0.05, "time_to_0.8_s": 8.0},
    }
    ratios = trl_compare.floor_ratios(sides, floor)
    assert ratios["time_to_0.8_trinity_over_floor"] == pytest.approx(2.0)
    assert ratios["s_per_step_trinity_over_floor_gen_train"] == pytest.approx(2.0)
    assert ratios["s_per_step_trinity-async_over_floor_gen_train"] == pytest.approx(1.5)
    assert ratios["time_to_0.8_trinity-async_over_floor"] is None  # it never got there
    assert not any("trl" in key for key in ratios)


@pytest.mark.slow
def test_cpu_per_step_is_read_between_step_3_and_the_last_reading():
    def step(n, t, driver, engine, runner=0.0, other=0.0):
        cpu = {"driver": driver, "engine": engine, "runner": runner, "other": other}
        return {"step": n, "t": t, "reward": 0.0, "cpu": cpu}

    run = {
        "steps": [
            step(1, 10.0, 8.0, 9.0),  # start-up: not counted
            {"step": 2, "t": 10.5, "reward": 0.0},
            step(3, 11.0, 9.0, 10.0, 1.0, 0.5),
            {"step": 4, "t": 11.5, "reward": 0.0},
            step(5, 12.0, 9.4, 10.2, 1.2, 0.6),
        ]
    }
    c = trl_compare.cpu_summary(run, cores=2)
    assert c["steps"] == 2
    assert c["by_role_s_per_step"] == pytest.approx(
        {"driver": 0.2, "engine": 0.1, "runner": 0.1, "other": 0.05}
    )
    assert c["cpu_s_per_step"] == pytest.approx(0.45)
    assert c["bound_s_per_step"] == pytest.approx(0.225)  # 0.45 s of CPU over 2 cores
    assert c["cores_busy"] == pytest.approx(0.9)  # 0.9 CPU seconds in 1 s of wall time
    # one reading from step 3 on is not a rate
    assert trl_compare.cpu_summary({"steps": run["steps"][:3]}, cores=2) is None


def test_cpu_meter_counts_the_whole_process_tree(tmp_path):
    """A launch whose child burns CPU: the meter reads the launch's tree (real processes),
    and a process that has exited keeps its last reading."""
    burn = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
    child = tmp_path / "burn.py"
    child.write_text(burn)
    ready = tmp_path / "ready"
    launch = (
        "import pathlib, subprocess, sys, time\n"
        f"subprocess.run([sys.executable, {str(child)!r}])\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", launch])
    try:
        meter = trl_compare.CpuMeter(proc.pid)
        first = meter.read()
        assert set(first) == {"driver", "engine", "runner", "other"}
        while not ready.exists():  # the child ran to the end while the meter watched
            meter.read()
            assert proc.poll() is None
        later = meter.read()
        assert later["driver"] >= first["driver"]
        # the child burned 0.4 s of CPU (counted apart from the driver: an unknown child is "other")
        assert later["other"] >= 0.3
    finally:
        proc.kill()
        proc.wait()


def test_smoke_quickstart_config_every_side(tmp_path):
    """The quickstart config with every side (Trinity, TRL, the floor) and the train-step check.
    The realistic config runs the same code with a bigger (24M) model; CI runs the quickstart
    only (``--configs quickstart``) to keep the suite inside its time limit."""
    if not trl_compare.TRL_PYTHON.exists():
        pytest.fail(
            f"TRL's environment is missing: run ./scripts/bench_env.sh ({trl_compare.TRL_PYTHON})"
        )
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/trl_compare.py",
            "--smoke",
            "--configs",
            "quickstart",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"trl_compare --smoke exited {done.returncode}:\n{tail}"
    results = json.loads((tmp_path / "results.json").read_text())
    assert sorted(results["configs"]) == ["quickstart"]
    for name in ("quickstart",):
        entry = results["configs"][name]
        for side in ("trinity", "trl"):
            summary = entry["sides"][side]
            assert summary["steps"] == trl_compare.CONFIGS[name]["smoke_steps"], (name, side)
            assert summary["startup_s"] > 0 and summary["s_per_step"] > 0
        assert entry["ratios"]["trinity_steps_per_s_over_trl"] > 0
        breakdown = entry["sides"]["trinity"]["breakdown"]
        for key in ("time/train/forward_backward", "time/train/optimizer", "train/real_tokens"):
            assert key in breakdown, key
        floor = entry["sides"]["floor"]  # the bare vLLM engine, no Trinity code
        assert floor["steps"] == trl_compare.CONFIGS[name]["smoke_steps"], name
        assert floor["startup_s"] > 0 and floor["s_per_step"] > 0 and floor["ray_init_s"] > 0
    check = results["configs"]["quickstart"]["train_step_check"]
    assert check["ratio_trinity_over_bare"] > 0 and check["micro_batches"] >= 1
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert "train step: trinity" in done.stdout
