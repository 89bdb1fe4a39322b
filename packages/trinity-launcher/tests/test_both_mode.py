"""``mode: both`` through the real command line: explorer (transformers engine in a Ray actor,
workflow runners) and trainer (verl FSDP2 on CPU) concurrently, GRPO on the arithmetic task set,
weights synchronised through memory or checkpoints every ``sync_interval`` steps, the explorer
``sync_offset`` steps ahead. The model version of every step's experiences shows the schedule."""

from __future__ import annotations

import json
import threading

import pytest
import yaml

pytest.importorskip("verl")
pytest.importorskip("ray")

from trinity.launcher.run.clock import required_version  # noqa: E402


def test_step_merger_holds_a_step_until_its_evaluation_is_logged():
    """The trainer may finish step 2 while step 2's evaluation still runs: the step's record
    waits, so the file gets one record per step, eval metrics included."""
    from trinity.launcher.run.records import StepMerger

    class Sink:
        def __init__(self):
            self.records = []

        def log(self, metrics, step):
            self.records.append((step, dict(metrics)))

    sink = Sink()
    merger = StepMerger(sink)
    merger.log({"rollout/reward": 0.1}, 1)
    merger.log({"actor/loss": 1.0}, 1)
    merger.flush(1)
    merger.log({"rollout/reward": 0.2}, 2)
    merger.hold = 2  # the explorer evaluates at step 2
    merger.log({"actor/loss": 0.9}, 2)
    merger.flush(2)  # the trainer is done with step 2 first
    assert [step for step, _ in sink.records] == [1]
    merger.log({"eval/x/accuracy": 0.5}, 2)
    merger.hold = None
    merger.flush(2)
    assert sink.records[1] == (
        2,
        {"rollout/reward": 0.2, "actor/loss": 0.9, "eval/x/accuracy": 0.5},
    )
    merger.log({"rollout/reward": 0.3}, 3)
    merger.hold = 3
    merger.flush()  # the end of the run writes everything
    assert [step for step, _ in sink.records] == [1, 2, 3]


@pytest.fixture
def run_both(tmp_path, both_config, run_cli, arithmetic_tasks):
    """``run(name, **synchronizer) -> (metrics rows, run dir)``: mode both through the CLI on 8
    tasks x 2 epochs, 4 per step (the run ends when the task set does: the explorer closes its
    writer, the trainer drains the queue and stops)."""

    def run(name: str, expect_ok: bool = True, algorithm: dict | None = None, **sync):
        tasks = arithmetic_tasks(tmp_path, 8)
        config = both_config(
            tmp_path,
            name,
            tasks,
            buffer={"total_epochs": 2},
            synchronizer=sync,
            algorithm=algorithm or {},
        )
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        done = run_cli(path)
        if not expect_ok:
            return done
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
        assert "Mode both finished" in done.stdout
        run_dir = tmp_path / "ckpt" / "both" / name
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines], run_dir

    def rerun(name: str) -> str:
        """The same config again; its whole output."""
        done = run_cli(tmp_path / f"{name}.yaml")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
        return done.stdout + done.stderr

    run.rerun = rerun
    return run


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "interval", "offset"),
    [("memory", 1, 0), ("checkpoint", 2, 0), ("memory", 1, 1)],
)
def test_explorer_and_trainer_follow_the_sync_schedule(run_both, method, interval, offset):
    rows, run = run_both(
        f"{method}-{interval}-{offset}",
        sync_method=method,
        sync_interval=interval,
        sync_offset=offset,
    )
    # one record per step, holding explorer and trainer metrics of that step
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        assert {"rollout/reward/mean", "actor/loss", "time/explore_step", "time/train_step"} <= set(
            r
        )
        assert r["batch/size"] == 16  # 4 tasks x 4 repeats
    # the weights each explore step generated with
    versions = [r["rollout/model_version"] for r in rows]
    assert versions == [required_version(e, interval, offset) for e in range(1, 5)]
    # ... and what the trainer saw: the same experiences
    assert [r["sample/model_version/max"] for r in rows] == versions
    synced = [r["step"] for r in rows if "time/sync" in r]
    assert synced == [s for s in range(1, 5) if s % interval == 0]
    assert (run / "latest_checkpointed_iteration.txt").read_text() == "4"
    if (method, interval, offset) == ("memory", 1, 0):
        # the same command again: finished under the same settings, it starts nothing
        again = run_both.rerun(f"{method}-{interval}-{offset}")
        assert "Nothing left to do: this run already finished (mode both, step 4" in again
        assert "Starting Ray" not in again
        assert len((run / "metrics.jsonl").read_text().splitlines()) == 4
    if method == "checkpoint":  # the engines loaded the weights the trainer wrote
        for step in synced:
            hf = run / f"global_step_{step}" / "actor" / "huggingface"
            assert any(p.suffix == ".safetensors" for p in hf.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("style", ["dynamic_by_explorer", "dynamic_by_trainer"])
def test_dynamic_sync_styles(run_both, style):
    rows, _ = run_both(
        style,
        sync_method="memory",
        sync_style=style,
        sync_interval=2,
        sync_offset=1,
    )
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    versions = [r["rollout/model_version"] for r in rows]
    assert [r["sample/model_version/max"] for r in rows] == versions
    assert versions == sorted(versions)  # weights only move forward
    # never weights of a step not yet trained when the explore step ran (it started after
    # need(e) train steps were done, and used whatever the engines held)
    assert all(v <= e - 1 for e, v in enumerate(versions, start=1))
    if style == "dynamic_by_trainer":  # the trainer pushes every 2 train steps
        assert [r["step"] for r in rows if "time/sync" in r] == [2, 4]
        assert set(versions) <= {0.0, 2.0}
    else:  # the explorer asks after explore step 2, and takes what the trainer has then
        assert versions[:2] == [0.0, 0.0]
        asked = [r for r in rows if "sync/version" in r]
        assert [r["step"] for r in asked] == [3]
        assert asked[0]["sync/version"] == versions[2] == versions[3]


@pytest.mark.slow
@pytest.mark.parametrize("stale", ["drop", "correct"])
def test_staleness_control_bounds_what_the_trainer_takes(run_both, stale):
    """sync_interval 2 + sync_offset 1 lets explore step 3 run on version 0 while the trainer
    is at version 2 (staleness 2). With ``staleness_control`` and ``max_staleness: 1`` the
    trainer drops that whole batch and trains on the next one (version 2) instead: no trained
    experience is more than one version old, and the dropped batch is counted.

    With ``algorithm.rollout_correction`` set (token TIS), ``stale`` becomes ``correct``: the
    stale batch is trained, counted in ``sample/stale_corrected``, and reweighted by the
    importance weights between the version-0 rollout's log-probs and the trainer's."""
    algorithm = {
        "sample_strategy": "staleness_control",
        "sample_strategy_args": {"max_staleness": 1},
    }
    if stale == "correct":
        algorithm["rollout_correction"] = {"rollout_is": "token", "rollout_is_threshold": 2.0}
    rows, _ = run_both(
        f"staleness-{stale}",
        sync_method="memory",
        sync_interval=2,
        sync_offset=1,
        algorithm=algorithm,
    )
    # 4 explore steps; their versions follow the fixed schedule
    explored = {
        int(r["step"]): r["rollout/model_version"] for r in rows if "rollout/model_version" in r
    }
    assert (
        explored == {e: required_version(e, 2, 1) for e in range(1, 5)} == {1: 0, 2: 0, 3: 0, 4: 2}
    )
    trained = [r for r in rows if "actor/loss" in r]
    assert all(r["batch/size"] == 16 for r in trained)
    if stale == "drop":
        assert [r["step"] for r in trained] == [1, 2, 3]  # batch 3 was dropped, 4 trained
        assert [r["sample/stale_dropped"] for r in trained] == [0, 0, 16]
        assert [r["sample/staleness/max"] for r in trained] == [0, 1, 0]
        assert [r["sample/model_version/max"] for r in trained] == [0, 0, 2]
        assert all(not any(k.startswith("rollout_corr/") for k in r) for r in trained)
        return
    assert [r["step"] for r in trained] == [1, 2, 3, 4]  # nothing dropped
    assert [r["sample/stale_dropped"] for r in trained] == [0, 0, 0, 0]
    assert [r["sample/stale_corrected"] for r in trained] == [0, 0, 16, 0]
    assert [r["sample/staleness/max"] for r in trained] == [0, 1, 2, 1]
    for r in trained:
        assert 0 < r["rollout_corr/rollout_is_mean"] <= 2.0, r
    # (how far the weights spread depends on how far the policy moved: this run's learning
    # rate barely moves it; the learning-matrix variant grpo-token-tis checks the spread)


def test_a_checkpoint_mode_both_cannot_resume_from_is_refused_plainly(tmp_path, run_both):
    # a checkpoint without the explorer's side (mode train wrote it): exit status 2, nothing
    # started. Resuming proper and the other refusals are in test_both_resume.py.
    run = tmp_path / "ckpt" / "both" / "again"
    (run / "global_step_2").mkdir(parents=True)
    (run / "latest_checkpointed_iteration.txt").write_text("2")
    done = run_both("again", expect_ok=False, sync_method="memory")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert "without the explorer's state" in done.stderr
    assert "global_step_2" in done.stderr
    assert "Starting Ray" not in done.stdout + done.stderr


def test_the_trainer_input_queue_is_in_process_unless_the_config_says_otherwise(tmp_path):
    """Modes both and colocate write and read the queue in the driver: in-process (a derived
    value, on a copy), and a SQL experience buffer is opened by the driver too rather than by
    its ``sql-<name>`` actor (compat D9); a config that sets wrap_in_ray, or a pipeline output
    of its own, keeps what it says."""
    from trinity.common.config import load_config
    from trinity.launcher.run.plan import with_queue_in_process

    def exp_of(config):
        return config.buffer.trainer_input.experience_buffer

    config = load_config({"mode": "both"})
    local = with_queue_in_process(config)
    assert exp_of(local).wrap_in_ray is False
    assert "wrap_in_ray" not in exp_of(local).model_fields_set  # derived, not user-set
    assert exp_of(config).wrap_in_ray is True  # the caller's config is left as it was
    assert exp_of(local).name == exp_of(config).name
    assert local.model_dump() == {**config.model_dump(), "buffer": local.buffer.model_dump()}
    # only the path to the queue is copied: an object deepcopy refuses does not stop a run
    config.explorer.rollout_model.__dict__["lock"] = threading.Lock()
    assert exp_of(with_queue_in_process(config)).wrap_in_ray is False
    priority = {"storage_type": "priority_queue"}
    config = load_config({"buffer": {"trainer_input": {"experience_buffer": priority}}})
    assert exp_of(with_queue_in_process(config)).wrap_in_ray is False

    sql = {"storage_type": "sql", "path": f"sqlite:///{tmp_path}/x.db"}
    config = load_config({"buffer": {"trainer_input": {"experience_buffer": sql}}})
    assert exp_of(with_queue_in_process(config)).wrap_in_ray is False
    assert exp_of(config).wrap_in_ray is True

    asked = {"storage_type": "queue", "wrap_in_ray": True}
    sql_asked = {**sql, "wrap_in_ray": True}
    for exp in (asked, sql_asked):
        config = load_config({"buffer": {"trainer_input": {"experience_buffer": exp}}})
        assert with_queue_in_process(config) is config
    out = {"experience_pipeline": {"output": {"name": "out", "storage_type": "queue"}}}
    config = load_config({"data_processor": out})
    assert with_queue_in_process(config) is config
