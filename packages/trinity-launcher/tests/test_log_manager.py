"""Trinity-RFT 0.6's ``trinity.manager.log_manager.LogManager`` (and its explorer paths)."""

from __future__ import annotations

from unittest import mock

import pytest

from trinity.manager.log_manager import LogManager


def _printed(mock_print) -> list[str]:
    return [call.args[0] for call in mock_print.call_args_list]


def test_log_manager_tracks_filters_and_follows_rotation(tmp_path):
    log = tmp_path / "explorer.log"
    log.write_text("INFO start\nDEBUG detail\nERROR failed\nTraceback line\n")
    (tmp_path / "trainer.log").write_text("INFO other\n")
    with mock.patch("builtins.print") as out:
        manager = LogManager(
            str(tmp_path), keyword="explorer", min_level="INFO", last_n_lines=2, color_output=False
        )
        manager.scan_new_files()
        assert list(manager.trackers) == [str(log.resolve())]
        assert _printed(out) == [
            "[explorer.log] ERROR failed",
            "[explorer.log] Traceback line",
            f"[INFO] Started tracking: {log.resolve()}",
        ]
        tracker = manager.trackers[str(log.resolve())]
        with open(log, "a") as f:
            f.write("DEBUG hidden\nWARN shown\nits traceback\npartial")
        lines = tracker.read_new_lines()
        assert lines == ["DEBUG hidden", "WARN shown", "its traceback"]  # not the partial line
        assert [line for line in lines if tracker.should_display(line)] == [
            "WARN shown",
            "its traceback",  # a line without a level goes with its record
        ]
        out.reset_mock()
        log.write_text("INFO rotated\n")  # shorter: rotated
        assert tracker.read_new_lines() == []
        assert "Detected file rotation" in _printed(out)[0]
        assert _printed(out)[-1] == "[explorer.log] INFO rotated"
        manager.stop()
        assert manager.trackers == {}


def test_log_manager_search_prints_matches_with_context(tmp_path):
    (tmp_path / "run.log").write_text("".join(f"INFO line {i}\n" for i in range(20)))
    with mock.patch("builtins.print") as out:
        LogManager(str(tmp_path), search_pattern="line 10", color_output=False).scan_new_files()
    printed = _printed(out)
    assert any(p.startswith(">> ") and "line 10" in p for p in printed)
    assert sum("[run.log] INFO line" in p for p in printed) == 11  # 5 either side


def test_trinity_rft_explorer_runner_path_refuses_clearly():
    from trinity.explorer.workflow_runner import Status, WorkflowRunner

    assert Status(completed_runs=1, total_runs=2).metrics == []
    with pytest.raises(NotImplementedError, match="run_task_async"):
        WorkflowRunner(None, 0)
