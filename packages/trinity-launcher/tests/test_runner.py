"""Workflow runners and their pool: ids, retries, crashes, hangs and dead processes.

The workflows live in a plugin directory written here and loaded by each runner actor through
``plugin_dirs`` (the ``--plugin-dir`` path), so these tests also show that Ray workers load
plugins before running user code. Engines are ``FakeEngine`` actors: no model, milliseconds
per call.
"""

from __future__ import annotations

import asyncio
import logging
import os
import textwrap
import time

import pytest

ray = pytest.importorskip("ray")

from trinity.common.experience import Experience  # noqa: E402
from trinity.common.workflows import Task  # noqa: E402
from trinity.launcher.engines import (  # noqa: E402
    EngineSettings,
    create_engine,
)
from trinity.launcher.runner import (  # noqa: E402
    RunnerPool,
    WorkflowRunner,
    assign_task_ids,
    describe_task,
)
from trinity.utils.plugin_loader import PLUGIN_DIRS_ENV  # noqa: E402

PLUGIN = textwrap.dedent(
    '''
    """Test workflows; each row's "action" says how to misbehave."""
    import asyncio
    import os
    import time

    from trinity.common.workflows import WORKFLOWS, Workflow


    def _first_time(path):
        try:
            with open(path, "x"):
                return True
        except FileExistsError:
            return False


    @WORKFLOWS.register_module("runner_test_sync")
    class SyncActions(Workflow):
        """Sync workflow (runs in a worker thread of the runner)."""

        def run(self):
            row = self.task.raw_task
            action = row.get("action", "ok")
            if action == "raise":
                raise ValueError(f"boom from row {row['id']}")
            if action == "fail_once" and _first_time(row["marker"]):
                raise RuntimeError("transient failure")
            if action == "sleep":
                time.sleep(row["seconds"])
            if action == "exit_once" and _first_time(row["marker"]):
                os._exit(1)
            exps = self.model.chat([{"role": "user", "content": row["prompt"]}], n=1)
            for exp in exps:
                exp.reward = float(row.get("reward", 1.0))
                exp.info["pid"] = os.getpid()
                exp.info["plugin_dirs"] = os.environ.get("TRINITY_PLUGIN_DIRS", "")
                exp.info["model_id"] = id(self.model)
            return exps


    @WORKFLOWS.register_module("runner_test_async")
    class AsyncSleep(Workflow):
        is_async = True

        async def run_async(self):
            row = self.task.raw_task
            start = time.time()
            await asyncio.sleep(row.get("delay", 0.0))
            exps = await self.model.chat_async([{"role": "user", "content": row["prompt"]}])
            for exp in exps:
                exp.info["span"] = [start, time.time()]
            return exps


    @WORKFLOWS.register_module("runner_test_repeat")
    class RepeatReset(Workflow):
        """Repeatable and resettable: one chat(n=...) per task, reused across tasks."""

        can_repeat = True
        can_reset = True
        instances = 0

        def __init__(self, *, task, model, auxiliary_models=None):
            super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
            type(self).instances += 1
            self.instance = type(self).instances

        def reset(self, task):
            self.task = task

        def run(self):
            n = self.task.rollout_args.n
            exps = self.model.chat([{"role": "user", "content": "q"}], n=n)
            for i, exp in enumerate(exps):
                exp.eid.run = self.run_id_base + i
                exp.info["instance"] = self.instance
                exp.info["n"] = n
            return exps
    '''
)


# ---------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("plugins")
    (path / "runner_test_plugins.py").write_text(PLUGIN)
    return str(path)


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def start_pool(loop, engine, plugin_dir, **sizes) -> RunnerPool:
    """A started pool on ``engine``: 2 runners of 2 tasks, 2 s timeout, 1 retry, unless
    ``sizes`` say otherwise."""
    settings = {"runner_per_model": 2, "tasks_per_runner": 2, "max_timeout": 2, **sizes}
    pool = RunnerPool([engine], max_retry_times=1, plugin_dirs=[plugin_dir], **settings)
    loop.run_until_complete(pool.start())
    return pool


@pytest.fixture(scope="module")
def pool(engine, plugin_dir, loop):
    pool = start_pool(loop, engine, plugin_dir)
    yield pool
    pool.shutdown()


def make_task(workflow: str, repeat_times: int = 1, index: int = 0, **row) -> Task:
    row.setdefault("prompt", f"question {index}")
    row.setdefault("id", index)
    return Task(
        workflow=workflow,
        repeat_times=repeat_times,
        raw_task=row,
        index={"taskset_id": 0, "index": index, "taskset_name": "unit"},
    )


def run_batch(loop, pool, tasks, batch_id=1):
    assign_task_ids(tasks, batch_id=batch_id)
    batch = loop.run_until_complete(pool.run_tasks(tasks))
    loop.run_until_complete(pool.wait_ready())
    return batch


def alive(handle) -> bool:
    try:
        ray.get(handle.ready.remote(), timeout=30)
        return True
    except ray.exceptions.RayActorError:
        return False


# ---------------------------------------------------------------------- in-process runner
def test_runner_in_process_sets_n_reuses_workflows_and_stamps_ids(plugin_dir, monkeypatch):
    monkeypatch.setenv(PLUGIN_DIRS_ENV, "")
    engine = create_engine(EngineSettings(model_path="m", engine_type="fake"))
    engine.model_version = 7
    runner = WorkflowRunner(engine, plugin_dirs=[plugin_dir])

    async def go():
        tasks = [make_task("runner_test_repeat", repeat_times=3, index=i) for i in range(2)]
        assign_task_ids(tasks, batch_id=5)
        return [await runner.run_task(t) for t in tasks]

    results = asyncio.run(go())
    assert all(r["ok"] for r in results), results
    exps = [Experience.deserialize_many(r["experiences"]) for r in results]
    assert [[(e.eid.batch, e.eid.task, e.eid.run) for e in es] for es in exps] == [
        [(5, 0, 0), (5, 0, 1), (5, 0, 2)],
        [(5, 1, 0), (5, 1, 1), (5, 1, 2)],
    ]
    flat = [e for es in exps for e in es]
    assert {e.info["n"] for e in flat} == {3}  # repeatable: n = repeat_times, one call
    assert {e.info["instance"] for e in flat} == {1}  # the second task reset the first's
    assert [e.info["task_index"]["index"] for e in flat] == [0, 0, 0, 1, 1, 1]
    assert {e.model_version for e in flat} == {7}
    # a workflow that cannot be reset is rebuilt per task, on the same (cleaned) model clone
    again = [make_task("runner_test_sync", index=i) for i in range(2)]
    assign_task_ids(again, batch_id=6)
    ids = []
    for task in again:
        result = asyncio.run(runner.run_task(task))
        ids += [e.info["model_id"] for e in Experience.deserialize_many(result["experiences"])]
    assert len(ids) == 2 and ids[0] == ids[1]


def test_runner_in_process_returns_the_traceback_of_a_failing_workflow(plugin_dir, monkeypatch):
    monkeypatch.setenv(PLUGIN_DIRS_ENV, "")
    runner = WorkflowRunner(
        create_engine(EngineSettings(model_path="m", engine_type="fake")), plugin_dirs=[plugin_dir]
    )
    task = make_task("runner_test_sync", action="raise", index=4)
    result = asyncio.run(runner.run_task(task))
    assert result["ok"] is False
    assert "Traceback" in result["error"] and "ValueError: boom from row 4" in result["error"]
    unknown = asyncio.run(runner.run_task(make_task("no_such_workflow")))
    assert unknown["ok"] is False and "no_such_workflow" in unknown["error"]


def test_describe_task_names_batch_task_and_row():
    task = make_task("x", index=17)
    assign_task_ids([task], batch_id=3, first_task_id=1)
    assert describe_task(task) == "task 3/1 (taskset 'unit' row 17)"


# ---------------------------------------------------------------------- the pool
def test_pool_batch_has_unique_correct_eids_and_runners_load_plugins(loop, pool, plugin_dir):
    tasks = [make_task("runner_test_sync", repeat_times=3, index=10 + i) for i in range(6)]
    batch = run_batch(loop, pool, tasks, batch_id=2)
    assert batch.metrics["runner/finished_tasks"] == 6
    assert batch.metrics["runner/failed_tasks"] == 0
    exps = batch.experiences
    assert len(exps) == 18
    assert len({e.eid.uid for e in exps}) == 18
    assert sorted((e.eid.batch, e.eid.task, e.eid.run) for e in exps) == [
        (2, t, r) for t in range(6) for r in range(3)
    ]
    for result in batch.results:
        for exp in result.experiences:
            assert exp.info["task_index"] == result.task.index
            assert exp.info["pid"] != os.getpid()  # ran in a Ray worker
            assert plugin_dir in exp.info["plugin_dirs"].split(os.pathsep)


def test_runner_and_engine_calls_leave_no_task_events_in_ray_gcs(loop, pool):
    """Ray's GCS keeps a record of every actor call it is told of (up to 100,000 calls); in a
    soak of the quickstart (``benchmarks/soak.py``) the runners' tasks and their engine calls
    grew the GCS by ~130 MB per 1,000 steps. Trinity's actors report no task events; a plain
    actor's calls, reported as Ray does by default, show that the check would see them."""
    from ray._private.state import state

    @ray.remote(num_cpus=0)
    class Plain:
        def ping(self) -> int:
            return 1

    plain = Plain.remote()
    ray.get([plain.ping.remote() for _ in range(3)])
    tasks = [make_task("runner_test_sync", index=40 + i) for i in range(4)]
    assert run_batch(loop, pool, tasks).metrics["runner/finished_tasks"] == 4

    def names() -> list[str]:
        return [e.task_info.func_or_class_name for e in state._get_all_task_events()]

    deadline = time.monotonic() + 30  # events reach the GCS about once a second
    while not any(name.endswith("Plain.ping") for name in names()):
        assert time.monotonic() < deadline, "no task events at all: the check sees nothing"
        time.sleep(0.5)
    time.sleep(1.5)  # one more report round for the runners' and the engine's
    recorded = names()
    for method in ("run_task", "chat", "get_model_version"):
        assert not [n for n in recorded if n.endswith(f".{method}")], (method, recorded)


def test_one_runner_runs_several_tasks_concurrently(loop, pool):
    delay = 1.0
    tasks = [make_task("runner_test_async", index=i, delay=delay) for i in range(4)]
    start = time.perf_counter()
    batch = run_batch(loop, pool, tasks)
    elapsed = time.perf_counter() - start
    assert all(r.ok for r in batch.results)
    # 4 tasks on 2 runners (2 slots each) overlap: far less than 2 rounds of `delay`
    assert elapsed < 2 * delay, elapsed
    by_runner: dict[int, list] = {}
    for r in batch.results:
        by_runner.setdefault(r.runner_id, []).append(r.experiences[0].info["span"])
    assert len(by_runner) == 2
    for (a0, a1), (b0, b1) in by_runner.values():
        assert a0 < b1 and b0 < a1  # the two tasks of a runner overlapped in time


def test_a_task_that_fails_once_is_retried(loop, pool, tmp_path):
    tasks = [make_task("runner_test_sync", index=0, action="fail_once", marker=str(tmp_path / "m"))]
    tasks += [make_task("runner_test_sync", index=i) for i in range(1, 3)]
    batch = run_batch(loop, pool, tasks)
    assert [r.ok for r in batch.results] == [True, True, True]
    assert batch.results[0].attempts == 2 and len(batch.results[0].experiences) == 1
    assert batch.metrics["runner/retries"] == 1
    assert batch.metrics["runner/errors"] == 1
    assert batch.metrics["runner/replaced_runners"] == 0


def test_a_crashing_workflow_is_recorded_with_its_traceback(loop, pool, caplog):
    tasks = [make_task("runner_test_sync", index=i) for i in range(3)]
    tasks[1] = make_task("runner_test_sync", index=1, id="crashy", action="raise")
    with caplog.at_level(logging.WARNING, logger="trinity"):
        batch = run_batch(loop, pool, tasks, batch_id=9)
    assert [r.ok for r in batch.results] == [True, False, True]
    failed = batch.results[1]
    assert failed.attempts == 2 and failed.experiences == []
    assert "ValueError: boom from row crashy" in failed.error
    assert batch.metrics["runner/failed_tasks"] == 1
    assert batch.metrics["runner/retries"] == 1
    assert len(batch.experiences) == 2
    final = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(final) == 1
    message = final[0].getMessage()
    assert "task 9/1 (taskset 'unit' row 1)" in message
    assert "Traceback" in message and "boom from row crashy" in message


@pytest.mark.slow
def test_a_task_over_max_timeout_fails_and_its_runner_is_replaced(loop, pool):
    before = list(pool.runners)
    tasks = [make_task("runner_test_sync", index=0, action="sleep", seconds=60)]
    tasks += [make_task("runner_test_sync", index=i) for i in range(1, 4)]
    start = time.perf_counter()
    batch = run_batch(loop, pool, tasks)
    assert [r.ok for r in batch.results] == [False, True, True, True]
    assert batch.results[0].error.startswith("timeout")
    assert batch.metrics["runner/timeouts"] == 2  # first attempt and the retry
    assert batch.metrics["runner/replaced_runners"] == 2
    assert time.perf_counter() - start < 45  # nobody waited for the 60 s sleep
    after = list(pool.runners)
    assert len(after) == 2 and not set(after) & set(before)
    assert not any(alive(h) for h in before)  # the hung processes were killed


def test_a_timed_out_task_cancels_the_engine_call_it_waits_on(loop, pool, engine):
    """Replacing the runner of a task past max_timeout is not enough: the engine call it
    waits on must stop too, or the next tasks queue behind abandoned work and, on a loaded
    machine, time out in turn."""
    before = ray.get(engine.sleep_log.remote())
    tasks = [make_task("runner_test_sync", index=0, prompt="<engine-sleep:60>")]
    tasks += [make_task("runner_test_sync", index=i) for i in range(1, 3)]
    start = time.perf_counter()
    batch = run_batch(loop, pool, tasks)
    assert [r.ok for r in batch.results] == [False, True, True]
    assert batch.results[0].error.startswith("timeout")
    assert time.perf_counter() - start < 45  # nobody waited for the engine's 60 s
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the cancel reaches the engine asynchronously
        log = ray.get(engine.sleep_log.remote())[len(before) :]
        if log.count("cancelled") == 2:
            break
        time.sleep(0.2)
    # both attempts (first try and retry) started the engine call and cancelled it
    assert log.count("started") == 2 and log.count("cancelled") == 2, log


@pytest.mark.slow
def test_tasks_of_one_wave_share_an_engine_call_and_a_timed_out_one_stops_only_its_own(
    ray_cluster, plugin_dir, loop
):
    """An engine that serves draws gets the draws a runner's tasks ask for together as one
    call (``batched_draws``). A task of that call past ``max_timeout`` is cancelled by Ray
    with its ``run_task``: its request stops on the engine, and the others of the same call,
    made outside that task's context, are not cancelled with it."""
    from trinity.launcher.engines import create_engine_actor

    engine = create_engine_actor(
        EngineSettings(
            model_path="fake-model", engine_type="fake", extra_engine_args={"serve_draws": True}
        )
    )
    ray.get(engine.ready.remote())
    pool = start_pool(
        loop, engine, plugin_dir, runner_per_model=1, tasks_per_runner=4, max_timeout=3
    )
    try:
        for _ in range(3):  # the tasks of a wave wake together (their shared version ask)
            wave = [make_task("runner_test_async", index=i) for i in range(4)]
            batch = run_batch(loop, pool, wave)
            assert all(r.ok for r in batch.results), [r.error for r in batch.results]
        sizes = ray.get(engine.draw_batch_sizes.remote())
        assert sum(sizes) == 12 and max(sizes) > 1, sizes  # calls shared
        tasks = [make_task("runner_test_async", index=0, prompt="<engine-sleep:60>")]
        tasks += [make_task("runner_test_async", index=i) for i in range(1, 4)]
        start = time.perf_counter()
        batch = run_batch(loop, pool, tasks)
        assert [r.ok for r in batch.results] == [False, True, True, True], [
            r.error for r in batch.results
        ]
        assert batch.results[0].error.startswith("timeout")
        assert all(r.attempts == 1 for r in batch.results[1:])  # none cancelled with it
        assert time.perf_counter() - start < 45
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            log = ray.get(engine.sleep_log.remote())
            if log.count("cancelled") == 2:
                break
            time.sleep(0.2)
        assert log.count("started") == 2 and log.count("cancelled") == 2, log
    finally:
        pool.shutdown()
        ray.kill(engine)


@pytest.mark.slow
def test_a_runner_whose_process_dies_is_replaced_and_the_batch_completes(loop, pool, tmp_path):
    before = list(pool.runners)
    tasks = [make_task("runner_test_sync", index=0, action="exit_once", marker=str(tmp_path / "x"))]
    tasks += [make_task("runner_test_sync", index=i) for i in range(1, 5)]
    batch = run_batch(loop, pool, tasks)
    assert all(r.ok for r in batch.results), [r.error for r in batch.results]
    assert len(batch.experiences) == 5
    assert batch.metrics["runner/crashes"] == 1
    assert batch.metrics["runner/replaced_runners"] == 1
    assert batch.results[0].attempts == 2
    after = list(pool.runners)
    assert len(after) == 2 and len(set(after) - set(before)) == 1
    assert sum(alive(h) for h in before) == 1


@pytest.mark.slow
def test_a_runner_that_cannot_load_the_plugins_fails_the_start_clearly(engine, tmp_path, loop):
    bad = tmp_path / "bad_plugins"
    bad.mkdir()
    (bad / "broken_plugin.py").write_text("raise RuntimeError('plugin exploded')\n")
    pool = RunnerPool([engine], runner_per_model=1, plugin_dirs=[str(bad)])
    with pytest.raises(RuntimeError) as info:
        loop.run_until_complete(pool.start())
    assert "broken_plugin" in str(info.value) and "plugin exploded" in str(info.value)
    assert pool.runners == []


@pytest.mark.slow
def test_repeats_split_across_runners_and_run_concurrently(engine, plugin_dir, loop):
    """``max_repeat_times_per_runner`` splits one task's runs over runners (one GRPO group,
    run ids 0..R-1); ``concurrent_mode: asynchronous`` runs a runner's share at once."""
    pool = RunnerPool(
        [engine],
        runner_per_model=3,
        max_timeout=30,
        max_retry_times=0,
        plugin_dirs=[plugin_dir],
        concurrent_mode="asynchronous",
        max_repeat_times_per_runner=2,
    )
    loop.run_until_complete(pool.start())
    try:
        tasks = [make_task("runner_test_async", repeat_times=5, delay=0.5)]
        started = time.perf_counter()
        batch = run_batch(loop, pool, tasks, batch_id=9)
        seconds = time.perf_counter() - started
        split = run_batch(loop, pool, [make_task("runner_test_sync", repeat_times=5)], batch_id=10)
    finally:
        pool.shutdown()
    (result,) = batch.results
    assert result.ok and len(result.experiences) == 5
    assert sorted(e.eid.run for e in result.experiences) == [0, 1, 2, 3, 4]
    assert {e.eid.tid for e in result.experiences} == {"9/0"}  # one group
    # 5 runs of 0.5 s: chunks [0, 1], [2, 3], [4] on three runners, each chunk's runs at once
    spans = sorted(e.info["span"] for e in result.experiences)
    assert spans[-1][0] < spans[0][1], "every run started before the first one finished"
    assert seconds < 2.0
    pids = {e.info["pid"] for e in split.experiences}
    assert len(pids) >= 2 and sorted(e.eid.run for e in split.experiences) == [0, 1, 2, 3, 4]


def test_pool_refuses_bad_concurrency_settings(engine):
    with pytest.raises(ValueError, match="concurrent_mode: 'threads' is not one of"):
        RunnerPool([engine], concurrent_mode="threads")
    with pytest.raises(ValueError, match="max_repeat_times_per_runner must be >= 1"):
        RunnerPool([engine], max_repeat_times_per_runner=0)
