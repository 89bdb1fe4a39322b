"""Trainer memory, step time and weight-sync size: full fine-tuning against LoRA, in one run.

    .venv/bin/python benchmarks/lora_bench.py [--preset realistic] [--model DIR] [--rank 16]

Each side runs in a fresh process (so its peak is its own): the verl FSDP2 engine in
``Trainer``, GRPO without a KL loss, 16 sequences of 64 prompt + 448 response tokens, one
warm-up step, then the median of 3 steps. Peak memory is the GPU's allocator peak on CUDA
(``torch.cuda.max_memory_allocated``), the process's peak resident size elsewhere (which
includes the model's load). Printed per side: peak, s/step, parameters, trainable parameters,
and the bytes one weight sync moves: the full state dict, or for LoRA the adapter alone (what
``sync_method`` memory / checkpoint send when the engines serve base + adapter; the merged
state dict, what ``enable_lora: false`` sends, beside it); then LoRA's ratios to full.

It is a measurement, not a test: the exit status is 0 either way.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT, RESPONSE, ROWS = 64, 448, 16


def side(model: str, kind: str, rank: int) -> dict:
    """One side's numbers (run in its own process by :func:`main`)."""
    import torch

    from trinity.algorithm.resolve import apply_algorithm_defaults
    from trinity.common.config import load_config
    from trinity.common.experience import Experience
    from trinity.launcher.trainer.trainer import Trainer
    from trinity.launcher.trainer.verl_engine import VerlTrainEngine
    from trinity.launcher.trainer.verl_settings import VerlEngineSettings

    cuda = torch.cuda.is_available()
    cfg: dict = {
        "mode": "train",
        "algorithm": {"algorithm_type": "grpo", "kl_loss_fn": "none", "optimizer": {"lr": 1e-5}},
        "model": {"model_path": model, "max_model_len": PROMPT + RESPONSE},
        "cluster": {"gpu_per_node": 1 if cuda else 0},
        "buffer": {"batch_size": ROWS, "train_batch_size": ROWS},
    }
    if kind == "lora":
        cfg["model"]["lora_configs"] = [{"lora_rank": rank, "lora_alpha": 2 * rank}]
    config = apply_algorithm_defaults(load_config(cfg))
    settings = VerlEngineSettings.from_config(
        config, device="cuda" if cuda else "cpu", dtype="bfloat16" if cuda else "float32"
    )
    engine = VerlTrainEngine(settings)
    trainer = Trainer(config, engine, {})
    vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    g = torch.Generator().manual_seed(0)
    exps = [
        Experience(
            tokens=torch.randint(0, vocab, (PROMPT + RESPONSE,), generator=g),
            prompt_length=PROMPT,
            logprobs=torch.full((RESPONSE,), -3.0),
            advantages=torch.full((RESPONSE,), 1.0 if i % 2 else -1.0),
            action_mask=torch.ones(RESPONSE, dtype=torch.bool),
            reward=float(i % 2),
        )
        for i in range(ROWS)
    ]
    trainer.train_step(exps)  # kernels, optimizer state
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        trainer.train_step(exps)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    if cuda:
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    params = list(engine.module.parameters())
    trainable = [p for p in params if p.requires_grad]
    merged = sum(t.numel() * t.element_size() for t in engine.state_dict().values())
    adapter = engine.adapter_state_dict() if kind == "lora" else {}
    return {
        "kind": kind,
        "peak_mib": peak / 2**20,
        "peak_of": "GPU allocator" if cuda else "process RSS",
        "s_per_step": sorted(times)[1],
        "params": sum(p.numel() for p in params),
        "trainable": sum(p.numel() for p in trainable),
        "merged_mib": merged / 2**20,
        "sync_mib": (sum(t.numel() * t.element_size() for t in adapter.values()) or merged) / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="realistic", help="tiny_model preset")
    parser.add_argument("--model", default=None, help="a model directory instead of a preset")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--side", nargs=2, metavar=("MODEL", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print("RESULT " + json.dumps(side(args.side[0], args.side[1], args.rank)), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="lora-bench-") as tmp:
        model = args.model
        if model is None:
            from trinity.launcher.tiny_model import PRESETS, build_tiny_model

            model = str(build_tiny_model(Path(tmp) / "model", PRESETS[args.preset]))
        rows = {}
        for kind in ("full", "lora"):
            done = subprocess.run(
                [sys.executable, __file__, "--side", model, kind, "--rank", str(args.rank)],
                capture_output=True,
                text=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
            found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if done.returncode or not found:
                sys.exit(f"the {kind} side failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
            rows[kind] = json.loads(found[-1][len("RESULT ") :])
    full, lora = rows["full"], rows["lora"]
    print(f"model {args.model or args.preset}, LoRA rank {args.rank}, {full['peak_of']} peak")
    print("| side | peak MiB | s/step | trainable / all params | sync MiB | merged MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in (full, lora):
        print(
            f"| {r['kind']} | {r['peak_mib']:.0f} | {r['s_per_step']:.3f} | "
            f"{r['trainable']:,} / {r['params']:,} | {r['sync_mib']:.1f} | {r['merged_mib']:.1f} |"
        )
    print(
        f"LoRA / full: peak {lora['peak_mib'] / full['peak_mib']:.2f}, s/step "
        f"{lora['s_per_step'] / full['s_per_step']:.2f}, trainable "
        f"{lora['trainable'] / full['trainable']:.4f}, sync bytes "
        f"{lora['sync_mib'] / full['sync_mib']:.3f}"
    )


if __name__ == "__main__":
    main()
