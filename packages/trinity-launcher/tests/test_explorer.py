"""The explorer and the explore / bench modes, driven by YAML configs.

Engines are injected ``FakeEngine`` actors (the YAML says ``engine_type: transformers``, which
is what a real run would start); the workflow is a plugin whose rewards and metrics come from
the task-set rows, so every metric has a hand-computed expected value.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import statistics
import textwrap
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from trinity.buffer import get_buffer_reader  # noqa: E402
from trinity.common.config import load_config  # noqa: E402
from trinity.common.experience import EID, Experience  # noqa: E402
from trinity.common.workflows import Task  # noqa: E402
from trinity.launcher.engines import EngineSettings, create_engine_actor  # noqa: E402
from trinity.launcher.explorer import (  # noqa: E402
    Explorer,
    eval_metrics,
    find_checkpoints,
    rollout_metrics,
)
from trinity.launcher.modes import LaunchInputError, run_bench, run_explore  # noqa: E402
from trinity.launcher.progress import JsonlMonitor, ProgressReporter  # noqa: E402
from trinity.launcher.runner import TaskResult  # noqa: E402

PLUGIN = textwrap.dedent(
    '''
    from trinity.common.workflows import WORKFLOWS, Workflow


    @WORKFLOWS.register_module("explorer_test_workflow")
    class RowScored(Workflow):
        """One chat per run; reward and metrics of run r are the row's lists at r."""

        is_async = True

        async def run_async(self):
            row = self.task.raw_task
            if row.get("fail"):
                raise RuntimeError("row %r always fails" % row["prompt"])
            exps = await self.model.chat_async([{"role": "user", "content": row["prompt"]}])
            run = self.run_id_base
            for exp in exps:
                exp.reward = float(row["rewards"][run]) if "rewards" in row else 1.0
                if "acc" in row:
                    exp.metrics["accuracy"] = float(row["acc"][run])
            return exps
    '''
)

EVAL_ROWS = [
    {"prompt": "e0", "rewards": [1.0, 0.0, 0.5], "acc": [1, 0, 1]},
    {"prompt": "e1", "rewards": [0.0, 0.0, 0.0], "acc": [0, 0, 0]},
    {"prompt": "e2", "fail": True},
]


# ---------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("plugins")
    (path / "explorer_test_plugins.py").write_text(PLUGIN)
    return str(path)


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def write_config(tmp_path: Path, mode: str = "explore", **over) -> Path:
    # FakeEngines stand in for the engines: the model directory is a stand-in too (validation
    # refuses one that does not exist)
    (tmp_path / "no-model-needed").mkdir(exist_ok=True)
    (tmp_path / "no-model-needed" / "config.json").write_text("{}")
    train = write_jsonl(
        tmp_path / "train.jsonl",
        [{"prompt": f"q{i}", "rewards": [i % 2, 1.0]} for i in range(over.get("rows", 7))],
    )
    evalset = write_jsonl(tmp_path / "eval.jsonl", EVAL_ROWS)
    total_steps = f"total_steps: {over['total_steps']}" if "total_steps" in over else ""
    text = textwrap.dedent(
        f"""
        mode: {mode}
        project: unit
        name: {mode}_run
        checkpoint_root_dir: {tmp_path / "ckpt"}
        algorithm:
          algorithm_type: grpo
          repeat_times: 2
        model:
          model_path: {tmp_path / "no-model-needed"}
          max_prompt_tokens: 64
          max_response_tokens: 32
        buffer:
          batch_size: 3
          {total_steps}
          explorer_input:
            taskset:
              name: train
              path: {train}
              default_workflow_type: explorer_test_workflow
            eval_tasksets:
              - name: evalset
                path: {evalset}
                default_workflow_type: explorer_test_workflow
                repeat_times: 3
          trainer_input:
            experience_buffer:
              name: exps
              storage_type: sql
        explorer:
          runner_per_model: 2
          max_timeout: 30
          max_retry_times: 0
          eval_interval: 2
          eval_on_startup: true
          rollout_model:
            engine_type: transformers
        """
    )
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    return cfg


def checked(path: Path):
    config = load_config(str(path))
    config.check_and_update()
    return config


def read_all(storage) -> list[Experience]:
    """Every experience in ``storage`` (a buffer reader iterates over batches)."""
    return [exp for batch in get_buffer_reader(storage) for exp in batch]


def metrics_lines(config) -> list[dict]:
    path = Path(config.checkpoint_job_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---------------------------------------------------------------------- pure functions
def exp(reward, run, metrics=None, version=0) -> Experience:
    return Experience(
        tokens=torch.tensor([1, 2, 3, 4]),
        prompt_length=2,
        reward=reward,
        metrics=metrics or {},
        eid=EID(run=run),
        model_version=version,
    )


def test_eval_metrics_match_hand_computed_values():
    results = [
        TaskResult(
            task=Task(),
            ok=True,
            experiences=[
                exp(1.0, 0, {"acc": 1.0}),
                exp(0.0, 1, {"acc": 0.0}),
                exp(0.5, 2, {"acc": 1.0}),
            ],
        ),
        # a run of two experiences (two turns) counts with their mean: runs are 0.2, 0.6, 1.0
        TaskResult(
            task=Task(),
            ok=True,
            experiences=[exp(0.0, 0), exp(0.4, 0), exp(0.6, 1), exp(1.0, 2, version=3)],
        ),
        TaskResult(task=Task(), ok=False, error="boom"),
    ]
    got = eval_metrics("set", results, 3)
    std_a = math.sqrt(((1 - 0.5) ** 2 + (0 - 0.5) ** 2 + 0) / 3)
    std_b = math.sqrt(((0.2 - 0.6) ** 2 + 0 + (1.0 - 0.6) ** 2) / 3)
    assert got["eval/set/reward/mean@3"] == pytest.approx((0.5 + 0.6) / 2)
    assert got["eval/set/reward/best@3"] == pytest.approx((1.0 + 1.0) / 2)
    assert got["eval/set/reward/worst@3"] == pytest.approx((0.0 + 0.2) / 2)
    assert got["eval/set/reward/std@3"] == pytest.approx((std_a + std_b) / 2)
    # only the first task reports "acc": averaged over it alone
    assert got["eval/set/acc/mean@3"] == pytest.approx(2 / 3)
    assert got["eval/set/acc/best@3"] == 1.0 and got["eval/set/acc/worst@3"] == 0.0
    assert got["eval/set/acc/std@3"] == pytest.approx(statistics.pstdev([1, 0, 1]))
    assert got["eval/set/tasks"] == 3 and got["eval/set/failed_tasks"] == 1
    assert got["eval/set/model_version"] == 3


def test_rollout_metrics():
    exps = [exp(1.0, 0, {"acc": 1}), exp(0.0, 1, {"acc": 0}), exp(0.5, 0, version=2)]
    got = rollout_metrics(exps)
    assert got["rollout/experiences"] == 3
    assert got["rollout/reward/mean"] == pytest.approx(0.5)
    assert got["rollout/reward/std"] == pytest.approx(statistics.pstdev([1.0, 0.0, 0.5]))
    assert got["rollout/response_tokens"] == 6 and got["rollout/total_tokens"] == 12
    assert got["rollout/acc/mean"] == 0.5 and got["rollout/model_version"] == 2
    assert rollout_metrics([]) == {"rollout/experiences": 0.0}


def test_find_checkpoints_orders_steps_and_skips_dirs_without_weights(tmp_path):
    from safetensors.torch import save_file

    for step, sub in ((10, "actor/huggingface"), (2, "huggingface"), (7, None)):
        d = tmp_path / f"global_step_{step}"
        if sub:
            (d / sub).mkdir(parents=True)
            save_file({"w": torch.zeros(1)}, str(d / sub / "model.safetensors"))
        else:
            d.mkdir()
    (tmp_path / "not_a_step").mkdir()
    assert find_checkpoints(str(tmp_path)) == [
        (2, str(tmp_path / "global_step_2" / "huggingface")),
        (10, str(tmp_path / "global_step_10" / "actor" / "huggingface")),
    ]
    assert find_checkpoints(str(tmp_path / "missing")) == []


def test_jsonl_monitor_and_plain_progress_lines(tmp_path):
    monitor = JsonlMonitor(tmp_path / "sub" / "metrics.jsonl")
    monitor.log({"a": 1.5, "n": 3, "bad": float("nan"), "skip": {"x": 1}}, step=4)
    monitor.close()
    assert json.loads((tmp_path / "sub" / "metrics.jsonl").read_text()) == {
        "step": 4,
        "a": 1.5,
        "n": 3,
        "bad": None,
    }
    out = io.StringIO()  # not a terminal: one plain line per step
    now = [100.0]
    progress = ProgressReporter(total_steps=5, stream=out, clock=lambda: now[0])
    progress.start(completed=1)  # resumed after step 1: the ETA counts the steps of this run
    metrics = {
        "rollout/tasks": 8,
        "rollout/response_tokens": 400,
        "time/explore_step": 2.0,
        "rollout/reward/mean": 0.25,
    }
    now[0] += 72.0
    progress.step(2, metrics)
    progress.close()
    # 72 s for 1 step, 3 steps to go
    assert out.getvalue() == (
        "explore step 2/5: 8 tasks (4.00 tasks/s), 400 tokens (200.0 tokens/s), 2.00 s, "
        "reward 0.2500, elapsed 1m12s, ETA 3m36s\n"
    )


def test_terminal_progress_uses_a_rich_bar():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    progress = ProgressReporter(total_steps=4, stream=out)
    assert progress.use_bar
    progress.step(1, {"rollout/tasks": 2, "time/explore_step": 1.0})
    progress.close()
    assert "tasks/s" in out.getvalue() and "tokens/s" in out.getvalue()


def test_bad_input_is_refused_before_anything_starts(tmp_path):
    cfg = checked(write_config(tmp_path))
    cfg.buffer.explorer_input.taskset.path = str(tmp_path / "missing.jsonl")
    with pytest.raises(LaunchInputError, match="missing.jsonl"):
        run_explore(cfg)
    cfg = checked(write_config(tmp_path))
    cfg.explorer.rollout_model.engine_type = "sglang"
    with pytest.raises(LaunchInputError, match=r"explorer.rollout_model.engine_type.*sglang"):
        run_explore(cfg)


# ---------------------------------------------------------------------- with Ray
@pytest.mark.slow
def test_explore_mode_from_yaml_writes_every_experience_to_sql(tmp_path, engine, plugin_dir):
    config = checked(write_config(tmp_path))  # 7 rows, batch 3, 1 epoch: 2 steps
    out = io.StringIO()
    last = run_explore(
        config,
        rollout_engines=[engine],
        auxiliary_engines=[],
        plugin_dirs=[plugin_dir],
        progress=ProgressReporter(stream=out),
    )
    assert last["rollout/tasks"] == 3 and last["rollout/experiences"] == 6
    assert last["runner/failed_tasks"] == 0

    exps = read_all(config.buffer.trainer_input.experience_buffer)
    assert len(exps) == 3 * 2 * 2  # batch_size x repeat_times x steps
    ids = sorted((e.eid.batch, e.eid.task, e.eid.run) for e in exps)
    # a SQL storage gives eid.task as text, as 0.6's does
    assert ids == [(b, str(t), r) for b in (1, 2) for t in range(3) for r in range(2)]
    assert len({e.eid.uid for e in exps}) == 12
    assert all(e.advantages is not None for e in exps)  # GRPO: advantages in the explorer
    rows = {e.info["task_index"]["index"] for e in exps}
    assert rows == set(range(6)) and {e.model_version for e in exps} == {0}

    lines = metrics_lines(config)
    assert [line["step"] for line in lines] == [0, 1, 2, 2]  # eval at 0, steps, eval at 2
    evals = [line for line in lines if "eval/evalset/reward/mean@3" in line]
    assert len(evals) == 2
    std0 = statistics.pstdev([1.0, 0.0, 0.5])
    for line in evals:
        assert line["eval/evalset/reward/mean@3"] == pytest.approx(0.25)
        assert line["eval/evalset/reward/best@3"] == pytest.approx(0.5)
        assert line["eval/evalset/reward/worst@3"] == pytest.approx(0.0)
        assert line["eval/evalset/reward/std@3"] == pytest.approx(std0 / 2)
        assert line["eval/evalset/accuracy/mean@3"] == pytest.approx(1 / 3)
        assert line["eval/evalset/accuracy/best@3"] == pytest.approx(0.5)
        assert line["eval/evalset/failed_tasks"] == 1
    step1 = lines[1]
    # rewards of rows 0-2, runs 0 and 1: [0, 1], [1, 1], [0, 1]
    assert step1["rollout/reward/mean"] == pytest.approx(4 / 6)
    # the learning-signal metrics are wired in: one of the 3 groups has identical rewards
    assert step1["rollout/identical_reward_groups"] == pytest.approx(1 / 3)
    assert step1["rollout/reward_groups"] == 3 and step1["rollout/all_identical_reward_steps"] == 0
    assert 0 <= step1["rollout/response_length/clip_ratio"] <= 1
    assert "rollout/all_clipped_steps" in step1
    assert step1["time/explore_step"] > 0 and step1["rollout/response_tokens"] > 0
    assert step1["experience_pipeline/experience_count"] == 6
    printed = out.getvalue().splitlines()
    assert [p.split(":")[0] for p in printed] == [
        "eval step 0 evalset",
        "explore step 1/2",
        "explore step 2/2",
        "eval step 2 evalset",
    ]


@pytest.mark.slow
def test_explore_stops_at_total_steps(tmp_path, engine, plugin_dir):
    config = checked(write_config(tmp_path, rows=40, total_steps=3))
    config.buffer.explorer_input.eval_tasksets = []
    explorer = Explorer(
        config, rollout_engines=[engine], auxiliary_engines=[], plugin_dirs=[plugin_dir]
    )
    assert explorer.total_steps == 3

    async def go():
        await explorer.prepare()
        try:
            await explorer.explore()
            assert await explorer.explore_step() is False
        finally:
            await explorer.shutdown()

    asyncio.run(go())
    assert explorer.step == 3
    assert len(read_all(config.buffer.trainer_input.experience_buffer)) == 3 * 3 * 2


@pytest.mark.slow
def test_bench_mode_evaluates_the_model_then_each_checkpoint(tmp_path, engine, plugin_dir):
    from safetensors.torch import save_file

    config = checked(write_config(tmp_path, mode="bench"))
    job = Path(config.checkpoint_job_dir)
    for step in (3, 1):
        weights = job / f"global_step_{step}" / "actor" / "huggingface"
        weights.mkdir(parents=True)
        save_file({"w": torch.zeros(2)}, str(weights / "model.safetensors"))
    (job / "global_step_2").mkdir()  # no weights: skipped
    try:
        results = run_bench(
            config,
            rollout_engines=[engine],
            auxiliary_engines=[],
            plugin_dirs=[plugin_dir],
            progress=ProgressReporter(stream=io.StringIO()),
        )
    finally:  # the engine is shared with other tests
        ray.get(engine.update_weights.remote(path=str(weights), version=0))
    assert list(results) == [0, 1, 3]
    for step, metrics in results.items():
        assert metrics["eval/evalset/model_version"] == step
        assert metrics["eval/evalset/reward/mean@3"] == pytest.approx(0.25)
    assert [line["step"] for line in metrics_lines(config)] == [0, 1, 3]
    assert not (Path(config.buffer.cache_dir) / "exps.db").exists()  # bench writes no data


def test_tasks_per_runner_comes_from_the_config(tmp_path):
    from trinity.common.config import ConfigError

    config = checked(write_config(tmp_path))
    assert config.explorer.tasks_per_runner == 1  # Trinity-RFT: one task per runner
    config.explorer.tasks_per_runner = 4
    assert Explorer(config).tasks_per_runner == 4
    assert Explorer(config, tasks_per_runner=2).tasks_per_runner == 2
    with pytest.raises(ConfigError, match="explorer.tasks_per_runner"):
        load_config({"explorer": {"tasks_per_runner": 0}})


@pytest.mark.slow
def test_the_command_line_runs_explore_mode(tmp_path, engine, plugin_dir, monkeypatch, capsys):
    """``trinity-launch`` in-process with this module's Ray: plugin loading, config checks,
    the explorer and the engines it starts (a fake engine stands in for the model)."""
    import trinity.launcher.engines as engines
    from trinity.launcher import cli
    from trinity.utils.plugin_loader import PLUGIN_DIRS_ENV

    started = []

    def fake_rollout_engines(config, env_vars=None, placement=None):
        # in the run's engine bundle, as the real engines are (this module's Ray has 2 CPUs,
        # one held by the ``engine`` fixture: a second 1-CPU actor outside would never start)
        assert placement is not None
        handle = create_engine_actor(
            EngineSettings(model_path="m", engine_type="fake"), options=placement.engine_options(0)
        )
        started.append(handle)
        return [handle]

    monkeypatch.setattr(engines, "create_rollout_engines", fake_rollout_engines)
    monkeypatch.setenv(PLUGIN_DIRS_ENV, "")  # restored afterwards: load_plugins sets it
    cfg = write_config(tmp_path, total_steps=1)
    assert cli.launch_main([str(cfg), "--plugin-dir", plugin_dir]) == 0
    out = capsys.readouterr().out
    assert "Config OK: mode=explore" in out and "Mode explore finished" in out
    config = checked(cfg)
    assert len(read_all(config.buffer.trainer_input.experience_buffer)) == 3 * 2
    assert len(started) == 1
    with pytest.raises(ray.exceptions.RayActorError):  # the explorer stopped its engine
        ray.get(started[0].ready.remote(), timeout=30)


def test_failed_tasks_are_replaced_up_to_min_batch_fraction(tmp_path, engine, plugin_dir):
    """Rows 0 and 1 always fail; with min_batch_fraction 1 the first step runs two
    replacement tasks (the next rows), which are not counted as steps."""
    config = checked(write_config(tmp_path, rows=12, total_steps=2))
    config.buffer.explorer_input.eval_tasksets = []
    rows = [
        {"prompt": f"q{i}", "rewards": [1.0, 1.0], **({"fail": True} if i < 2 else {})}
        for i in range(12)
    ]
    write_jsonl(Path(config.buffer.explorer_input.taskset.path), rows)
    config.explorer.min_batch_fraction = 1.0
    explorer = Explorer(
        config, rollout_engines=[engine], auxiliary_engines=[], plugin_dirs=[plugin_dir]
    )

    async def go():
        await explorer.prepare()
        try:
            await explorer.explore()
        finally:
            await explorer.shutdown()

    asyncio.run(go())
    assert explorer.step == 2
    step1, step2 = metrics_lines(config)
    assert step1["runner/tasks"] == 5 and step1["runner/failed_tasks"] == 2
    assert step1["rollout/replacement_tasks"] == 2 and step1["rollout/replacement_rounds"] == 1
    assert step1["rollout/experiences"] == 6  # 3 successful tasks x 2 runs
    assert step2["rollout/replacement_tasks"] == 0 and step2["runner/tasks"] == 3
    exps = read_all(config.buffer.trainer_input.experience_buffer)
    rows_run = sorted({e.info["task_index"]["index"] for e in exps})
    assert rows_run == [2, 3, 4, 5, 6, 7]  # replacements took rows 3 and 4; step 2 rows 5-7


def test_a_step_whose_every_task_fails_stops_the_run_with_the_error(tmp_path, engine, plugin_dir):
    config = checked(write_config(tmp_path, rows=12, total_steps=2))
    config.buffer.explorer_input.eval_tasksets = []
    write_jsonl(
        Path(config.buffer.explorer_input.taskset.path),
        [{"prompt": f"q{i}", "fail": True} for i in range(12)],
    )
    config.explorer.max_replacement_rounds = 1
    explorer = Explorer(
        config, rollout_engines=[engine], auxiliary_engines=[], plugin_dirs=[plugin_dir]
    )

    async def go():
        await explorer.prepare()
        try:
            await explorer.explore_step()
        finally:
            await explorer.shutdown()

    with pytest.raises(RuntimeError, match=r"explore step 1: none of its 5 tasks produced"):
        asyncio.run(go())
    assert explorer.step == 0  # the step was not committed
