"""``trinity.cli.launcher`` (Trinity-RFT's typer command line) on our run layer: what
Trinity-RFT's own launcher tests (tests/trinity_rft_compat/upstream/cli) do not check -- bad
input is one clear line, every runnable mode has a launch function, the run command checks the
config as ``trinity run`` does and joins Ray as Trinity-RFT does, the previous stage's weights
are found in our checkpoint layout, and ``log`` follows a real directory. No run starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from stand_in_model import small_config
from typer.testing import CliRunner

from trinity.cli import launcher
from trinity.common.config import RUN_MODES, Config, load_config
from trinity.launcher.checkpoint import CheckpointSettings, RunCheckpointer
from trinity.launcher.errors import LaunchInputError
from trinity.launcher.modes import RUNNABLE_MODES
from trinity.trainer.verl.utils import get_latest_hf_checkpoint_path

runner = CliRunner()


def _module(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trinity.cli.launcher", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# ---------------------------------------------------------------------- run
def test_run_on_a_bad_config_exits_2_with_our_message(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("mode: both\nsynchronizer:\n  sync_style: sometimes\n")
    out = _module("run", "--config", str(cfg))
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    assert "synchronizer.sync_style" in out.stderr and "'sometimes'" in out.stderr


def test_run_refuses_what_trinity_run_refuses_before_joining_ray(tmp_path):
    cfg = small_config(tmp_path, head="mode: train")  # mode train without data to train on
    with mock.patch("ray.init") as init:
        result = runner.invoke(launcher.app, ["run", "--config", str(cfg)])
    assert result.exit_code == 2, result.output
    assert "buffer.trainer_input.experience_buffer" in result.output
    init.assert_not_called()


def test_mode_map_covers_every_runnable_mode():
    assert set(RUNNABLE_MODES) <= set(launcher.MODE_MAP)
    assert launcher.MODE_MAP["colocate"] is launcher.both


def test_a_launch_function_refuses_a_config_of_another_mode():
    with pytest.raises(LaunchInputError, match="explore"):
        launcher.explore(Config(mode="train"))


def _run_recording(cfg: Path, init: Any) -> tuple[Any, list[Config]]:
    seen: list[Config] = []
    with (
        mock.patch.dict(launcher.MODE_MAP, {"both": seen.append}),
        mock.patch("ray.init", init),
        mock.patch("ray.shutdown") as shutdown,
    ):
        result = runner.invoke(launcher.app, ["run", "--config", str(cfg)])
    assert result.exit_code == 0, result.output
    return shutdown, seen


def test_run_checks_the_config_in_place_then_joins_ray(tmp_path):
    init = mock.Mock()
    shutdown, seen = _run_recording(small_config(tmp_path, repeat_times=4), init)
    (config,) = seen
    assert config.checkpoint_job_dir == str(tmp_path / "ckpt" / "p" / "n")  # checked
    assert config.algorithm.advantage_fn == "grpo"  # the algorithm type's defaults, in place
    assert config.buffer.train_batch_size == 2 * 4
    init.assert_called_once_with(
        address="auto",
        ignore_reinit_error=True,
        namespace="p/n",
        runtime_env={"env_vars": config.get_envs()},
    )
    shutdown.assert_called_once()


def test_without_a_ray_cluster_the_run_layer_starts_its_own(tmp_path):
    init = mock.Mock(side_effect=ConnectionError("Could not find any running Ray instance"))
    shutdown, seen = _run_recording(small_config(tmp_path), init)
    assert len(seen) == 1 and init.call_count == 1
    shutdown.assert_not_called()  # nothing was joined: the run layer's Ray is its own


# ---------------------------------------------------------------------- stages' weights
class _Trainer:
    """What RunCheckpointer.save calls; its files include the Hugging Face weights a stage's
    last step saves (``trainer.save_hf_checkpoint``)."""

    def __init__(self, step: int) -> None:
        self.global_step = step

    def save_checkpoint_files(self, directory: str) -> None:
        hf = Path(directory, "actor", "huggingface")
        hf.mkdir(parents=True)
        config = {"model_type": "qwen2", "max_position_embeddings": 2048}
        (hf / "config.json").write_text(json.dumps({**config, "step": self.global_step}))
        (hf / "model.safetensors").write_bytes(b"\0" * 16)

    def state_dict(self) -> dict[str, Any]:
        return {"global_step": self.global_step}


def test_latest_hf_checkpoint_path_in_our_checkpoint_layout(tmp_path):
    config = Config(checkpoint_root_dir=str(tmp_path), project="p", name="n")
    assert get_latest_hf_checkpoint_path(config) is None  # no checkpoint yet
    job_dir = config.get_checkpoint_job_dir()
    saver = RunCheckpointer(CheckpointSettings(job_dir=job_dir, mode=RUN_MODES["train"], keep=0))
    for step in (1, 2):
        saver.save(_Trainer(step))
    found = get_latest_hf_checkpoint_path(config)
    assert found == os.path.join(job_dir, "global_step_2", "actor", "huggingface")
    assert json.loads(Path(found, "config.json").read_text())["step"] == 2


def test_each_stage_joins_ray_and_starts_from_the_previous_stages_weights(tmp_path):
    cfg = small_config(tmp_path, tail="stages:\n  - stage_name: s1\n  - stage_name: s2")
    seen: list[Config] = []

    def both(stage: Config) -> None:  # the stage "trains": one checkpoint with HF weights
        seen.append(stage)
        settings = CheckpointSettings(job_dir=stage.checkpoint_job_dir, mode=RUN_MODES["both"])
        RunCheckpointer(settings).save(_Trainer(1))

    with (
        mock.patch.dict(launcher.MODE_MAP, {"both": both}),
        mock.patch("ray.init") as init,
        mock.patch("ray.shutdown") as shutdown,
    ):
        result = runner.invoke(launcher.app, ["run", "--config", str(cfg)])
    assert result.exit_code == 0, result.output
    first, second = seen
    assert first.model.model_path == str(tmp_path / "model")
    assert second.model.model_path == os.path.join(
        first.checkpoint_job_dir, "global_step_1", "actor", "huggingface"
    )
    assert [c.kwargs["namespace"] for c in init.call_args_list] == ["p/n/s1", "p/n/s2"]
    assert shutdown.call_count == 2


# ---------------------------------------------------------------------- log, debug
def test_log_needs_a_directory_and_names_a_missing_one(tmp_path, monkeypatch, capsys):
    result = runner.invoke(launcher.app, ["log"])
    assert result.exit_code == 2 and "Either --config or --log-dir" in result.output
    monkeypatch.setattr(sys, "argv", ["launcher", "log", "--log-dir", str(tmp_path / "none")])
    with pytest.raises(SystemExit) as exit_:
        launcher.main()
    assert exit_.value.code == 2
    assert f"Log directory not found: {tmp_path / 'none'}" in capsys.readouterr().err


def test_log_config_finds_the_runs_log_directory(tmp_path):
    cfg = small_config(tmp_path)
    log_dir = Path(load_config(cfg).get_checkpoint_job_dir(), "log")
    log_dir.mkdir(parents=True)
    with mock.patch("trinity.manager.log_manager.LogManager") as manager:
        result = runner.invoke(launcher.app, ["log", "--config", str(cfg), "--no-color"])
    assert result.exit_code == 0, result.output
    assert manager.call_args.kwargs["log_dir"] == str(log_dir)
    assert manager.call_args.kwargs["color_output"] is False


class _Lines:
    """The output lines of a process, read by one thread as they come."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in list(self.lines)):
                return True
            time.sleep(0.1)
        return False

    def __str__(self) -> str:
        return "".join(self.lines)


def test_log_follows_a_real_directory(tmp_path):
    log = tmp_path / "explorer.log"
    log.write_text("INFO 10:00 started\nERROR 10:01 needle in the file\nINFO 10:02 going on\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "trinity.cli.launcher", "log", "--log-dir", str(tmp_path)]
        + ["-p", "needle", "-l", "WARNING", "--no-color"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    out = _Lines(proc)
    try:
        assert out.wait_for("Started tracking", 60), str(out)
        assert ">> [explorer.log] ERROR 10:01 needle in the file" in str(out)
        with log.open("a") as f:
            f.write("INFO 10:03 below the level\nERROR 10:04 appended error\n")
        assert out.wait_for("appended error", 30), str(out)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert proc.returncode == 0, str(out)
    assert "below the level" not in str(out)
    assert "\n[explorer.log] ERROR 10:04 appended error\n" in str(out)


def test_debug_refuses_what_has_no_counterpart(tmp_path):
    cfg = str(small_config(tmp_path))
    result = runner.invoke(
        launcher.app, ["debug", "--config", cfg, "--module", "workflow", "--output-file", "x"]
    )
    assert result.exit_code == 2 and "--output-file" in result.output
    result = runner.invoke(launcher.app, ["debug", "--config", cfg, "--module", "trainer"])
    assert result.exit_code == 2 and "allowed: workflow, inference_model, viewer" in result.output
