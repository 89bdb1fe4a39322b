"""``trinity log``: the last lines, then what the run appends (new files too), filtered by
level with continuation lines kept with their record; ``--search-pattern`` searches and exits;
``--config`` finds the run's log directory; bad options exit 2 naming them."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from trinity.launcher.log_follow import LogFollower, LogFollowError, level_of


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def _wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_follow_shows_the_last_lines_then_what_is_appended_at_the_level_asked(tmp_path):
    run = tmp_path / "run.log"
    run.write_text(
        "10:00:00 INFO trinity: old 1\n10:00:01 WARNING trinity: old 2\n"
        "10:00:02 INFO trinity: old 3\n"
    )
    out = io.StringIO()
    follower = LogFollower(
        str(tmp_path), level="WARNING", last_n_lines=2, color=False, out=out, poll_s=0.05
    )
    stop = threading.Event()
    thread = threading.Thread(target=follower.follow, args=(stop,))
    thread.start()
    try:
        _wait_for(lambda: "old 2" in out.getvalue())
        _append(run, "10:00:03 INFO trinity: hidden\nTraceback of the hidden record\n")
        _append(run, "10:00:04 ERROR trinity: boom\nTraceback (most recent call last):\n  ")
        _wait_for(lambda: "boom" in out.getvalue())
        _append(run, 'File "x.py", line 1\n')  # the rest of the unfinished line
        # a second file appears (an engine's log): followed from its start, lines prefixed
        (tmp_path / "engine.log").write_text("10:00:05 WARNING vllm: slow\n")
        _wait_for(lambda: "slow" in out.getvalue())
    finally:
        stop.set()
        thread.join(timeout=10)
    lines = out.getvalue().splitlines()
    assert lines[0] == "10:00:01 WARNING trinity: old 2"  # of the last 2, the INFO is hidden
    assert "10:00:04 ERROR trinity: boom" in lines
    assert "Traceback (most recent call last):" in lines  # kept with its ERROR record
    # a line completed across two writes (prefixed once a second file exists)
    assert any(line.endswith('  File "x.py", line 1') for line in lines)
    assert not any("hidden" in line for line in lines)  # the INFO record and its traceback
    assert "[engine.log] 10:00:05 WARNING vllm: slow" in lines


def test_search_prints_every_matching_line_and_keyword_picks_files(tmp_path):
    (tmp_path / "run.log").write_text("a step 1\nb step 2\nc\n")
    (tmp_path / "engine_0.log").write_text("engine step 9\n")
    out = io.StringIO()
    assert LogFollower(str(tmp_path), color=False, out=out).search("step") == 3
    assert out.getvalue().splitlines() == [
        "[engine_0.log] engine step 9",
        "[run.log] a step 1",
        "[run.log] b step 2",
    ]
    out = io.StringIO()
    LogFollower(str(tmp_path), keyword="engine", out=out).search("step")
    assert out.getvalue() == "engine step 9\n"


def test_levels_and_bad_options():
    assert level_of("12:00:00 WARN x") == "WARNING"
    assert level_of("12:00:00 ERROR x") == "ERROR"
    assert level_of("  at frame") is None
    with pytest.raises(LogFollowError, match="allowed: DEBUG, INFO"):
        LogFollower(".", level="LOUD")
    with pytest.raises(LogFollowError, match="no such log directory"):
        LogFollower("/nonexistent/trinity-logs")


def test_the_command_finds_the_runs_logs_from_its_config(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump({"project": "p", "name": "n", "checkpoint_root_dir": str(tmp_path / "ckpt")})
    )
    log_dir = tmp_path / "ckpt" / "p" / "n" / "log"
    log_dir.mkdir(parents=True)
    (log_dir / "run.log").write_text("10:00:00 INFO trinity: Train step 3 done\n")
    trinity = str(Path(sys.executable).parent / "trinity")
    found = subprocess.run(
        [trinity, "log", "--config", str(config), "-p", "Train step"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout == "10:00:00 INFO trinity: Train step 3 done\n"
    bad = subprocess.run([trinity, "log"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--log-dir DIR or --config CONFIG" in bad.stderr
