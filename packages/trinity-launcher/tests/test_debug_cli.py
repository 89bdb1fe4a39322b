"""``trinity debug``: one task of a config run in this process with its model; the experiences
written to the output directory (SQLite table ``debug_buffer`` and readable JSON lines); a
workflow that raises exits 1 with its traceback and keeps nothing half-written; what is not
supported exits 2 saying so."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trinity.launcher.debug import DEBUG_TABLE, output_dir_for
from trinity.launcher.viewer import check_target, resolve_target

TRINITY = str(Path(sys.executable).parent / "trinity")

BROKEN_PLUGIN = """
from trinity.common.workflows import WORKFLOWS, Workflow


@WORKFLOWS.register_module("broken_debug_workflow")
class Broken(Workflow):
    def run(self):
        raise RuntimeError("the plugin's bug")
"""


def _config(tmp_path: Path, model_path: str, tasks: Path, workflow: str) -> Path:
    config = {
        "project": "debug",
        "name": "try",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
        "model": {"model_path": model_path, "max_prompt_tokens": 32, "max_response_tokens": 4},
        "cluster": {"gpu_per_node": 0},
        "buffer": {
            "batch_size": 2,
            "explorer_input": {
                "taskset": {
                    "name": "arithmetic",
                    "path": str(tasks),
                    "format": {"prompt_key": "question", "response_key": "answer"},
                    "default_workflow_type": workflow,
                }
            },
        },
        "explorer": {"rollout_model": {"engine_type": "transformers", "dtype": "float32"}},
    }
    path = tmp_path / f"{workflow}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _debug(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [TRINITY, "debug", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


@pytest.mark.slow
def test_debug_runs_the_first_task_once_and_writes_what_came_out(
    tmp_path, model_path, arithmetic_tasks
):
    tasks = arithmetic_tasks(tmp_path, 4)
    config = _config(tmp_path, model_path, tasks, "arithmetic_workflow")
    kept = tmp_path / "debug_output" / "earlier.txt"  # --disable-overwrite keeps it
    kept.parent.mkdir()
    kept.write_text("an earlier debug run")
    done = _debug(
        "--config",
        str(config),
        "--module",
        "workflow",
        "--disable-overwrite",
        "--enable-profiling",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert kept.read_text() == "an earlier debug run"
    [out] = [p for p in tmp_path.glob("debug_output_*") if p.is_dir()]
    rows = [json.loads(line) for line in (out / "experiences.jsonl").read_text().splitlines()]
    assert len(rows) == 1  # repeat_times 1, whatever the config says
    first = json.loads(tasks.read_text().splitlines()[0])
    assert first["question"] in rows[0]["prompt"]
    assert isinstance(rows[0]["reward"], float) and "accuracy" in rows[0]["metrics"]
    assert f"run 0: reward {rows[0]['reward']}" in done.stdout
    with sqlite3.connect(out / "experiences.db") as db:
        assert db.execute("SELECT COUNT(*) FROM debug_buffer").fetchone() == (1,)
    assert (out / "profiling.prof").stat().st_size > 0
    # --module viewer checks that output as trinity view does before its page starts: here the
    # default output directory is empty, so it names the missing database
    viewer = _debug("-c", str(config), "-m", "viewer", cwd=tmp_path)
    assert viewer.returncode == 2 and "debug_output/experiences.db" in viewer.stderr
    target, _ = resolve_target(str(out / "experiences.db"), DEBUG_TABLE, str(model_path))
    check_target(target)  # what --module viewer -o <out> shows: the table decodes


@pytest.mark.slow
def test_a_failing_workflow_exits_1_with_its_traceback(tmp_path, model_path, arithmetic_tasks):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "broken.py").write_text(BROKEN_PLUGIN)
    config = _config(tmp_path, model_path, arithmetic_tasks(tmp_path, 2), "broken_debug_workflow")
    done = _debug("-c", str(config), "-m", "workflow", "--plugin-dir", str(plugins), cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
    assert "RuntimeError: the plugin's bug" in done.stderr
    assert "0 experience(s) written" in done.stdout
    assert (tmp_path / "debug_output" / "experiences.jsonl").read_text() == ""


def test_what_is_not_supported_or_wrong_exits_2(tmp_path):
    viewer = _debug("-c", "x.yaml", "-m", "viewer", cwd=tmp_path)
    assert viewer.returncode == 2 and "x.yaml" in viewer.stderr
    unknown = _debug("-c", "x.yaml", "-m", "engine", cwd=tmp_path)
    assert unknown.returncode == 2 and "allowed: workflow, inference_model" in unknown.stderr
    missing = _debug("-c", str(tmp_path / "none.yaml"), "-m", "workflow", cwd=tmp_path)
    assert missing.returncode == 2 and "none.yaml" in missing.stderr


def test_disable_overwrite_picks_a_new_directory_only_when_needed(tmp_path):
    target = tmp_path / "out"
    assert output_dir_for(str(target), True) == target  # absent
    target.mkdir()
    assert output_dir_for(str(target), True) == target  # empty
    (target / "x").write_text("")
    assert output_dir_for(str(target), False) == target
    assert output_dir_for(str(target), True).name.startswith("out_")


@pytest.mark.slow
def test_inference_model_serves_the_openai_api_until_interrupted(
    tmp_path, model_path, arithmetic_tasks
):
    import signal
    import time
    import urllib.request

    pytest.importorskip("vllm")
    config = _config(tmp_path, model_path, arithmetic_tasks(tmp_path, 2), "arithmetic_workflow")
    data = yaml.safe_load(config.read_text())
    data["explorer"]["rollout_model"] = {"engine_type": "vllm"}
    config.write_text(yaml.safe_dump(data))
    proc = subprocess.Popen(
        [TRINITY, "debug", "-c", str(config), "-m", "inference_model"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
    )
    try:
        deadline, address = time.monotonic() + 300, None
        while address is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "trinity debug ended before serving"
            if "OpenAI API at " in line:
                address = line.split("OpenAI API at ", 1)[1].strip()
        with urllib.request.urlopen(f"{address}/models", timeout=30) as reply:
            assert model_path in reply.read().decode()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
