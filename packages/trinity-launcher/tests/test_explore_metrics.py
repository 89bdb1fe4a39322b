"""What the explorer reports without Ray: the learning-signal metrics of a step's experiences
(clipped responses, reward groups with identical rewards), the warning when a run cannot learn,
and the elapsed time / ETA of the progress lines. Hand-computed values, fake clocks."""

from __future__ import annotations

import io
import logging

import pytest
import torch

from trinity.common.experience import EID, Experience
from trinity.launcher.explore_metrics import STALL_STEPS, LearningSignalWatch, rollout_metrics
from trinity.launcher.progress import (
    ProgressReporter,
    SummaryCadence,
    TrainStepPrinter,
    format_duration,
    format_step_line,
)


def exp(task, run, reward, clipped=False, response=2) -> Experience:
    return Experience(
        tokens=torch.arange(2 + response),
        prompt_length=2,
        reward=reward,
        eid=EID(batch=1, task=task, run=run),
        truncate_status="response_truncated" if clipped else None,
    )


# ---------------------------------------------------------------------- metrics
def test_clip_ratio_is_the_share_of_responses_cut_at_the_limit():
    exps = [exp(0, 0, 1.0, clipped=True), exp(0, 1, 0.0), exp(1, 0, 0.0, clipped=True)]
    exps.append(exp(1, 1, 0.0))
    assert rollout_metrics(exps)["rollout/response_length/clip_ratio"] == 0.5
    prompt_cut = Experience(
        tokens=torch.arange(3), prompt_length=2, truncate_status="prompt_truncated"
    )
    assert rollout_metrics([prompt_cut])["rollout/response_length/clip_ratio"] == 0.0


def test_in_flight_updates_count_versions_and_time_paused():
    """Experiences whose request spanned a weight update (``sync_style: fully_async``): the
    oldest and newest versions of the step, how many spanned one, how many were frozen while
    the weights loaded and for how long."""
    plain = [exp(0, r, 1.0) for r in range(2)]
    for e in plain:
        e.model_version = 3
    spanned = [exp(1, r, 0.0) for r in range(3)]
    for e, (last, paused) in zip(spanned, [(4, 0.2), (5, 0.6), (4, None)], strict=True):
        e.model_version = 3
        e.info = {"model_version_last": last, **({"paused_s": paused} if paused else {})}
    got = rollout_metrics(plain + spanned)
    assert got["rollout/model_version/min"] == 3 and got["rollout/model_version"] == 3
    assert got["rollout/in_flight_updated"] == 3 and got["rollout/model_version/last_max"] == 5
    assert got["rollout/paused_requests"] == 2  # the third one's engine loads between calls
    assert got["rollout/time_paused/mean"] == pytest.approx(0.4)
    assert got["rollout/time_paused/max"] == pytest.approx(0.6)
    quiet = rollout_metrics(plain)
    assert quiet["rollout/paused_requests"] == 0 and "rollout/time_paused/max" not in quiet


def test_identical_reward_groups_are_counted_per_task():
    exps = [
        *(exp(0, r, 1.0) for r in range(4)),  # all 1: identical
        *(exp(1, r, 0.0) for r in range(4)),  # all 0: identical
        *(exp(2, r, float(r % 2)) for r in range(4)),  # 0/1: a signal
        exp(3, 0, 0.5),  # one run: no group
        exp(4, 0, None),  # no reward: left out
        exp(4, 1, 0.5),
    ]
    got = rollout_metrics(exps)
    assert got["rollout/reward_groups"] == 3
    assert got["rollout/identical_reward_groups"] == pytest.approx(2 / 3)
    # repeat_times 1: no group of two runs, no ratio
    single = rollout_metrics([exp(t, 0, 1.0) for t in range(3)])
    assert "rollout/identical_reward_groups" not in single
    assert "rollout/reward_groups" not in single


def test_the_same_task_in_another_step_is_another_group():
    a, b = exp(0, 0, 1.0), exp(0, 1, 0.0)
    b.eid = EID(batch=2, task=0, run=1)
    assert "rollout/reward_groups" not in rollout_metrics([a, b])


# ---------------------------------------------------------------------- the warning
def stalled_step(clip=1.0, identical=1.0) -> dict:
    return {
        "rollout/response_length/clip_ratio": clip,
        "rollout/identical_reward_groups": identical,
        "rollout/reward/mean": 0.25,
    }


def test_a_run_that_cannot_learn_is_warned_about_once_then_counted(caplog):
    watch = LearningSignalWatch(max_response_tokens=2)
    caplog.set_level(logging.WARNING, logger="trinity.launcher.explore_metrics")
    counts = [watch.update(stalled_step()) for _ in range(STALL_STEPS - 1)]
    assert caplog.records == []
    assert counts[-1] == {
        "rollout/all_clipped_steps": STALL_STEPS - 1,
        "rollout/all_identical_reward_steps": STALL_STEPS - 1,
    }
    watch.update(stalled_step())  # the N-th step in a row: one warning per condition
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "stopped at the response limit (2 tokens)" in messages[0]
    assert "max_response_tokens" in messages[0] and "rollout/all_clipped_steps" in messages[0]
    assert "same reward in all of its runs (mean reward 0.25)" in messages[1]
    assert "advantages are all zero" in messages[1]
    for _ in range(10):  # no more warnings; the metrics keep counting
        counts = watch.update(stalled_step())
    assert len(caplog.records) == 2
    assert counts["rollout/all_clipped_steps"] == STALL_STEPS + 10


def test_a_step_with_a_signal_resets_its_count():
    watch = LearningSignalWatch(steps=3, log=logging.getLogger("test.signal"))
    for _ in range(2):
        watch.update(stalled_step())
    got = watch.update(stalled_step(clip=0.75, identical=1.0))
    assert got == {"rollout/all_clipped_steps": 0, "rollout/all_identical_reward_steps": 3}
    assert watch.warned == {"rollout/all_identical_reward_steps"}
    # a step that reports no ratio (no group of two runs) leaves the count as it is
    got = watch.update({"rollout/response_length/clip_ratio": 1.0})
    assert got == {"rollout/all_clipped_steps": 1, "rollout/all_identical_reward_steps": 3}


def test_the_watch_follows_rollout_metrics():
    watch = LearningSignalWatch(steps=2, log=logging.getLogger("test.signal"))
    exps = [exp(t, r, 0.0, clipped=True) for t in range(2) for r in range(3)]
    for _ in range(2):
        got = watch.update(rollout_metrics(exps))
    assert got == {"rollout/all_clipped_steps": 2, "rollout/all_identical_reward_steps": 2}
    assert len(watch.warned) == 2
    with pytest.raises(ValueError, match="steps=0"):
        LearningSignalWatch(steps=0)


# ---------------------------------------------------------------------- elapsed time and ETA
def test_format_duration():
    assert [format_duration(s) for s in (0, 5.9, 59, 60, 61, 72, 3599)] == [
        "0s",
        "5s",
        "59s",
        "1m00s",
        "1m01s",
        "1m12s",
        "59m59s",
    ]
    assert format_duration(3725) == "1h02m" and format_duration(-3) == "0s"


def test_step_lines_end_with_elapsed_time_and_eta():
    metrics = {"rollout/tasks": 2, "time/explore_step": 1.0}
    line = format_step_line(81, 150, metrics, elapsed=72, eta=61)
    assert line.startswith("explore step 81/150: 2 tasks")
    assert line.endswith(", elapsed 1m12s, ETA 1m01s")
    assert format_step_line(1, None, metrics).endswith("1.00 s")  # no times given: none shown


def test_reporter_lines_carry_elapsed_time_and_eta(monkeypatch):
    monkeypatch.setenv("TRINITY_PROGRESS_INTERVAL", "2")
    now = [0.0]
    out = io.StringIO()
    progress = ProgressReporter(
        total_steps=4, stream=out, clock=lambda: now[0], cadence=SummaryCadence(clock=lambda: 0)
    )
    now[0] = 50.0
    progress.start()  # engines took 50 s: the run's clock starts now
    for step in range(1, 5):
        now[0] += 10.0
        progress.step(step, {"rollout/tasks": 2, "time/explore_step": 10.0})
    progress.close()
    lines = out.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "explore step 1/4",
        "explore step 3/4",
        "explore step 4/4",
    ]
    assert lines[0].endswith(", elapsed 10s, ETA 30s")
    assert lines[1].endswith(", elapsed 30s, ETA 10s")
    assert lines[2].endswith(", elapsed 40s")  # the last step: nothing left


def test_a_line_written_at_close_keeps_the_time_of_its_step(monkeypatch):
    monkeypatch.setenv("TRINITY_PROGRESS_INTERVAL", "10")
    now = [0.0]
    out = io.StringIO()
    progress = ProgressReporter(stream=out, clock=lambda: now[0], cadence=SummaryCadence())
    for step in (1, 2):
        now[0] += 5.0
        progress.step(step, {"rollout/tasks": 2, "time/explore_step": 5.0})
    now[0] += 100.0  # the run's end comes later: the pending line says when step 2 ended
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("explore step 2:") and lines[-1].endswith(", elapsed 10s")


def test_train_step_lines_carry_elapsed_time_and_eta():
    now = [0.0]
    out = io.StringIO()
    printer = TrainStepPrinter(stream=out, total_steps=10, clock=lambda: now[0])
    now[0] = 4.0
    printer.step(1, {"actor/loss": 0.5, "time/step": 4.0})
    printer.close()
    assert out.getvalue() == "train step 1/10: loss=0.5 step=4, elapsed 4s, ETA 36s\n"
    out = io.StringIO()
    printer = TrainStepPrinter(stream=out, clock=lambda: 0.0)  # total unknown: no ETA
    printer.step(3, {})
    assert out.getvalue() == "train step 3: elapsed 0s\n"
