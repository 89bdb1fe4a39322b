"""Monitors write real files: TensorBoard events, an offline W&B run, a local MLflow store,
metrics.jsonl; ``trinity plot`` draws the reward curve from metrics.jsonl."""

from __future__ import annotations

import json
import os
import struct

import pytest

from trinity.common.config import load_config
from trinity.launcher.cli import main
from trinity.launcher.monitor import MONITOR, create_monitor
from trinity.launcher.plot import read_metrics

STEPS = [(1, 0.25), (2, 0.5), (3, 0.75)]


def config_for(tmp_path, monitor_type, **monitor_args):
    return load_config(
        {
            "project": "mon",
            "name": f"run-{monitor_type}",
            "checkpoint_root_dir": str(tmp_path),
            "monitor": {"monitor_type": monitor_type, "monitor_args": monitor_args or None},
        }
    )


def log_steps(config):
    monitor = create_monitor(config)
    for step, reward in STEPS:
        monitor.log(
            {"rollout/reward/mean": reward, "eval/x/reward/mean@4": reward / 2, "note": "text"},
            step,
        )
    monitor.close()
    return monitor


def test_metrics_jsonl_is_always_written(tmp_path):
    config = config_for(tmp_path, "tensorboard")
    log_steps(config)
    rows = read_metrics(config.checkpoint_job_dir)
    assert [(r["step"], r["rollout/reward/mean"]) for r in rows] == STEPS


def test_tensorboard_events_hold_the_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = config_for(tmp_path, "tensorboard")
    monitor = log_steps(config)
    log_dir = monitor.monitors[1].log_dir
    assert log_dir.startswith(config.checkpoint_job_dir)
    events = EventAccumulator(log_dir)
    events.Reload()
    values = [(e.step, e.value) for e in events.Scalars("rollout/reward/mean")]
    assert values == STEPS
    assert "note" not in events.Tags()["scalars"]


@pytest.mark.slow
def test_wandb_runs_offline_without_an_api_key(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = config_for(tmp_path, "wandb")
    log_steps(config)
    wandb_dir = os.path.join(config.checkpoint_job_dir, "monitor", "wandb", "wandb")
    runs = [d for d in os.listdir(wandb_dir) if d.startswith("offline-run-")]
    assert len(runs) == 1, os.listdir(wandb_dir)
    # the offline run log (protobuf records, synced later with `wandb sync`) holds every step
    (log,) = [f for f in os.listdir(os.path.join(wandb_dir, runs[0])) if f.endswith(".wandb")]
    data = open(os.path.join(wandb_dir, runs[0], log), "rb").read()
    assert b"rollout/reward/mean" in data
    for _, reward in STEPS:
        assert json.dumps(reward).encode() in data


@pytest.mark.slow
def test_mlflow_logs_to_a_local_store(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = config_for(tmp_path, "mlflow")
    monitor = log_steps(config)
    sink = monitor.monitors[1]
    assert sink.tracking_uri.startswith("sqlite:///" + config.checkpoint_job_dir)
    client = mlflow.MlflowClient(tracking_uri=sink.tracking_uri)
    experiment = client.get_experiment_by_name("mon")
    (run,) = client.search_runs([experiment.experiment_id])
    history = client.get_metric_history(run.info.run_id, "rollout/reward/mean")
    assert [(m.step, m.value) for m in history] == STEPS
    assert run.data.params["name"] == "run-mlflow"
    assert run.info.status == "FINISHED"
    # '@' is not allowed in MLflow keys: the eval metric is logged under a safe name
    assert client.get_metric_history(run.info.run_id, "eval/x/reward/mean_4")


@pytest.mark.slow
def test_swanlab_runs_offline_without_an_api_key(tmp_path, monkeypatch):
    pytest.importorskip("swanlab")
    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    monkeypatch.delenv("SWANLAB_MODE", raising=False)
    # Trinity-RFT 0.6's monitor_args names: experiment_name, tags
    config = config_for(tmp_path, "swanlab", experiment_name="exp-a", tags=["t1"])
    monitor = log_steps(config)
    assert monitor.monitors[1].run is None  # finished
    swan_dir = os.path.join(config.checkpoint_job_dir, "monitor", "swanlab")
    files = [os.path.join(d, f) for d, _, fs in os.walk(swan_dir) for f in fs]
    data = b"".join(open(f, "rb").read() for f in files)
    assert b"exp-a" in data and b"t1" in data and b"rollout/reward/mean" in data, files
    # the run log (protobuf records, uploaded later with `swanlab sync`) holds every value
    for _, reward in STEPS:
        assert struct.pack("<d", reward) in data


def test_unknown_monitor_type_is_refused_by_the_schema(tmp_path):
    with pytest.raises(ValueError, match="monitor_type"):
        config_for(tmp_path, "nope")
    assert {"tensorboard", "wandb", "mlflow", "swanlab"} <= set(MONITOR.list())


def test_trinity_plot_writes_a_png(tmp_path, capsys):
    config = config_for(tmp_path, "tensorboard")
    log_steps(config)
    assert main(["plot", config.checkpoint_job_dir]) == 0
    png = os.path.join(config.checkpoint_job_dir, "reward.png")
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(png) > 5000
    out = tmp_path / "only-train.png"
    assert (
        main(
            [
                "plot",
                config.checkpoint_job_dir,
                "--out",
                str(out),
                "--metric",
                "rollout/reward/mean",
            ]
        )
        == 0
    )
    assert out.exists()


def test_trinity_plot_says_what_is_missing(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 2
    assert "metrics.jsonl: no metrics" in capsys.readouterr().err
    config = config_for(tmp_path, "tensorboard")
    log_steps(config)
    assert main(["plot", config.checkpoint_job_dir, "--metric", "loss"]) == 2
    err = capsys.readouterr().err
    assert "no values for ['loss']" in err and "rollout/reward/mean" in err


def test_plot_curves_draws_named_curves_in_panels(tmp_path):
    from trinity.launcher.plot import PlotError, plot_curves

    curves = {"grpo": [(2, 0.5), (1, 0.1)], "rloo": [(1, 0.0), (2, 0.9)], "none": []}
    out = plot_curves(curves, str(tmp_path / "sub" / "m.png"), title="t", ncols=2, dpi=40)
    data = open(out, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(PlotError, match="nothing to plot"):
        plot_curves({"a": []}, str(tmp_path / "empty.png"))
    assert not (tmp_path / "empty.png").exists()
