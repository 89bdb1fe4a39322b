"""Peak GPU memory and s/step of ``mode: colocate`` against ``mode: both`` on the same device.

    .venv/bin/python benchmarks/colocate_bench.py CONFIG [--steps 20] [--engine vllm|transformers]
        [--model PATH] [--modes colocate both]

Runs ``CONFIG`` (e.g. ``examples/quickstart.yaml`` or ``examples/grpo_one_gpu.yaml``) once per
mode through ``trinity-launch``, for ``--steps`` train steps, with evaluation and checkpoints
off, and prints one Markdown row per mode for ``docs/gpu.md``:

* peak GPU memory: the largest ``memory.used`` that ``nvidia-smi`` reported (sampled every
  0.2 s, whole device, so every process of the run counts: the engine actor and the trainer
  in the driver); ``n/a`` without ``nvidia-smi``;
* s/step: the median ``time/step_wall`` (end of one train step to the end of the next) over
  the steps after the first two (start-up), and the medians of the parts (generate, train,
  sync, and in colocate the engine's sleep and wake).

Mode ``both`` on one GPU: the config check refuses ``cluster.gpu_per_node: 1`` in mode both
(no GPU left for the trainer), so that run gets ``gpu_per_node: 0`` ("detect from Ray"): the
engine actor takes the GPU from Ray and the trainer in the driver uses ``cuda:0`` as well, both
resident all the time. Mode colocate runs with the config's cluster section. It is a
measurement, not a test: the exit status is 0 unless a run fails.
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
import threading
import time
from pathlib import Path
from typing import Any, Optional

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PARTS = (
    "time/explore_step",
    "time/train_step",
    "time/sync",
    "time/colocate_sleep",
    "time/colocate_wake",
)


class GpuPeak:
    """The largest ``nvidia-smi`` ``memory.used`` (MiB, summed over devices) while running."""

    def __init__(self) -> None:
        self.peak: Optional[float] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=5,
                ).stdout
                used = sum(float(x) for x in out.split())
                self.peak = used if self.peak is None else max(self.peak, used)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                return  # no nvidia-smi: no GPU figure
            self._stop.wait(0.2)

    def __enter__(self) -> GpuPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def bench_config(source: Path, mode: str, args: argparse.Namespace, workdir: Path) -> Path:
    config = yaml.safe_load(source.read_text())
    config.update(mode=mode, name=f"bench-{mode}", checkpoint_root_dir=str(workdir / "ckpt"))
    config["continue_from_checkpoint"] = False
    if args.model:
        config.setdefault("model", {})["model_path"] = args.model
    buffer = config.setdefault("buffer", {})
    buffer["total_steps"] = args.steps
    inputs = buffer.setdefault("explorer_input", {})
    inputs["eval_tasksets"] = []
    for taskset in [inputs.get("taskset")] + list(inputs.get("tasksets") or []):
        if taskset and taskset.get("path") and not os.path.isabs(taskset["path"]):
            taskset["path"] = str(REPO / taskset["path"])
    config.setdefault("trainer", {})["save_interval"] = 0
    if args.engine:
        config.setdefault("explorer", {}).setdefault("rollout_model", {})["engine_type"] = (
            args.engine
        )
    if mode == "both":  # one GPU for both: let Ray place them (see the module docstring)
        config.setdefault("cluster", {})["gpu_per_node"] = 0
    path = workdir / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run(path: Path, workdir: Path) -> tuple[list[dict], Optional[float], float]:
    env = dict(os.environ, TRINITY_RAY_TMPDIR=tempfile.mkdtemp(prefix="tr-ray-"))
    env.pop("RAY_ADDRESS", None)
    began = time.perf_counter()
    with GpuPeak() as gpu:
        done = subprocess.run(
            [str(BIN / "trinity-launch"), str(path)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
    wall = time.perf_counter() - began
    shutil.rmtree(env["TRINITY_RAY_TMPDIR"], ignore_errors=True)
    if done.returncode != 0:
        sys.exit(f"{path.name} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    [metrics] = list((workdir / "ckpt").rglob(f"bench-{path.stem}*/metrics.jsonl"))
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    return [r for r in rows if "time/step_wall" in r], gpu.peak, wall


def median(rows: list[dict], key: str) -> Optional[float]:
    values = [r[key] for r in rows[2:] if key in r] or [r[key] for r in rows if key in r]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--engine", choices=("vllm", "transformers"), default=None)
    parser.add_argument("--model", default=None, help="model_path instead of the config's")
    parser.add_argument("--modes", nargs="+", default=["colocate", "both"])
    args = parser.parse_args()
    header = "| mode | peak GPU memory | s/step (median) | " + " | ".join(PARTS) + " | wall |"
    lines = [header, "|" + " --- |" * (len(PARTS) + 4)]
    with tempfile.TemporaryDirectory(prefix="colocate-bench-") as tmp:
        for mode in args.modes:
            workdir = Path(tmp) / mode
            workdir.mkdir()
            rows, peak, wall = run(bench_config(args.config, mode, args, workdir), workdir)
            parts = [median(rows, k) for k in PARTS]
            step = median(rows, "time/step_wall")
            cells = [
                mode,
                f"{peak / 1024:.2f} GiB" if peak is not None else "n/a",
                f"{step:.3f} s" if step is not None else "n/a",
                *(f"{p:.3f}" if p is not None else "-" for p in parts),
                f"{wall:.0f} s",
            ]
            lines.append("| " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
