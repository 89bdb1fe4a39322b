"""The guides' OPMD algorithm and RewardFilter operator, as plugins, in a real run.

The snippets under ``snippets/`` (the guides' code verbatim) go into a plugin directory; the
config takes its ``algorithm`` section from the algorithm guide's YAML (``algorithm_type:
"opmd"``) and its ``data_processor`` section from the operator guide's YAML (``reward_filter``
with ``threshold: 0.1``), and ``trinity-launch config.yaml --plugin-dir DIR`` runs it in mode
``both``: a tiny Qwen2 built here, rollouts from the ``transformers`` engine in Ray actors,
training on verl's FSDP2 engine (CPU, gloo), weights synchronised through memory.

Helpers in ``real_run_plugins/`` complete the plugin directory: one takes the built-ins out
of the names the guide reuses (registries refuse a second class under a taken name; see
``_make_room_for_the_guide.py``), one records which classes hold those names in each process,
and a reward function makes the filter's split known in advance (``keep_flag_reward.py``).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")
pytest.importorskip("ray")

HERE = Path(__file__).parent
SNIPPETS = HERE / "snippets"
HELPERS = HERE / "real_run_plugins"
# the guides' code: the algorithm guide's advantage, loss (the masked_loss version) and type,
# the operator guide's filter
GUIDE_SNIPPETS = ("opmd_advantage_003", "opmd_policy_loss_003", "opmd_algorithm", "reward_filter")

TASKS = 12  # 3 explore steps of 4 tasks; every other task is marked keep
BATCH = 4
REPEAT = 4
KEPT_PER_STEP = BATCH // 2 * REPEAT  # 8: the trainer's batch
FILTERED_PER_STEP = BATCH * REPEAT - KEPT_PER_STEP


def _plugin_dir(root: Path) -> Path:
    plugins = root / "plugins"
    plugins.mkdir()
    for name in GUIDE_SNIPPETS:
        shutil.copy(SNIPPETS / f"{name}.py", plugins / f"{name}.py")
    for helper in HELPERS.glob("*.py"):
        shutil.copy(helper, plugins / helper.name)
    return plugins


def _tasks(path: Path) -> Path:
    rows = []
    for i in range(TASKS):
        a, b = i % 5, (i * 3) % 5
        rows.append({"question": f"{a}+{b}=", "answer": str(a + b), "keep": i % 2})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(root: Path, model_path: str, tasks: Path) -> Path:
    algorithm = yaml.safe_load((SNIPPETS / "guide_algorithm.yaml").read_text())["algorithm"]
    guide_operators = yaml.safe_load((SNIPPETS / "guide_operators.yaml").read_text())
    assert algorithm == {"algorithm_type": "opmd"}
    config = {
        "mode": "both",
        "project": "seed-plugins",
        "name": "opmd-reward-filter",
        "checkpoint_root_dir": str(root / "ckpt"),
        "algorithm": {**algorithm, "repeat_times": REPEAT, "optimizer": {"lr": 1e-3}},
        "data_processor": guide_operators["data_processor"],
        "model": {"model_path": model_path, "max_prompt_tokens": 32, "max_response_tokens": 4},
        "cluster": {"gpu_per_node": 0},
        "buffer": {
            "batch_size": BATCH,
            # the experiences the filter keeps of one explore step make one train step
            "train_batch_size": KEPT_PER_STEP,
            "total_epochs": 1,
            "explorer_input": {
                "taskset": {
                    "name": "arithmetic",
                    "path": str(tasks),
                    "format": {"prompt_key": "question", "response_key": "answer"},
                    "default_workflow_type": "arithmetic_workflow",
                    "default_reward_fn_type": "keep_flag_reward",
                }
            },
        },
        "explorer": {
            "runner_per_model": 1,  # one runner process: start-up dominates on 2 cores
            "eval_on_startup": False,
            "rollout_model": {"engine_type": "transformers", "dtype": "float32", "seed": 1},
        },
        "synchronizer": {"sync_method": "memory", "sync_interval": 1},
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    from trinity.launcher.tiny_model import build_tiny_model

    path = tmp_path_factory.mktemp("tiny-qwen2")
    build_tiny_model(path)
    return str(path)


@pytest.mark.slow
def test_guide_opmd_and_reward_filter_train_in_mode_both(tmp_path, tiny_model):
    plugins = _plugin_dir(tmp_path)
    config = _config(tmp_path, tiny_model, _tasks(tmp_path / "tasks.jsonl"))
    record_dir = tmp_path / "registrations"
    record_dir.mkdir()
    ray_tmp = tempfile.mkdtemp(prefix="tr-ray-")  # Ray's socket paths must stay short
    env = dict(
        os.environ,
        TRINITY_RAY_TMPDIR=ray_tmp,
        OMP_NUM_THREADS="1",
        SEED_PLUGINS_RECORD_DIR=str(record_dir),
    )
    for var in ("RAY_ADDRESS", "TRINITY_PLUGIN_DIRS"):
        env.pop(var, None)
    launch = Path(sys.executable).parent / "trinity-launch"
    try:
        proc = subprocess.Popen(
            [str(launch), str(config), "--plugin-dir", str(plugins)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            out, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the run did not finish in 600 s:\n{out[-3000:]}\n{err[-5000:]}")
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, out[-3000:] + err[-6000:]
    assert "Mode both finished" in out
    assert "algorithm: opmd (repeat_times=4)" in out

    # the driver (explorer pipeline + trainer) resolved the guide's names to the snippets
    records = {int(p.stem): json.loads(p.read_text()) for p in record_dir.glob("*.json")}
    assert proc.pid in records, sorted(records)
    expected = {
        "algorithm_type/opmd": "opmd_algorithm.OPMDAlgorithm",
        "advantage_fn/opmd": "opmd_advantage_003.OPMDGroupAdvantage",
        "policy_loss_fn/opmd": "opmd_policy_loss_003.OPMDPolicyLossFn",
        "experience_operators/reward_filter": "reward_filter.RewardFilter",
    }
    assert records[proc.pid] == expected
    assert all(r == expected for r in records.values())  # Ray workers load the same

    run = tmp_path / "ckpt" / "seed-plugins" / "opmd-reward-filter"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = TASKS // BATCH
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    for r in rows:
        # the RewardFilter dropped exactly the runs of the tasks marked keep: 0 ...
        assert r["rollout/experiences"] == BATCH * REPEAT
        assert r["experience_pipeline/input_count"] == BATCH * REPEAT
        assert r["experience_pipeline/reward_filter/filtered_count"] == FILTERED_PER_STEP
        assert r["experience_pipeline/filtered_count"] == FILTERED_PER_STEP
        assert r["experience_pipeline/experience_count"] == KEPT_PER_STEP
        # ... before the guide's advantage function, which saw only kept groups
        # (rewards in [1, 1.09]: their baselines lie there too); GroupAdvantage reports
        # per-group metrics as group_advantages/<key>/mean|max|min, as Trinity-RFT does
        baseline = r["experience_pipeline/advantage_fn/group_advantages/group_baseline/mean"]
        assert 1.0 <= baseline <= 1.09
        # the trainer stepped on the kept experiences with the guide's OPMD loss
        assert r["batch/size"] == KEPT_PER_STEP
        assert r["actor/opmd_loss"] == pytest.approx(r["actor/pg_loss"])
        assert math.isfinite(r["actor/opmd_loss"])
        assert "actor/kl_loss" in r  # the guide's default_config: kl_loss_fn k2
        assert r["actor/grad_norm"] > 0
    # OPMD's advantages are reward minus the group baseline: the loss is not trivially zero
    assert any(abs(r["actor/opmd_loss"]) > 0 for r in rows)


def test_guide_snippets_alone_collide_with_the_builtins(tmp_path):
    """Without the helper, the guide's classes cannot load as plugins next to the installed
    built-ins: the registry refuses the second ``opmd``, naming both, and nothing starts."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copy(SNIPPETS / "opmd_advantage_003.py", plugins / "opmd_advantage_003.py")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"algorithm": {"algorithm_type": "opmd"}}))
    env = {k: v for k, v in os.environ.items() if k != "TRINITY_PLUGIN_DIRS"}
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "trinity-launch"),
            str(config),
            "--plugin-dir",
            str(plugins),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        env={**env, "OMP_NUM_THREADS": "1"},
        timeout=180,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "opmd_advantage_003.OPMDGroupAdvantage" in done.stderr
    assert "already taken by trinity.algorithm.advantage_fn.opmd.OPMDGroupAdvantage" in done.stderr
