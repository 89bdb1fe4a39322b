"""Resuming ``mode: both``: a run SIGKILLed after a checkpoint and restarted with the same
command trains exactly the experiences, step for step, that an uninterrupted run trains.

The explorer runs one step ahead (``sync_offset: 1``), so at the checkpoint it has usually
written a step the trainer has not read; the checkpoint carries those experiences
(``global_step_N/explorer/experiences.bin``) and the explorer's task-set position. Every train
step records the run ids of its experiences (``batch/experience_ids`` in ``metrics.jsonl``),
which is what the runs are compared on. Settings that would make a checkpoint mean something
else are refused before anything starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_process import kill_when, preempt_after_steps
from cli_process import run_to_end as run_cli_to_end

pytest.importorskip("verl")
pytest.importorskip("ray")

from trinity.launcher.run.clock import required_version  # noqa: E402

TASKS = 8
BATCH = 4
REPEAT = 4
EPOCHS = 3
STEPS = TASKS * EPOCHS // BATCH  # 6


@pytest.fixture
def write_config(tmp_path, both_config):
    """``write(name, **sections) -> path``: the shared mode-both config on 8 tasks x 3 epochs,
    4 per step, the explorer one step ahead (``sync_offset: 1``)."""

    def write(name: str, **over) -> Path:
        tasks = tmp_path / "tasks.jsonl"
        if not tasks.exists():
            rows = [{"question": f"{a}+{a + 1}=", "answer": str(2 * a + 1)} for a in range(TASKS)]
            tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
        config = both_config(
            tmp_path,
            name,
            tasks,
            project="resume",
            algorithm={"repeat_times": REPEAT, **over.pop("algorithm", {})},
            buffer={"batch_size": BATCH, "total_epochs": EPOCHS, **over.pop("buffer", {})},
            synchronizer={"sync_offset": 1, **over.pop("synchronizer", {})},
            monitor={"monitor_type": "tensorboard"},
            **over,
        )
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    return write


def job_dir(tmp_path: Path, name: str) -> Path:
    return tmp_path / "ckpt" / "resume" / name


def run_to_end(config: Path, log: Path) -> str:
    out = run_cli_to_end(config, log)
    assert "Mode both finished" in out
    return out


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_killed_run_resumes_without_losing_or_repeating_experiences(tmp_path, write_config):
    """Compared with what an uninterrupted run trains: each step's run ids, and the model
    versions the sync schedule gives (``required_version``; that an uninterrupted run follows
    it is ``test_both_mode``'s sync-schedule test, ``memory-1-1`` being this schedule)."""
    # the run, SIGKILLed (with its Ray processes) as soon as a checkpoint exists
    config = write_config("killed")
    run = job_dir(tmp_path, "killed")
    latest = run / "latest_checkpointed_iteration.txt"
    out = kill_when(config, tmp_path / "killed.log", latest.exists)
    ckpt = int(latest.read_text())
    assert 2 <= ckpt < STEPS, f"killed at checkpoint {ckpt}, not mid-run"

    # what the checkpoint holds of the explorer: its position and exactly the experiences of
    # the steps it ran ahead of the trainer
    state_dir = run / f"global_step_{ckpt}" / "explorer"
    state = json.loads((state_dir / "explorer_state.json").read_text())
    ahead = state["explorer"]["step"]
    assert ahead >= ckpt
    assert state["explorer"]["taskset"]["current_index"] == ahead * BATCH
    from trinity.common.experience import Experience

    data = (state_dir / "experiences.bin").read_bytes()
    saved = Experience.deserialize_many(data) if data else []
    assert sorted(e.eid.rid for e in saved) == sorted(
        f"{s}/{t}/{r}"
        for s in range(ckpt + 1, ahead + 1)
        for t in range(BATCH)
        for r in range(REPEAT)
    )

    # the same command again
    out = run_to_end(config, tmp_path / "resumed.log")
    assert f"Resuming mode both from global_step_{ckpt}" in out
    assert f"{len(saved)} experiences explored but not trained" in out
    resumed = metrics(run)
    assert [r["step"] for r in resumed] == list(range(1, STEPS + 1))  # none twice, none missing
    assert latest.read_text() == str(STEPS)

    trained: list[str] = []
    for got in resumed:
        ids = got["batch/experience_ids"].split()
        # exactly what an uninterrupted run trains at this step: its own explore step's ids
        assert ids == sorted(f"{got['step']}/{t}/{r}" for t in range(BATCH) for r in range(REPEAT))
        trained += ids
        assert got["batch/size"] == BATCH * REPEAT
        # every record is whole: the explorer's metrics of the steps it ran before the kill
        # came back from the checkpoint
        assert {"rollout/reward/mean", "actor/loss", "time/explore_step"} <= set(got)
    assert len(trained) == len(set(trained)) == STEPS * BATCH * REPEAT

    # the experiences carried over were trained as they were generated (not generated again
    # after the restart): the same model versions as without the kill
    versions = [r["sample/model_version/max"] for r in resumed]
    expected = [required_version(s, 1, 1) for s in range(1, STEPS + 1)]
    for s in range(1, STEPS + 1):
        if s == ckpt + 1 and ahead == ckpt:  # regenerated after the restart, with weights ckpt
            assert versions[s - 1] == ckpt
        else:
            assert versions[s - 1] == expected[s - 1], (s, versions)


@pytest.mark.slow
def test_a_killed_fully_async_run_resumes_exactly(tmp_path, write_config):
    """``sync_style: fully_async`` (the explorer up to 2 batches ahead, pushes under requests
    in flight), SIGKILLed once a checkpoint exists: the same command resumes, and every step
    trains exactly its explore step's experiences, none twice, none missing; none of them was
    generated by weights more than 2 train steps older than the step that trains it."""
    config = write_config("async", synchronizer={"sync_style": "fully_async", "sync_offset": 0})
    run = job_dir(tmp_path, "async")
    latest = run / "latest_checkpointed_iteration.txt"
    kill_when(config, tmp_path / "async-killed.log", latest.exists)
    ckpt = int(latest.read_text())
    assert 2 <= ckpt < STEPS, f"killed at checkpoint {ckpt}, not mid-run"
    out = run_to_end(config, tmp_path / "async-resumed.log")
    assert f"Resuming mode both from global_step_{ckpt}" in out
    resumed = metrics(run)
    assert [r["step"] for r in resumed] == list(range(1, STEPS + 1))
    trained: list[str] = []
    for got in resumed:
        ids = got["batch/experience_ids"].split()
        assert ids == sorted(f"{got['step']}/{t}/{r}" for t in range(BATCH) for r in range(REPEAT))
        trained += ids
        assert got["step"] - 1 - got["sample/model_version/min"] <= 2, got
    assert len(trained) == len(set(trained)) == STEPS * BATCH * REPEAT


@pytest.mark.slow
@pytest.mark.parametrize("style", ["fixed", "fully_async"])
def test_a_preemption_signal_checkpoints_and_the_same_command_resumes(
    tmp_path, write_config, style
):
    """SIGTERM to ``trinity-launch`` (what Kubernetes and spot instances send) in the middle of
    a run with no periodic checkpoint, with the explorer one step ahead (``fixed``,
    ``sync_offset: 1``) or up to 2 batches ahead with pushes under requests in flight
    (``fully_async``): the explore step in flight is abandoned, the train step in progress
    ends, a checkpoint of that step (with the experiences explored and not trained) is written,
    the command exits 75 within the grace period; the same command resumes from that step and
    trains every experience exactly once, each step its own explore step's. (Modes colocate,
    explore and train, and Slurm's SIGUSR1: ``test_colocate.py``, ``test_explore_resume.py``,
    ``test_train_mode.py``; every sync style with fakes: ``test_coordinator.py``.)"""
    sync = {"sync_style": style, "sync_offset": 1 if style == "fixed" else 0}
    config = write_config(f"term-{style}", synchronizer=sync, trainer={"save_interval": 0})
    run = job_dir(tmp_path, f"term-{style}")
    _, step = preempt_after_steps(config, tmp_path / f"term-{style}.log", run, 2, STEPS)

    out = run_to_end(config, tmp_path / f"term-{style}-resumed.log")
    assert f"Resuming mode both from global_step_{step}" in out
    resumed = metrics(run)
    assert [r["step"] for r in resumed] == list(range(1, STEPS + 1))  # none twice, none missing
    trained = [rid for r in resumed for rid in r["batch/experience_ids"].split()]
    for got in resumed:
        ids = got["batch/experience_ids"].split()
        assert ids == sorted(f"{got['step']}/{t}/{r}" for t in range(BATCH) for r in range(REPEAT))
        if style == "fully_async":  # the staleness bound holds across the stop as well
            assert got["step"] - 1 - got["sample/model_version/min"] <= 2, got
    assert len(trained) == len(set(trained)) == STEPS * BATCH * REPEAT


def fake_checkpoint(run: Path, step: int, explorer_state: dict | None) -> None:
    step_dir = run / f"global_step_{step}"
    step_dir.mkdir(parents=True)
    if explorer_state is not None:
        (step_dir / "explorer").mkdir()
        (step_dir / "explorer" / "explorer_state.json").write_text(json.dumps(explorer_state))
        (step_dir / "explorer" / "experiences.bin").write_bytes(b"")
    (run / "latest_checkpointed_iteration.txt").write_text(str(step))


def fingerprint(tmp_path: Path, batch_size: int = BATCH) -> dict:
    return {
        "buffer.explorer_input.tasksets": [
            {"name": "arithmetic", "path": str(tmp_path / "tasks.jsonl"), "tasks": TASKS}
        ],
        "buffer.batch_size": batch_size,
        "buffer.train_batch_size": batch_size * REPEAT,
        "algorithm.repeat_times": REPEAT,
        "algorithm.algorithm_type": "grpo",
        "buffer.trainer_input.experience_buffer.storage_type": "queue",
    }


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no explorer state", "without the explorer's state (explorer/explorer_state.json)"),
        ("other batch size", "buffer.batch_size: 8 then, 4 now"),
        ("sql buffer", "resumes only with a FIFO queue"),
    ],
)
def test_checkpoints_that_cannot_be_resumed_are_refused(
    tmp_path, write_config, capsys, case, message
):
    """Refused before anything starts (exit status 2), naming what differs and the way out."""
    from trinity.launcher.cli import main

    over: dict = {}
    if case == "sql buffer":
        over["buffer"] = {
            "trainer_input": {
                "experience_buffer": {
                    "name": "exps",
                    "storage_type": "sql",
                    "path": str(tmp_path / "exps.db"),
                }
            }
        }
    config = write_config("again", **over)
    state = None
    if case != "no explorer state":
        state = {
            "version": 1,
            "trainer_step": 2,
            "explorer": {"step": 2, "taskset": None},
            "fingerprint": fingerprint(tmp_path, batch_size=8),
            "metrics": {},
            "experiences": 0,
        }
    fake_checkpoint(job_dir(tmp_path, "again"), 2, state)
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "global_step_2" in err
    assert "continue_from_checkpoint: false" in err


def test_a_matching_fingerprint_passes_the_checks(tmp_path, write_config):
    """The counterpart of the refusals: the same settings are accepted (checked without
    starting the run)."""
    from trinity.launcher.checkpoint import CheckpointSettings, RunCheckpointer
    from trinity.launcher.cli import prepare_config
    from trinity.launcher.explorer import Explorer
    from trinity.launcher.modes import LaunchInputError

    config, _ = prepare_config(str(write_config("same")))
    explorer = Explorer(config, monitor=None)
    settings = CheckpointSettings.from_config(config, explorer)
    saved = json.loads(json.dumps(settings.fingerprint))
    assert saved == fingerprint(tmp_path)

    def state(fingerprint: dict) -> dict:
        return {
            "version": 1,
            "trainer_step": 2,
            "explorer": {"step": 2, "taskset": None},
            "fingerprint": fingerprint,
            "metrics": {},
            "experiences": 0,
        }

    run = job_dir(tmp_path, "same")
    fake_checkpoint(run, 2, state(saved))
    point = RunCheckpointer(settings).find()
    assert point is not None and (point.train_step, point.explore_step) == (2, 2)
    import shutil

    shutil.rmtree(run)
    fake_checkpoint(run, 2, state(dict(saved, **{"algorithm.repeat_times": 2})))
    with pytest.raises(LaunchInputError, match="algorithm.repeat_times: 2 then, 4 now"):
        RunCheckpointer(settings).find()


def _exps(step: int, n: int) -> list:
    from trinity.common.experience import EID, Experience

    return [
        Experience(tokens=[1, 2, 3], prompt_length=1, reward=0.0, eid=EID(batch=step, task=i))
        for i in range(n)
    ]


def test_the_ledger_keeps_what_the_trainer_has_not_read_in_queue_order():
    from trinity.launcher.checkpoint import ExperienceLedger

    ledger = ExperienceLedger()
    first, second = _exps(1, 4), _exps(2, 4)
    ledger.add(first)
    ledger.add(second)
    ledger.consume(first[:3])
    assert ledger.pending() == [first[3], *second]
    # FIFO: reading second[1] means first[3] and second[0] were read (and, say, dropped)
    ledger.consume([second[1]])
    assert ledger.pending() == second[2:]
    ledger.consume(_exps(9, 2))  # never written here: nothing changes
    assert len(ledger) == 2


def test_the_pipeline_shows_what_it_is_about_to_write_before_writing_it():
    import asyncio

    from trinity.buffer.pipelines import ExperiencePipeline

    written: list = []
    seen: list = []

    class Writer:
        def write(self, exps):
            written.extend(exps)

    pipeline = ExperiencePipeline([], writer=Writer())
    exps = _exps(1, 3)
    asyncio.run(
        pipeline.process(exps, before_write=lambda out, m: seen.append((list(out), len(written))))
    )
    assert seen == [(exps, 0)] and written == exps


def test_metrics_after_the_checkpoint_are_dropped(tmp_path):
    from trinity.launcher.checkpoint import truncate_metrics

    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "x": s}) for s in (1, 2, 3, 4)]
    path.write_text("\n".join(lines) + '\n{"step": 5, "x"')  # a torn last line
    assert truncate_metrics(str(path), 2) == 3
    assert path.read_text() == "\n".join(lines[:2]) + "\n"
    assert truncate_metrics(str(path), 2) == 0
    assert truncate_metrics(str(tmp_path / "none.jsonl"), 2) == 0


@pytest.mark.slow
def test_a_killed_lora_run_resumes_its_adapter(tmp_path, write_config):
    """A LoRA run (the engines serving base + adapter, adapter-only syncs) SIGKILLed once a
    checkpoint exists: the same command resumes from it, trains every step once, and the
    engines serve the resumed adapter -- the rollouts' log-probs of every step are the
    trainer's own (``rollout_corr/log_ppl_abs_diff`` near 0; the base model, or a fresh
    adapter, would be far off)."""
    config = write_config(
        "lora",
        model={"lora_configs": [{"lora_rank": 8, "lora_alpha": 16}]},
        algorithm={
            "optimizer": {"lr": 2e-2},
            "kl_loss_fn": "k3",
            "rollout_correction": {"rollout_is": "token", "rollout_is_threshold": 2.0},
        },
        synchronizer={"sync_offset": 0},
    )
    run = job_dir(tmp_path, "lora")
    latest = run / "latest_checkpointed_iteration.txt"
    kill_when(config, tmp_path / "killed.log", latest.exists)
    ckpt = int(latest.read_text())
    assert 2 <= ckpt < STEPS, f"killed at checkpoint {ckpt}, not mid-run"
    actor = run / f"global_step_{ckpt}" / "actor"
    assert not list(actor.glob("huggingface/*.safetensors"))  # the checkpoint: adapter only

    out = run_to_end(config, tmp_path / "resumed.log")
    assert f"Resuming mode both from global_step_{ckpt}" in out
    rows = metrics(run)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    adapter = {r["sync/weight_bytes"] for r in rows if "sync/weight_bytes" in r}
    assert len(adapter) == 1 and adapter.pop() < 200_000  # the adapter, not the model
    diffs = [r["rollout_corr/log_ppl_abs_diff"] for r in rows]
    assert max(diffs) < 1e-3, diffs
    # ... and that policy is not the base model's: the KL to the reference (the base, the
    # adapter disabled) grew, so serving the base would have shown in the check above
    assert rows[0]["actor/kl_loss"] == 0.0 < rows[-1]["actor/kl_loss"]
