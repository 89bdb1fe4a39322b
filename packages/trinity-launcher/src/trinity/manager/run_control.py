"""Trinity Studio's run panel: start ``trinity-launch`` on a written config, stop it, and show
its log tail and metrics while it runs (the page itself is ``config_manager.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

import streamlit as st

from trinity.manager.config_io import read_metrics, reward_curve


def launch_run(yaml_text: str, job_dir: str) -> subprocess.Popen:
    """Write the config into the run directory and start ``trinity-launch`` on it."""
    studio_dir = os.path.join(job_dir, "studio")
    os.makedirs(studio_dir, exist_ok=True)
    config_path = os.path.join(studio_dir, "config.yaml")
    with open(config_path, "w", encoding="utf-8") as f:
        f.write(yaml_text)
    log_path = os.path.join(studio_dir, "launch.log")
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "trinity.launcher.cli", "run", "--config", config_path],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a page rerun or a closed tab does not stop the run
        )
    finally:
        log.close()
    process.trinity_log_path = log_path  # type: ignore[attr-defined]
    process.trinity_config_path = config_path  # type: ignore[attr-defined]
    return process


def stop_run(process: subprocess.Popen, timeout: float = 30.0) -> None:
    """Stop a launched run and everything it started (its own process group: Ray, engines)."""
    import signal

    try:
        os.killpg(process.pid, signal.SIGINT)  # trinity-launch shuts Ray down on Ctrl-C
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout)
    except ProcessLookupError:
        pass


def tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def _draw_metrics(run_dir: str) -> None:
    rows = read_metrics(run_dir) if run_dir else []
    if not rows:
        st.caption(f"No metrics yet in `{os.path.join(run_dir or '<run dir>', 'metrics.jsonl')}`.")
        return
    curves = reward_curve(rows)
    st.caption(f"{len(rows)} step(s) in `{os.path.join(run_dir, 'metrics.jsonl')}`.")
    if curves:
        import pandas as pd

        frame = pd.DataFrame(
            {name: pd.Series(dict(points)) for name, points in curves.items()}
        ).sort_index()
        frame.index.name = "step"
        st.subheader("Reward")
        st.line_chart(frame)
    st.dataframe(rows[-5:])


def show_metrics(run_dir: str, live: bool = False) -> None:
    """The reward curve of a run directory; refreshed every 2 s while a run is going."""
    if live:
        st.fragment(run_every=2)(_draw_metrics)(run_dir)
    else:
        _draw_metrics(run_dir)
