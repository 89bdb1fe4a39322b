"""Step time of ``mode: both`` on the quickstart task: synchronous vs overlapped vs fully async.

    .venv/bin/python benchmarks/step_bench.py [--steps 12] [--engine vllm|transformers]
        [--preset default|realistic]

Three runs of the quickstart's GRPO setup (a tiny Qwen2 built locally, ``--preset`` of
``trinity.launcher.tiny_model``; 8 arithmetic tasks x 8 samples per step, verl FSDP2 trainer on
CPU, memory weight sync every step), each for ``--steps`` steps, one after the other in the
same process tree:

* ``sync_offset: 0`` (on-policy, nothing overlaps): the wall time of a step (end of one train
  step to the end of the next) against the sum of its parts measured in the same run, pure
  generation (``time/explore_step``) + pure training (``time/train_step``). The ratio
  is the synchronous loop's overhead (scheduling, sync, queue): 1.0 is none.
* ``sync_offset: 1`` (the explorer one step ahead): the wall time of a step against
  ``max(generate, train)`` of the synchronous run; 1.0 means generation hides entirely behind
  training (or the other way round). On 2 shared CPU cores both sides compete for the same
  cores, so expect less overlap than on a machine with a GPU for each side.
* ``sync_style: fully_async`` (the explorer up to 2 batches ahead, weights pushed under
  requests in flight): its step against the synchronous one's (the speed-up) and against
  ``sync_offset: 1``'s; the trainer's idle share (``time/read_experience``, waiting for a
  batch, over the step) and the explorer's (the step minus its generation, over the step).

Medians over the steps after the first two (start-up). It is a measurement, not a test: the
exit status is 0 either way.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def run(workdir: Path, model: str, engine: str, steps: int, name: str, sync: dict) -> list[dict]:
    config = {
        "mode": "both",
        "project": "step-bench",
        "name": name,
        "checkpoint_root_dir": str(workdir / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 8, "optimizer": {"lr": 1e-3}},
        "model": {"model_path": model, "max_prompt_tokens": 32, "max_response_tokens": 4},
        "cluster": {"gpu_per_node": 0},
        "buffer": {
            "batch_size": 8,
            "total_steps": steps,
            "explorer_input": {
                "taskset": {
                    "name": "arithmetic",
                    "path": str(REPO / "examples" / "data" / "arithmetic"),
                    "split": "train",
                    "format": {"prompt_key": "question", "response_key": "answer"},
                    "default_workflow_type": "arithmetic_workflow",
                }
            },
        },
        "explorer": {
            "eval_on_startup": False,
            "rollout_model": {
                "engine_type": engine,
                "dtype": "float32",
                "enforce_eager": True,
                "seed": 42,
            },
        },
        "synchronizer": {"sync_method": "memory", "sync_interval": 1, **sync},
        "trainer": {"save_interval": 0, "save_hf_checkpoint": "never"},
    }
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    ray_tmp = tempfile.mkdtemp(prefix="tr-ray-")
    env = dict(os.environ, TRINITY_RAY_TMPDIR=ray_tmp)
    env.pop("RAY_ADDRESS", None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "trinity.launcher.cli", "run", "--config", str(path)],
            capture_output=True,
            text=True,
            env=env,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    if done.returncode != 0:
        sys.exit(f"the {name} run failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    metrics = workdir / "ckpt" / "step-bench" / name / "metrics.jsonl"
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows if key in r)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    try:
        import vllm  # noqa: F401

        default_engine = "vllm"
    except ImportError:
        default_engine = "transformers"
    parser.add_argument("--engine", default=default_engine)
    parser.add_argument("--preset", default="default", help="tiny_model preset")
    args = parser.parse_args()
    from trinity.launcher.tiny_model import PRESETS, build_tiny_model

    with tempfile.TemporaryDirectory(prefix="step-bench-") as tmp:
        workdir = Path(tmp)
        model = str(build_tiny_model(workdir / "model", PRESETS[args.preset]))
        runs = {
            "sync": {"sync_offset": 0},
            "offset-1": {"sync_offset": 1},
            "fully-async": {"sync_style": "fully_async"},
        }
        rows = {
            name: run(workdir, model, args.engine, args.steps, name, sync)[2:]
            for name, sync in runs.items()
        }
    sync, ahead, full = rows["sync"], rows["offset-1"], rows["fully-async"]
    generate = median(sync, "time/explore_step")
    train = median(sync, "time/train_step")
    wall_sync = median(sync, "time/step_wall")
    wall_ahead = median(ahead, "time/step_wall")
    wall_full = median(full, "time/step_wall")
    print(
        f"engine {args.engine}, preset {args.preset}, {args.steps} steps per run "
        f"(medians of steps 3..{args.steps})"
    )
    print(f"  generate {generate:.3f} s, train {train:.3f} s (sync_offset 0)")
    print(
        f"  sync_offset 0: step {wall_sync:.3f} s, ratio to generate + train: "
        f"{wall_sync / (generate + train):.2f}"
    )
    print(
        f"  sync_offset 1: step {wall_ahead:.3f} s, ratio to max(generate, train): "
        f"{wall_ahead / max(generate, train):.2f}"
    )
    print(
        f"  fully_async: step {wall_full:.3f} s; steps/s vs sync {wall_sync / wall_full:.2f}x, "
        f"vs sync_offset 1 {wall_ahead / wall_full:.2f}x"
    )
    for name, rs in rows.items():
        wall = median(rs, "time/step_wall")
        trainer_idle = median(rs, "time/read_experience") / wall if wall else 0.0
        explorer_idle = max(0.0, 1 - median(rs, "time/explore_step") / wall) if wall else 0.0
        print(f"  {name:11s} trainer idle {trainer_idle:5.1%}  explorer idle {explorer_idle:5.1%}")


if __name__ == "__main__":
    main()
