"""Explorer throughput: response tokens/s of the explorer path against the bare engine on the
same prompts, measured in the same run on the same vLLM engine actor.

    .venv/bin/python benchmarks/explorer_bench.py [--tasks 8] [--repeat-times 16] [--max-tokens 128]

Both sides drive one ``VLLMEngine`` Ray actor (``create_engine_actor``, as the explorer's own
engines are started), serving a tiny random Qwen2 built locally (``build_tiny_model``; 256
hidden, 4 layers by default, so the engine's forward passes and not fixed per-call overheads
dominate a step, as they do in real runs). Every step samples ``--tasks`` prompts x ``n =
--repeat-times`` responses of exactly ``--max-tokens`` tokens (``ignore_eos``, temperature 1),
so both sides generate the same number of tokens from the same prompts:

* bare engine: every prompt submitted at once, ``asyncio.gather`` of ``engine.chat.remote``;
  the time is from submission to the last Experience received in this process;
* explorer path: ``Explorer.explore_step()`` (the explorer's engines injected): read the batch
  from a jsonl task set, run it on the ``WorkflowRunner`` actors with a workflow that makes the
  same ``chat`` call (registered from a plugin directory written here), ship the experiences
  back, compute GRPO advantages in the experience pipeline and write them (and the raw input)
  to SQLite. ``--runners x --tasks-per-runner`` tasks are in flight at once. The defaults are
  what ``trinity run`` does with its default ``explorer.runner_per_model: 8`` (one task per
  runner) on a GRPO batch of 8 tasks x 16 responses: every task of a step is in flight, as on
  the bare side. A batch larger than ``runner_per_model`` runs in waves (``--tasks 32
  --repeat-times 4`` measured 0.65): raise ``runner_per_model`` to match the batch.

The steps alternate (bare, explorer, explorer, bare, ...) after one untimed warm-up of each,
so drift in the machine's load hits both alike. The ratio is explorer tokens/s over bare
tokens/s, both summed over the timed steps (goal: >= 0.9). It is a measurement, not a test:
the exit status is 0 either way. About two minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

GOAL = 0.9
WORKFLOW_NAME = "explorer_bench_workflow"

# Imported by every WorkflowRunner actor (separate processes) through plugin_dirs.
PLUGIN = textwrap.dedent(
    f'''
    from trinity.common.workflows import WORKFLOWS, Workflow


    @WORKFLOWS.register_module("{WORKFLOW_NAME}")
    class ExplorerBenchWorkflow(Workflow):
        """One chat call sampling all repeat_times responses (n = repeat_times)."""

        is_async = True
        can_repeat = True
        can_reset = True

        def reset(self, task):
            self.task = task

        async def run_async(self):
            args = self.task.rollout_args
            exps = await self.model.chat_async(
                [{{"role": "user", "content": self.task.raw_task["question"]}}],
                n=self.repeat_times,
                max_tokens=args.max_tokens,
                temperature=args.temperature,
                ignore_eos=True,
            )
            for i, exp in enumerate(exps):
                exp.eid.run = self.run_id_base + i
                exp.reward = float(i % 2)  # GRPO needs reward variance within a group
            return exps
    '''
)


def prompts(n: int) -> list[str]:
    return [f"What is {i} + {2 * i + 1}? Answer with the number only." for i in range(n)]


def write_config(tmp: Path, args: argparse.Namespace, model: Path, plugin_dir: Path) -> Path:
    tasks = tmp / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"question": q}) + "\n" for q in prompts(args.tasks)))
    steps = args.steps + 1  # one warm-up step; every epoch is the same `--tasks` prompts
    text = textwrap.dedent(
        f"""
        mode: explore
        project: bench
        name: explorer_bench
        checkpoint_root_dir: {tmp / "ckpt"}
        algorithm:
          algorithm_type: grpo
          repeat_times: {args.repeat_times}
        model:
          model_path: {model}
          max_model_len: {args.max_model_len}
          max_response_tokens: {args.max_tokens}
        buffer:
          batch_size: {args.tasks}
          total_epochs: {steps}
          total_steps: {steps}
          explorer_input:
            taskset:
              name: bench
              path: {tasks}
              format:
                prompt_key: question
              rollout_args:
                temperature: 1.0
                max_tokens: {args.max_tokens}
              default_workflow_type: {WORKFLOW_NAME}
          trainer_input:
            experience_buffer:
              name: exps
              storage_type: sql
        explorer:
          runner_per_model: {args.runners}
          max_timeout: 600
          max_retry_times: 0
          eval_on_startup: false
          rollout_model:
            engine_type: vllm
            enforce_eager: true
            dtype: float32
            seed: {args.seed}
        """
    )
    path = tmp / "config.yaml"
    path.write_text(text)
    return path


def checked_config(path: Path) -> Any:
    from trinity.algorithm import apply_algorithm_defaults
    from trinity.common.config import load_config

    config = apply_algorithm_defaults(load_config(str(path)))
    config.check_and_update()
    return config


async def bare_step(engine: Any, args: argparse.Namespace) -> tuple[int, int, float]:
    """(response tokens, samples, seconds) of every prompt submitted to the engine at once."""
    start = time.perf_counter()
    groups = await asyncio.gather(
        *(
            engine.chat.remote(
                [{"role": "user", "content": q}],
                n=args.repeat_times,
                max_tokens=args.max_tokens,
                temperature=1.0,
                ignore_eos=True,
            )
            for q in prompts(args.tasks)
        )
    )
    seconds = time.perf_counter() - start
    exps = [e for g in groups for e in g]
    return sum(e.response_length for e in exps), len(exps), seconds


async def explorer_step(explorer: Any) -> tuple[int, int, float, dict[str, float]]:
    """(response tokens, samples, seconds, metrics) of one ``explore_step``."""
    start = time.perf_counter()
    if not await explorer.explore_step():
        raise RuntimeError("the task set ended before the last timed step")
    seconds = time.perf_counter() - start
    metrics = explorer.last_metrics
    tokens, samples = metrics["rollout/response_tokens"], metrics["rollout/experiences"]
    return int(tokens), int(samples), seconds, metrics


async def measure(engine: Any, config: Any, plugin_dir: Path, args: argparse.Namespace) -> None:
    from trinity.launcher.explorer import Explorer

    samples_per_step = args.tasks * args.repeat_times
    explorer = Explorer(
        config,
        rollout_engines=[engine],
        auxiliary_engines=[],
        plugin_dirs=[str(plugin_dir)],
        tasks_per_runner=args.tasks_per_runner,
    )
    started = time.perf_counter()
    await explorer.prepare()
    print(f"explorer ready in {time.perf_counter() - started:.1f} s", flush=True)
    # per side: [tokens, samples, seconds] summed over the timed steps
    totals = {"bare": [0, 0, 0.0], "explorer": [0, 0, 0.0]}
    per_step: list[float] = []
    try:
        await bare_step(engine, args)  # warm-up: first requests, runner clones, SQL tables
        await explorer_step(explorer)
        for step in range(args.steps):
            order = ("bare", "explorer") if step % 2 == 0 else ("explorer", "bare")
            rates, parts = {}, []
            for side in order:
                if side == "bare":
                    tokens, samples, seconds = await bare_step(engine, args)
                    detail = ""
                else:
                    tokens, samples, seconds, m = await explorer_step(explorer)
                    detail = (
                        f" (run_tasks {m['time/run_tasks']:.2f} s, "
                        f"pipeline {m.get('time/experience_pipeline/total', 0.0):.2f} s)"
                    )
                for i, value in enumerate((tokens, samples, seconds)):
                    totals[side][i] += value
                rates[side] = tokens / seconds
                lost = (
                    f", {samples_per_step - samples} samples lost"
                    if samples < samples_per_step
                    else ""
                )
                parts.append(
                    f"{side} {tokens} tok / {seconds:.2f} s = {rates[side]:.0f} tok/s{lost}{detail}"
                )
            per_step.append(rates["explorer"] / rates["bare"])
            print(f"step {step + 1}: " + " | ".join(parts), flush=True)
    finally:
        await explorer.shutdown()

    bare_rate = totals["bare"][0] / totals["bare"][2]
    expl_rate = totals["explorer"][0] / totals["explorer"][2]
    ratio = expl_rate / bare_rate
    print(f"bare engine    {bare_rate:8.0f} tok/s  (engine.chat x {args.tasks}, all at once)")
    print(f"explorer path  {expl_rate:8.0f} tok/s  (explore_step: runners, GRPO, SQLite writes)")
    expected = args.steps * samples_per_step
    for side, (_, samples, _) in totals.items():
        if samples < expected:
            print(
                f"note: the engine returned {samples} of {expected} samples on the {side} side "
                "(some requests returned fewer than n); tokens/s counts the tokens returned"
            )
    spread = f"per step {min(per_step):.2f}..{max(per_step):.2f}, median {statistics.median(per_step):.2f}"
    print(f"ratio explorer/bare = {ratio:.2f} (goal >= {GOAL}; {spread})")
    print(f"goal {'met' if ratio >= GOAL else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=8, help="prompts per step (batch_size)")
    parser.add_argument("--repeat-times", type=int, default=16, help="responses per prompt (n)")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens per response")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per side")
    parser.add_argument("--runners", type=int, default=8, help="explorer.runner_per_model")
    parser.add_argument(
        "--tasks-per-runner",
        type=int,
        default=0,
        help="concurrent tasks per runner (default: ceil(tasks / runners), all tasks in flight)",
    )
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4, help="attention heads (head_dim >= 32)")
    parser.add_argument("--max-model-len", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.tasks_per_runner <= 0:
        args.tasks_per_runner = math.ceil(args.tasks / args.runners)
    if args.hidden_size // args.heads < 32:
        parser.error("hidden_size / heads must be >= 32 (vLLM's CPU backend)")

    import ray
    import torch
    import vllm

    from trinity.launcher.engines import EngineSettings, create_engine_actor
    from trinity.launcher.tiny_model import TinyModelSpec, build_tiny_model

    with tempfile.TemporaryDirectory(prefix="explorer-bench-") as tmp_name:
        tmp = Path(tmp_name)
        spec = TinyModelSpec(
            hidden_size=args.hidden_size,
            intermediate_size=2 * args.hidden_size,
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            num_key_value_heads=max(1, args.heads // 2),
            max_position_embeddings=max(2048, args.max_model_len),
            seed=args.seed,
        )
        model = build_tiny_model(tmp / "model", spec)
        plugin_dir = tmp / "plugins"
        plugin_dir.mkdir()
        (plugin_dir / "explorer_bench_plugin.py").write_text(PLUGIN)
        config = checked_config(write_config(tmp, args, model, plugin_dir))

        device = "cuda" if torch.cuda.is_available() else "cpu"
        print(
            f"python {sys.version.split()[0]}, torch {torch.__version__}, vllm {vllm.__version__} "
            f"({device}), ray {ray.__version__}, {os.cpu_count()} CPUs"
        )
        print(
            f"model: tiny Qwen2, hidden {spec.hidden_size}, {spec.num_hidden_layers} layers, "
            f"{spec.num_attention_heads} heads ({spec.num_key_value_heads} KV), "
            f"max_model_len {args.max_model_len}"
        )
        print(
            f"per step: {args.tasks} prompts x n={args.repeat_times} x {args.max_tokens} tokens "
            f"(ignore_eos, temperature 1) = {args.tasks * args.repeat_times * args.max_tokens} "
            f"response tokens; explorer: {args.runners} runners x {args.tasks_per_runner} "
            f"tasks each, GRPO advantages, SQLite buffer; {args.steps} timed steps per side "
            "after 1 warm-up",
            flush=True,
        )

        ray.init(
            num_cpus=max(2, os.cpu_count() or 2),
            include_dashboard=False,
            namespace=f"explorer-bench-{uuid.uuid4().hex[:8]}",
            _temp_dir=str(tmp / "ray"),
            log_to_driver=False,
        )
        engine = None
        try:
            engine = create_engine_actor(
                EngineSettings(
                    model_path=str(model),
                    engine_type="vllm",
                    dtype="float32",
                    enforce_eager=True,
                    seed=args.seed,
                    max_model_len=args.max_model_len,
                    extra_engine_args={},
                ),
                num_cpus=0,
            )
            started = time.perf_counter()
            ray.get(engine.ready.remote())
            print(f"engine ready in {time.perf_counter() - started:.1f} s", flush=True)
            asyncio.run(measure(engine, config, plugin_dir, args))
        finally:
            if engine is not None:
                try:
                    ray.get(engine.shutdown.remote(), timeout=60)
                except Exception as exc:  # a dead engine has nothing left to release
                    print(f"engine shutdown: {exc}", file=sys.stderr)
                ray.kill(engine, no_restart=True)
            ray.shutdown()


if __name__ == "__main__":
    main()
