"""The run layer's rules, driven with fake sides (``run_fakes.py``): no Ray, no vLLM, no verl.

Every sync style x ``sync_interval`` x ``sync_offset`` runs a whole run, then the same with
each failure: an explore step with little or no data (a half-failed step, the task set ending
before ``total_steps``), the explorer raising, the trainer raising, and a kill between a
step's commit and its checkpoint (followed by the resume). Each checks the weights every
explore step generated with, that nothing deadlocks (every run has a deadline), that every
experience is trained exactly once, and what a resume restores. The module runs in seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest
from run_fakes import (
    EndOfQueue,
    Engines,
    FakeExplorer,
    FakeQueue,
    FakeSupervisor,
    FakeSync,
    FakeTrainer,
    Injected,
)

from trinity.common.config import RUN_MODES
from trinity.launcher.checkpoint import (
    LATEST_FILE,
    CheckpointSettings,
    ExperienceLedger,
    RunCheckpointer,
)
from trinity.launcher.colocate import Colocation
from trinity.launcher.progress import JsonlMonitor
from trinity.launcher.run.clock import SyncClock, required_version
from trinity.launcher.run.coordinator import Coordinator, RunSettings
from trinity.launcher.run.policies import (
    SYNC_POLICIES,
    FixedSync,
    TakingTurns,
    Unsynced,
    sync_policy,
)
from trinity.launcher.run.records import DirectRecords, LazySink, StepMerger

STYLES = sorted(SYNC_POLICIES)
INTERVALS = (1, 2, 3)
OFFSETS = (0, 1, 2)
MATRIX = list(itertools.product(STYLES, INTERVALS, OFFSETS))
BATCH, REPEAT = 2, 2
DEADLINE = 20.0  # seconds: a run that takes longer is a deadlock


@dataclass
class Run:
    coordinator: Coordinator
    explorer: Optional[FakeExplorer]
    trainer: Optional[FakeTrainer]
    sync: Optional[FakeSync]
    engines: Engines
    checkpointer: RunCheckpointer
    job: Path

    def go(self) -> dict[str, Any]:
        async def main() -> dict[str, Any]:
            return await asyncio.wait_for(self.coordinator.run(), DEADLINE)

        try:
            return asyncio.run(main())
        finally:
            self.coordinator.records.flush()
            self.coordinator.records.sink.close()

    def versions(self) -> dict[int, int]:
        """explore step -> the version its experiences were generated with (the first one
        where new weights arrived mid-step: only with in-flight updates)."""
        assert self.explorer is not None
        out = {}
        for step, versions in self.explorer.generated.items():
            # a step never mixes versions, unless the engines take weights in flight
            assert len(versions) == 1 or self.engines.in_flight, (step, versions)
            out[step] = min(versions)
        return out

    def metric_steps(self) -> list[int]:
        path = self.job / "metrics.jsonl"
        return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def build(
    tmp_path: Path,
    style: str = "fixed",
    interval: int = 1,
    offset: int = 0,
    *,
    mode: str = "both",
    steps: int = 8,
    save_interval: int = 0,
    total_steps: Optional[int] = None,
    explorer: Optional[dict] = None,
    trainer: Optional[dict] = None,
    colocated: bool = False,
    eval_every: int = 0,
) -> Run:
    """A run of ``mode`` on fakes, resumed from ``tmp_path/run`` when it holds a state."""
    spec = RUN_MODES[mode]
    job = tmp_path / "run"
    engines = Engines()
    queue = FakeQueue()
    ledger = ExperienceLedger()
    lock = asyncio.Lock()
    # opened at the first record, after a resume cut the file back (as the run's sink is)
    sink = LazySink(lambda: JsonlMonitor(job / "metrics.jsonl"))
    records = StepMerger(sink) if spec.explores_and_trains else DirectRecords(sink)
    fx = ft = None
    if spec.explores:
        options = {"steps": steps, **(explorer or {})}
        fx = FakeExplorer(
            queue,
            engines,
            batch=BATCH,
            repeat=REPEAT,
            total_steps=total_steps,
            on_commit=ledger.on_commit,
            generation_lock=lock,
            monitor=records,
            eval_every=eval_every,
            **options,
        )
    if spec.trains:
        ft = FakeTrainer(queue, batch_size=BATCH * REPEAT, **(trainer or {}))
    settings = CheckpointSettings(
        job_dir=str(job),
        mode=spec,
        eval_interval=eval_every or 1,
        has_eval=bool(eval_every),
        fingerprint={"buffer.batch_size": BATCH},
    )
    checkpointer = RunCheckpointer(settings)
    point = checkpointer.find()
    checkpointer.restore(point, fx)
    if point is not None:
        records.restore(point.metrics)
        if ft is not None:
            checkpointer.restore_trainer(ft, point.train_step)
    sync = FakeSync(engines, fx) if fx is not None and ft is not None else None
    policy = sync_policy(style, interval, offset) if sync is not None else Unsynced()
    engines.in_flight = policy.in_flight_updates
    turns = None
    if colocated:
        turns = TakingTurns(Colocation(FakeSupervisor(engines), ft.global_step), lock)
    coordinator = Coordinator(
        RunSettings(
            total_steps=total_steps, save_interval=save_interval, eval_interval=eval_every or 1
        ),
        explorer=fx,
        trainer=ft,
        sync=sync,
        policy=policy,
        turns=turns,
        records=records,
        checkpointer=checkpointer,
        ledger=ledger,
        generation_lock=lock,
        restored=point.experiences if point is not None else None,
        end_of_data=(EndOfQueue,),
    )
    return Run(coordinator, fx, ft, sync, engines, checkpointer, job)


def rids(step: int, tasks: int = BATCH) -> list[str]:
    return sorted(f"{step}/{t}/{r}" for t in range(tasks) for r in range(REPEAT))


def check_versions(run: Run, style: str, interval: int, offset: int) -> None:
    """The weights of each explore step, as its sync style promises."""
    versions = run.versions()
    for step, version in versions.items():
        need = required_version(step, interval, offset)
        assert version <= max(0, step - 1), (step, version)  # never ahead of the data
        if style == "fixed":  # exactly the weights of need(e)
            assert version == need, (step, version, need)
        elif style == "dynamic_by_trainer":  # at least those: pushed before they count as done
            assert version >= need, (step, version, need)
        elif style == "fully_async":  # no lower bound: generation never waits for weights
            pass
        elif (step - 1) % interval == 0 and step > 1:  # dynamic_by_explorer: asked before it
            assert version >= need, (step, version, need)
    assert [versions[s] for s in sorted(versions)] == sorted(versions.values())
    assert run.engines.violations == []


def ahead_bound(style: str, interval: int, offset: int) -> int:
    """How many explore steps past the last trained one the explorer may have run."""
    if style == "fully_async":  # max_inflight_batches (2) batches not yet trained
        return 2
    return offset + interval


def trained_once(run: Run) -> list[str]:
    assert run.trainer is not None
    ids = [rid for step in sorted(run.trainer.trained) for rid in run.trainer.trained[step]]
    assert len(ids) == len(set(ids)), "an experience was trained twice"
    return ids


# ---------------------------------------------------------------------- the clock
@pytest.mark.parametrize(
    ("interval", "offset", "expected"),
    [
        (1, 0, [0, 1, 2, 3, 4]),
        (2, 0, [0, 0, 2, 2, 4]),
        (1, 1, [0, 0, 1, 2, 3]),
        (2, 1, [0, 0, 0, 2, 2]),
        (3, 2, [0, 0, 0, 0, 0, 3]),
    ],
)
def test_required_version(interval, offset, expected):
    assert [required_version(e, interval, offset) for e in range(1, len(expected) + 1)] == expected


def test_policies_answer_from_the_clock_alone():
    clock = SyncClock.at(0)
    fixed = FixedSync(interval=2, offset=1)
    assert fixed.may_explore(clock, 3) and not fixed.may_explore(clock, 4)  # need(4) = 2
    clock.trained_to(2)
    assert not fixed.may_explore(clock, 4)  # trained, not yet served
    clock.served(2)
    assert fixed.may_explore(clock, 4)
    assert not fixed.may_push(clock, 4) and fixed.pushes_after(4) and not fixed.pushes_after(3)
    clock.explored_to(5)
    assert fixed.may_push(clock, 4)
    trainer_driven = sync_policy("dynamic_by_trainer", 2, 1)
    assert trainer_driven.may_explore(SyncClock(trained=2), 4)
    explorer_driven = sync_policy("dynamic_by_explorer", 3, 0)
    assert not explorer_driven.pushes_after(3) and explorer_driven.asks_before(3, 0)
    assert not explorer_driven.asks_before(2, 0)
    assert FixedSync().may_explore(SyncClock(trainer_done=True), 99)  # the trainer has ended
    fully_async = sync_policy("fully_async", 2, 0, max_inflight_batches=2)
    # at most 2 batches explored and not trained: step 3 waits for train step 1
    assert fully_async.may_explore(SyncClock(trained=0), 2)
    assert not fully_async.may_explore(SyncClock(trained=0), 3)
    assert fully_async.may_explore(SyncClock(trained=1), 3)
    assert fully_async.pushes_after(4) and not fully_async.pushes_after(3)
    assert fully_async.may_push(SyncClock(), 4) and fully_async.in_flight_updates
    assert not FixedSync().in_flight_updates
    with pytest.raises(ValueError, match="max_inflight_batches"):
        sync_policy("fully_async", max_inflight_batches=0)
    with pytest.raises(ValueError, match="is not a sync style"):
        sync_policy("fully_sync")
    with pytest.raises(ValueError, match="sync_interval"):
        FixedSync(interval=0)


# ---------------------------------------------------------------------- the matrix
@pytest.mark.parametrize(("style", "interval", "offset"), MATRIX)
def test_every_style_keeps_its_schedule(tmp_path, style, interval, offset):
    run = build(tmp_path, style, interval, offset, save_interval=3)
    last = run.go()
    check_versions(run, style, interval, offset)
    assert run.trainer.trained == {s: rids(s) for s in range(1, 9)}  # step s trains explore step s
    assert last["actor/loss"] == pytest.approx(1 / 8) and last["batch/experience_ids"]
    if style != "dynamic_by_explorer":
        assert run.sync.pushed == [s for s in range(1, 9) if s % interval == 0]
    else:  # pushed when asked, never newer than the last finished train step
        assert run.sync.pushed == sorted(set(run.sync.pushed))
    assert (run.job / LATEST_FILE).read_text() == "8"  # every 3 steps and at the end
    assert sorted(p.name for p in run.job.glob("global_step_*")) == [
        "global_step_3",
        "global_step_6",
        "global_step_8",
    ]
    assert run.metric_steps() == list(range(1, 9))  # one merged record per step
    assert run.trainer.final_saved


@pytest.mark.parametrize(("style", "interval", "offset"), MATRIX)
def test_steps_with_little_or_no_data_end_the_run_cleanly(tmp_path, style, interval, offset):
    """Step 3 half fails (half a batch: the trainer must take it rather than wait), and the
    task set ends after 5 steps although total_steps says 8: the run ends, nothing waits."""
    run = build(
        tmp_path, style, interval, offset, total_steps=8, explorer={"steps": 5, "partial": (3,)}
    )
    run.go()
    check_versions(run, style, interval, offset)
    written = [rid for s in range(1, 6) for rid in rids(s, BATCH // 2 if s == 3 else BATCH)]
    assert sorted(trained_once(run)) == sorted(written)  # every experience trained, once
    assert run.explorer.closed and run.trainer.final_saved


@pytest.mark.parametrize(("style", "interval", "offset"), MATRIX)
def test_an_explorer_that_raises_ends_the_run_with_its_error(tmp_path, style, interval, offset):
    run = build(tmp_path, style, interval, offset, explorer={"fail_at": 4})
    with pytest.raises(Injected, match="explore step 4"):
        run.go()
    assert run.explorer.closed  # the trainer's reader saw the end
    assert run.explorer.step == 3
    trained_once(run)
    check_versions(run, style, interval, offset)


@pytest.mark.parametrize(("style", "interval", "offset"), MATRIX)
def test_a_trainer_that_raises_ends_the_run_with_its_error(tmp_path, style, interval, offset):
    run = build(tmp_path, style, interval, offset, trainer={"fail_at": 3})
    with pytest.raises(Injected, match="train step 3"):
        run.go()
    assert run.trainer.global_step == 2 and run.explorer.closed
    assert run.explorer.step <= 3 + ahead_bound(style, interval, offset)  # stopped, not ran on
    check_versions(run, style, interval, offset)


@pytest.mark.parametrize(("style", "interval", "offset"), MATRIX)
def test_a_kill_between_commit_and_checkpoint_resumes_exactly(tmp_path, style, interval, offset):
    """Killed while writing global_step_4 (after the explorer committed steps the trainer had
    not trained): the resume starts from global_step_2 with the explorer's position and the
    queued experiences of that checkpoint, and trains exactly what a straight run trains."""
    straight = build(tmp_path / "straight", style, interval, offset, save_interval=2)
    straight.go()
    killed = build(tmp_path, style, interval, offset, save_interval=2, trainer={"kill_on_save": 4})
    with pytest.raises(Injected, match="killed while saving global_step_4"):
        killed.go()
    assert (killed.job / LATEST_FILE).read_text() == "2"

    # what a resume restores
    point = RunCheckpointer(killed.checkpointer.settings).find()
    assert point is not None and point.train_step == 2
    ahead = point.explore_step
    assert 2 <= ahead <= 2 + ahead_bound(style, interval, offset)
    assert point.explorer == {"step": ahead, "taskset": {"current_index": ahead * BATCH}}
    assert sorted(e.eid.rid for e in point.experiences) == sorted(
        rid for s in range(3, ahead + 1) for rid in rids(s)
    )

    resumed = build(tmp_path, style, interval, offset, save_interval=2)
    assert resumed.trainer.global_step == 2 and resumed.explorer.step == ahead
    resumed.go()
    first = {s: ids for s, ids in killed.trainer.trained.items() if s <= 2}
    assert {**first, **resumed.trainer.trained} == straight.trainer.trained
    assert resumed.metric_steps() == list(range(1, 9))  # records after the checkpoint: again
    versions = resumed.versions()  # steps explored after the resume, on the checkpoint's weights
    assert min(versions.values()) >= 2 and resumed.sync.pushed[0] == 2
    for step, version in versions.items():
        assert version <= step - 1
        # (dynamic_by_explorer asks every sync_interval steps from here; fully_async never
        # waits for weights)
        if style not in ("dynamic_by_explorer", "fully_async"):
            assert version >= required_version(step, interval, offset)
    assert resumed.engines.violations == []


# ---------------------------------------------------------------------- other policies
def test_fully_async_pushes_under_a_generating_step_and_never_holds_the_trainer(tmp_path):
    """``fully_async``: explore step 3 generates for a while; meanwhile the trainer trains
    steps 1-2 and pushes, and the push lands under step 3's requests (it spans two versions)
    instead of waiting for the step to end. Everything is still trained once, in order."""
    run = build(tmp_path, "fully_async", 1, 0, explorer={"slow_step": (3, 0.5)})
    run.go()
    spans = {s: v for s, v in run.explorer.generated.items() if len(v) > 1}
    assert 3 in spans and min(spans[3]) < max(spans[3]), run.explorer.generated
    assert run.engines.violations == []
    assert run.sync.pushed == list(range(1, 9))
    assert run.trainer.trained == {s: rids(s) for s in range(1, 9)}
    # never more than max_inflight_batches (2) batches ahead of the trainer
    for step, version in run.versions().items():
        assert version <= step - 1


def test_fixed_waits_for_the_generating_step_before_it_pushes(tmp_path):
    """The same slow step under ``dynamic_by_trainer`` (offset 1: the explorer runs ahead):
    the push waits for the step to finish generating, so no step spans two versions."""
    run = build(tmp_path, "dynamic_by_trainer", 1, 1, explorer={"slow_step": (3, 0.5)})
    run.go()
    assert all(len(v) == 1 for v in run.explorer.generated.values())
    assert run.engines.violations == []


def test_colocated_turns_never_generate_while_the_trainer_has_the_devices(tmp_path):
    run = build(tmp_path, colocated=True)
    last = run.go()
    check_versions(run, "fixed", 1, 0)
    assert last["colocate/stale_generations"] == 0.0
    assert last["colocate/calls"].startswith("generate@7, sleep@7, train@8, update_weights@8")
    assert run.engines.awake


def test_a_run_that_only_explores_records_its_position_and_resumes(tmp_path):
    run = build(tmp_path, mode="explore", explorer={"fail_at": 5}, eval_every=2)
    with pytest.raises(Injected):
        run.go()
    state = json.loads((run.job / "explorer" / "explore_state.json").read_text())
    assert state["step"] == 4 and state["evaluated"] is True
    assert run.explorer.evaluated == [2, 4]
    resumed = build(tmp_path, mode="explore", eval_every=2)
    assert resumed.explorer.step == 4
    resumed.go()
    assert resumed.explorer.evaluated == [6, 8]  # step 4's evaluation was done: not again
    assert [s for s in resumed.metric_steps() if s] == [1, 2, 2, 3, 4, 4, 5, 6, 6, 7, 8, 8]


def test_a_run_that_only_trains_checkpoints_and_resumes(tmp_path):
    def data_run(**trainer):
        run = build(tmp_path, mode="train", save_interval=2, trainer=trainer)
        queue = run.trainer.queue
        for step in range(1 + run.trainer.read // (BATCH * REPEAT), 6):
            queue.write([e for e in _exps(step)])
        queue.close()
        return run

    killed = data_run(fail_at=4)
    with pytest.raises(Injected):
        killed.go()
    assert (killed.job / LATEST_FILE).read_text() == "2"
    resumed = data_run()
    assert resumed.trainer.global_step == 2
    resumed.go()
    assert sorted(resumed.trainer.trained) == [3, 4, 5]
    assert resumed.metric_steps() == [1, 2, 3, 4, 5]
    assert (resumed.job / LATEST_FILE).read_text() == "5"


def test_dynamic_by_explorer_waits_at_most_sync_timeout(tmp_path, caplog):
    """A train step longer than sync_timeout cannot hold the explorer: its request for
    weights times out and it explores on with the weights it has."""
    run = build(
        tmp_path,
        "dynamic_by_explorer",
        1,
        3,
        steps=4,
        explorer={"slow_step": (2, 0.2)},  # train step 1 starts meanwhile
        trainer={"slow_step": (1, 1.0)},
    )
    run.sync.timeout = 0.05
    with caplog.at_level("WARNING", logger="trinity"):
        run.go()
    assert "explore step 3: no weights within sync_timeout" in caplog.text
    assert run.versions()[3] == 0  # asked before step 3, explored on with version 0
    assert sorted(trained_once(run)) == sorted(rid for s in range(1, 5) for rid in rids(s))


def _exps(step: int) -> list:
    from trinity.common.experience import EID, Experience

    exps = [
        Experience(
            tokens=[1, 2, 3], prompt_length=1, reward=1.0, eid=EID(batch=step, task=t, run=r)
        )
        for t in range(BATCH)
        for r in range(REPEAT)
    ]
    for exp in exps:
        exp.model_version = 0
    return exps


def test_a_run_needs_its_parts():
    with pytest.raises(ValueError, match="explorer, a trainer or both"):
        Coordinator(RunSettings())
    with pytest.raises(ValueError, match="weight synchroniser"):
        Coordinator(RunSettings(), explorer=object(), trainer=object(), checkpointer=object())
    with pytest.raises(ValueError, match="checkpointer"):
        Coordinator(RunSettings(), trainer=object())


def test_a_finished_run_knows_it_has_nothing_left_to_do(tmp_path):
    """A run that ended normally records it; the same settings again find nothing to do, other
    limits (more steps) or a newer checkpoint do."""
    import dataclasses

    run = build(tmp_path, save_interval=4)
    run.go()
    settings = dataclasses.replace(run.checkpointer.settings, limits={"buffer.total_steps": None})
    checkpointer = RunCheckpointer(settings)
    assert checkpointer.finished() is None  # not marked: it may have been killed
    checkpointer.mark_finished()
    record = RunCheckpointer(settings).finished()
    assert record is not None and record["step"] == 8 and record["mode"] == "both"
    more = dataclasses.replace(settings, limits={"buffer.total_steps": 12})
    assert RunCheckpointer(more).finished() is None  # raised limits: work left
    fresh = dataclasses.replace(settings, resume=False)
    assert RunCheckpointer(fresh).finished() is None  # not resuming: not this run's business
    (run.job / LATEST_FILE).write_text("4")  # the state moved (e.g. restored by hand)
    assert RunCheckpointer(settings).finished() is None


def test_the_session_builds_the_policy_its_config_names():
    """``sync_policy_of``: a run's policy from its config; ``fully_async`` reads
    ``explorer.max_inflight_batches`` and pushes every ``trainer_sync_interval`` steps."""
    from trinity.common.config import load_config
    from trinity.launcher.run.policies import FullyAsyncSync, TrainerDrivenSync
    from trinity.launcher.session import sync_policy_of

    config = load_config(
        {
            "synchronizer": {"sync_style": "fully_async", "trainer_sync_interval": 2},
            "explorer": {"max_inflight_batches": 3},
        }
    )
    policy = sync_policy_of(config)
    assert isinstance(policy, FullyAsyncSync)
    assert (policy.interval, policy.max_inflight_batches) == (2, 3)
    assert policy.pushes_after(2) and not policy.pushes_after(3)
    config = load_config(
        {"synchronizer": {"sync_style": "dynamic_by_trainer", "sync_interval": 3, "sync_offset": 1}}
    )
    policy = sync_policy_of(config)
    assert isinstance(policy, TrainerDrivenSync) and (policy.interval, policy.offset) == (3, 1)


# ---------------------------------------------------------------------- preemption
def _go_and_preempt(run: Run, when) -> BaseException:
    """Run ``run`` with a stop request; a preemption signal (``StopRequest.request``) arrives
    as soon as ``when()`` is true. Returns what the run raised."""
    from trinity.launcher.run.preemption import StopRequest

    stop = run.coordinator.stop = StopRequest()

    async def main() -> None:
        async def signal_when_ready() -> None:
            while not when():
                await asyncio.sleep(0.001)
            stop.request("SIGTERM")

        trigger = asyncio.create_task(signal_when_ready())
        try:
            await asyncio.wait_for(run.coordinator.run(), DEADLINE)
        finally:
            trigger.cancel()

    try:
        asyncio.run(main())
    except BaseException as exc:  # noqa: BLE001 - returned for the test to check
        return exc
    finally:
        run.coordinator.records.flush()
        run.coordinator.records.sink.close()
    raise AssertionError("the run ended without stopping")


@pytest.mark.parametrize(
    ("style", "offset", "colocated"),
    [("fixed", 1, False), ("dynamic_by_explorer", 1, False), ("fully_async", 0, False)]
    + [("fixed", 0, True)],
)
def test_a_preemption_signal_checkpoints_and_the_same_command_resumes(
    tmp_path, style, offset, colocated
):
    """A stop request (SIGTERM / SIGUSR1 in ``trinity-launch``) in mode both or colocate, with
    no periodic checkpoint: the train step in progress ends, a checkpoint of that step is
    written, the run raises ``Preempted``; the same run resumed from it trains exactly what a
    straight run trains, none twice, none missing."""
    from trinity.launcher.run.preemption import Preempted

    straight = build(tmp_path / "straight", style, 1, offset, colocated=colocated)
    straight.go()
    run = build(tmp_path, style, 1, offset, colocated=colocated)
    exc = _go_and_preempt(run, lambda: run.trainer.global_step >= 3)
    assert isinstance(exc, Preempted), repr(exc)
    assert exc.signal_name == "SIGTERM" and 3 <= exc.step < 8 and exc.checkpoint
    assert (run.job / LATEST_FILE).read_text() == str(exc.step)
    assert sorted(run.trainer.trained) == list(range(1, exc.step + 1))  # no step after it
    assert not run.trainer.final_saved

    resumed = build(tmp_path, style, 1, offset, colocated=colocated)
    assert resumed.trainer.global_step == exc.step
    resumed.go()
    first = {s: ids for s, ids in run.trainer.trained.items() if s <= exc.step}
    assert {**first, **resumed.trainer.trained} == straight.trainer.trained
    assert trained_once(straight) and resumed.metric_steps() == list(range(1, 9))


def test_a_preemption_signal_stops_a_training_run_after_its_step(tmp_path):
    """Mode train: the stop lands while the trainer works through its data; the step in
    progress finishes, its checkpoint is written, and the resumed run trains the rest."""
    from trinity.launcher.run.preemption import Preempted

    def data_run():
        run = build(tmp_path, mode="train", trainer={"slow_step": (2, 0.2)})
        queue = run.trainer.queue
        for step in range(1 + run.trainer.read // (BATCH * REPEAT), 6):
            queue.write(list(_exps(step)))
        queue.close()
        return run

    run = data_run()
    exc = _go_and_preempt(run, lambda: run.trainer.global_step >= 1)
    assert isinstance(exc, Preempted) and exc.step == 2  # step 2 was running: it finished
    assert (run.job / LATEST_FILE).read_text() == "2"
    resumed = data_run()
    assert resumed.trainer.global_step == 2
    resumed.go()
    assert sorted(resumed.trainer.trained) == [3, 4, 5]
    assert resumed.metric_steps() == [1, 2, 3, 4, 5]


def test_a_preemption_signal_stops_an_exploring_run_at_its_last_committed_step(tmp_path):
    """Mode explore: no further step starts and the step in flight finishes and is recorded
    (the coordinator's stop plan without a trainer); the explorer's recorded position is that
    last step, and the resumed run explores the rest once."""
    from trinity.launcher.run.preemption import Preempted

    run = build(tmp_path, mode="explore")
    exc = _go_and_preempt(run, lambda: run.explorer.step >= 3)
    assert isinstance(exc, Preempted) and exc.checkpoint is None
    state = json.loads((run.job / "explorer" / "explore_state.json").read_text())
    assert state["step"] == exc.step == run.explorer.step >= 3
    resumed = build(tmp_path, mode="explore")
    assert resumed.explorer.step == exc.step
    resumed.go()
    assert [s for s in resumed.metric_steps() if s] == list(range(1, 9))


# ---------------------------------------------------------------------- bounded state
def _held(*objects: Any) -> dict[str, int]:
    """The size of every container the run layer keeps on ``objects`` (their attributes)."""
    sizes = {}
    for obj in objects:
        for name, value in vars(obj).items():
            if isinstance(value, (dict, list, set, tuple)) or hasattr(value, "__len__"):
                try:
                    sizes[f"{type(obj).__name__}.{name}"] = len(value)
                except TypeError:
                    continue
    return sizes


@pytest.mark.parametrize("style", STYLES)
def test_the_run_layer_holds_no_per_step_state(tmp_path, style):
    """A soak (``benchmarks/soak.py``) runs thousands of steps: nothing the coordinator,
    its records or the ledger keep may grow with the step count (a write-only
    ``explored_with`` dict of one entry per explore step did)."""
    sizes = {}
    for steps in (10, 60):
        run = build(tmp_path / str(steps), style, steps=steps)
        run.go()
        c = run.coordinator
        sizes[steps] = _held(c, c.records, c.ledger, c.clock)
        assert len(c.ledger) == 0 and c.records.pending == {}
    assert sizes[60] == sizes[10], (sizes[10], sizes[60])


@pytest.mark.parametrize(
    ("buffer_steps", "trainer_steps", "limit"),
    [(None, None, None), (30, None, 30), (None, 12, 12), (30, 12, 12), (10, 12, 10)],
)
def test_training_stops_at_the_smaller_of_buffer_and_trainer_total_steps(
    buffer_steps, trainer_steps, limit
):
    """``trainer.total_steps`` is Trinity-RFT's "training stops when reaching this step": the
    train loop (``RunSettings``) and the lr schedule's length (the trainer plan) both end at
    the smaller of it and ``buffer.total_steps``."""
    from types import SimpleNamespace

    from trinity.launcher.trainer.build import _total_steps

    config = SimpleNamespace(
        buffer=SimpleNamespace(
            total_steps=buffer_steps, trainer_input=SimpleNamespace(experience_buffer=None)
        ),
        trainer=SimpleNamespace(total_steps=trainer_steps, save_interval=0),
        explorer=SimpleNamespace(eval_interval=1, eval_on_startup=False),
    )
    assert RunSettings.from_config(config).total_steps == limit
    if buffer_steps is not None or trainer_steps is not None:
        assert _total_steps(config, "grpo") == limit
