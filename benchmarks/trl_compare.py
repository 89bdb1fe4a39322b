"""Trinity against TRL's ``GRPOTrainer``: the same GRPO job, both sides in one invocation.

    ./scripts/bench_env.sh                                  # once: TRL's own environment
    .venv/bin/python benchmarks/trl_compare.py              # both configs, all sides
    .venv/bin/python benchmarks/trl_compare.py --configs quickstart --sides trinity,trl
    .venv/bin/python benchmarks/trl_compare.py --smoke      # a few steps of each (CI)

Two configs, each run by every side with the same model, task rows, batch (16 tasks x 8
samples), learning rate, optimizer (AdamW, betas, weight decay, clip 1.0, constant lr), entropy
bonus, no KL term, response length, temperature 1.0 and seed:

* ``quickstart``: ``examples/quickstart.yaml`` (the 76K-parameter arithmetic model, 2-token
  answers) without its evaluation task set (TRL evaluates nothing);
* ``realistic``: the ``realistic`` tiny-model preset (~24M parameters: hidden 512, 8 layers,
  16 heads) on the same task with answers of up to 64 tokens, lr 1e-4.

Sides: ``trinity`` (mode both, ``sync_offset: 0``), ``trinity-offset1`` (the explorer one
step ahead; on one CPU box both halves share the cores, so this is recorded, with no target),
``trinity-async`` (``sync_style: fully_async``: the explorer up to 2 batches ahead, weights
pushed under requests in flight),
``trl`` (TRL 1.16 ``GRPOTrainer``, transformers generation, in ``.venvs/benchmark``: TRL
cannot share an environment with verl, see ``pyproject.toml``), and ``floor``
(``benchmarks/shape_floor.py``: one bare vLLM engine with Trinity's CPU engine settings
generating each step's samples, no Trinity code, no trainer, no Ray; the least any run in the
product's shape, vLLM rollouts on Ray, can cost). Each side is a fresh process started by this
script; its clock starts when the process is launched. The floor learns nothing: its "time to
0.8" is its start-up plus its per-step time over the steps the learning sides needed to get
there, plus that many bare training steps (the train-step check's fastest bare side), and it
also reports what ``ray.init`` alone takes here.

For each side: **startup** (launch to the end of step 1), **s/step** (median time between
consecutive step ends, from step 3 on), **time to 0.8** (launch to the first step whose 5-step
mean reward is >= 0.8), **final reward** (mean of the last 5 steps), and Trinity/TRL ratios.
Trinity's step ends are when its ``metrics.jsonl`` record of the step appears (written when the
step's training ends); TRL's are its ``on_step_end`` callback. Trinity's sides also report
**CPU per step**: the CPU seconds of the run's whole process tree (the launch, Ray's
processes, the engine, the runners; by ``soak.py``'s roles) from step 3 to the last step,
read at most once a second as the step records arrive. Every process shares the machine's
cores, so that CPU over the cores is a bound under the step time that no overlap of
generation and training can beat (``cpu bound``).

Each config then runs the **train-step check**, in this process: Trinity's training engine
(``VerlTrainEngine`` with the settings the config derives) against bare Hugging Face
forward+backward+AdamW over the same 128 sequences (prompt 7 tokens, responses of 1 to the
config's response length, seeded), with ``--profile`` a cProfile of one Trinity step,
alternating, after a warm-up. The bare side is the fastest of three ways to run exactly the
real tokens: one sequence per call (no padding at all), length-sorted chunks of 16 rows padded
to their longest, and packed micro-batches (transformers' ``sdpa`` under its block mask, no KV
cache: each sequence sees only itself) of Trinity's token budget, capped where masked attention
is cheapest (``micro_batch_token_cap``). Target: Trinity's step within 1.2x of that.

Writes ``results.json``, ``curves.json``, ``curves.png`` (reward against step) and
``curves_time.png`` (against wall time) into ``--out``. A measurement, not a test: the exit status is 1 only when a side
failed to run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import yaml

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "examples" / "data" / "arithmetic" / "train.jsonl"
TRL_PYTHON = REPO / ".venvs" / "benchmark" / "bin" / "python"

#: What both sides share, per config (the quickstart's values from examples/quickstart.yaml).
CONFIGS: dict[str, dict[str, Any]] = {
    "quickstart": {
        "preset": "arithmetic",
        "steps": 150,
        "smoke_steps": 4,
        "max_response_tokens": 2,
        "lr": 1.5e-3,
    },
    "realistic": {
        "preset": "realistic",
        "steps": 12,
        "smoke_steps": 3,
        "max_response_tokens": 64,
        "lr": 1e-4,
    },
}
SHARED = {
    "batch_size": 16,
    "repeat_times": 8,
    "temperature": 1.0,
    "entropy_coef": 0.03,
    "weight_decay": 0.01,
    "betas": [0.9, 0.999],
    "grad_clip": 1.0,
    "seed": 42,
}
SIDES = ("trinity", "trinity-offset1", "trinity-async", "trl", "floor")
#: At most this many generations for the ``floor`` side (its per-step time settles quickly).
FLOOR_STEPS = 20
#: Seconds between two readings of a Trinity run's CPU (each walks its process tree, on the
#: cores the run is measured on).
CPU_READ_EVERY_S = 1.0
#: The roles :func:`cpu_summary` reports on their own; the rest (Ray's processes, and any other
#: process of the run) is ``other``.
CPU_ROLES = ("driver", "engine", "runner")


def _soak() -> Any:
    """``benchmarks/soak.py`` (its process roles), loaded by path: the benchmarks are
    scripts, not a package."""
    import importlib.util

    module = sys.modules.get("trinity_bench_soak")
    if module is None:
        spec = importlib.util.spec_from_file_location(
            "trinity_bench_soak", Path(__file__).with_name("soak.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


class CpuMeter:
    """CPU seconds (user + system) a launched run has used so far, by process role.

    The run's processes are the launch and its descendants (Ray's head processes, the
    workers, the engine and runner actors). A process that has exited keeps its last
    reading, so the totals never go down.
    """

    def __init__(self, root: int) -> None:
        self.root = root
        self._seen: dict[int, tuple[str, float]] = {}  # pid -> (role, CPU seconds)

    def read(self) -> dict[str, float]:
        """CPU seconds so far by role (``CPU_ROLES``, everything else summed as ``other``)."""
        import psutil

        soak = _soak()
        try:
            root = psutil.Process(self.root)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = []
        for proc in procs:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    role = self._seen.get(proc.pid, ("", 0.0))[0]
                    if not role or soak.provisional(role):
                        parent = self._seen.get(proc.ppid(), ("", 0.0))[0]
                        role = soak.role_of(
                            proc.pid, self.root, proc.name(), proc.cmdline(), parent
                        )
                    self._seen[proc.pid] = (role, times.user + times.system)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        out = dict.fromkeys((*CPU_ROLES, "other"), 0.0)
        for role, seconds in self._seen.values():
            key = role if role in CPU_ROLES else "other"
            out[key] += seconds
        return out


# ------------------------------------------------------------------------------- the sides


def trinity_config(name: str, side: str, model: str, steps: int, workdir: Path) -> Path:
    """``examples/quickstart.yaml`` with this config's model, length, lr and steps."""
    spec = CONFIGS[name]
    cfg = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    cfg["name"] = f"{name}-{side}"
    cfg["project"] = "trl-compare"
    cfg["checkpoint_root_dir"] = str(workdir / "ckpt")
    cfg["model"]["model_path"] = model
    cfg["model"]["max_response_tokens"] = spec["max_response_tokens"]
    algo = cfg["algorithm"]
    algo["repeat_times"] = SHARED["repeat_times"]
    algo["optimizer"] = {
        "lr": spec["lr"],
        "weight_decay": SHARED["weight_decay"],
        "betas": SHARED["betas"],
        "clip_grad": SHARED["grad_clip"],
        "lr_scheduler_type": "constant",
    }
    algo["entropy_loss_fn_args"] = {"entropy_coef": SHARED["entropy_coef"]}
    buffer = cfg["buffer"]
    buffer["batch_size"] = SHARED["batch_size"]
    buffer["total_steps"] = steps
    buffer["explorer_input"].pop("eval_tasksets", None)
    taskset = buffer["explorer_input"]["taskset"]
    taskset["path"] = str(DATA.parent)
    taskset["rollout_args"] = {"temperature": SHARED["temperature"]}
    cfg["explorer"]["eval_on_startup"] = False
    cfg["explorer"]["rollout_model"]["seed"] = SHARED["seed"]
    cfg["synchronizer"]["sync_offset"] = 1 if side == "trinity-offset1" else 0
    if side == "trinity-async":
        cfg["synchronizer"]["sync_style"] = "fully_async"
    cfg["trainer"]["save_interval"] = 0  # at the end only (TRL saves nothing)
    cfg["trainer"]["save_hf_checkpoint"] = "never"
    path = workdir / f"{name}-{side}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_trinity(name: str, side: str, model: str, steps: int, workdir: Path) -> dict[str, Any]:
    """Launch ``trinity-launch`` and time each step by its metrics record's arrival."""
    config = trinity_config(name, side, model, steps, workdir)
    metrics = workdir / "ckpt" / "trl-compare" / "cpu" / f"{name}-{side}" / "metrics.jsonl"
    log = (workdir / f"{name}-{side}.log").open("w")
    launcher = Path(sys.executable).with_name("trinity-launch")
    launched = time.time()
    proc = subprocess.Popen([str(launcher), str(config)], stdout=log, stderr=subprocess.STDOUT)
    meter = CpuMeter(proc.pid)
    seen: dict[int, dict[str, Any]] = {}
    offset = 0
    last_read = 0.0
    while True:
        done = proc.poll() is not None
        if metrics.exists():
            with metrics.open() as f:
                f.seek(offset)
                chunk = f.read()
            complete = chunk[: chunk.rfind("\n") + 1]
            offset += len(complete.encode())
            now = time.time() - launched
            newest = None
            for line in complete.splitlines():
                record = json.loads(line)
                if "rollout/reward/mean" in record and "time/train_step" in record:
                    newest = seen[int(record["step"])] = {"t": now, **record}
            if newest is not None and not done and now - last_read >= CPU_READ_EVERY_S:
                newest["cpu"] = meter.read()  # the run's CPU as this step's record arrived
                last_read = now
        if done:
            break
        time.sleep(0.02)
    log.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{side} ({name}) exited {proc.returncode}; see {log.name}")
    steps_out = [
        {
            "step": s,
            "t": seen[s]["t"],
            "reward": seen[s]["rollout/reward/mean"],
            "breakdown": {k: v for k, v in seen[s].items() if k.startswith(("time/", "train/"))},
            **({"cpu": seen[s]["cpu"]} if "cpu" in seen[s] else {}),
        }
        for s in sorted(seen)
    ]
    return {"steps": steps_out, "wall": time.time() - launched}


def _run_script(
    name: str, side: str, python: Path, script: str, spec: dict[str, Any], workdir: Path
) -> tuple[list[dict[str, Any]], float]:
    """Launch ``benchmarks/<script> SPEC.json`` with ``python``; return the JSON lines it wrote
    to the spec's ``out`` and the clock it was launched at (``launched_at`` in the spec)."""
    out = workdir / f"{name}-{side}.jsonl"
    out.unlink(missing_ok=True)
    spec_path = workdir / f"{name}-{side}.json"
    launched = time.time()
    spec = {**SHARED, **spec, "launched_at": launched, "data": str(DATA), "out": str(out)}
    spec_path.write_text(json.dumps(spec))
    log_path = workdir / f"{name}-{side}.log"
    with log_path.open("w") as log:
        code = subprocess.call(
            [str(python), str(REPO / "benchmarks" / script), str(spec_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if code != 0:
        raise RuntimeError(f"{side} ({name}) exited {code}; see {log_path}")
    return [json.loads(line) for line in out.read_text().splitlines() if line], launched


def run_trl(name: str, model: str, steps: int, workdir: Path, python: Path) -> dict[str, Any]:
    """Launch ``benchmarks/trl_side.py`` in TRL's environment."""
    if not python.exists():
        raise RuntimeError(
            f"TRL's environment is missing ({python}); create it with ./scripts/bench_env.sh"
        )
    spec = CONFIGS[name]
    lines, launched = _run_script(
        name,
        "trl",
        python,
        "trl_side.py",
        {
            "model": model,
            "steps": steps,
            "max_response_tokens": spec["max_response_tokens"],
            "lr": spec["lr"],
        },
        workdir,
    )
    return {"steps": lines, "wall": time.time() - launched}


def run_floor(name: str, model: str, steps: int, workdir: Path) -> dict[str, Any]:
    """Launch ``benchmarks/shape_floor.py``: one bare vLLM engine generating the steps."""
    lines, launched = _run_script(
        name,
        "floor",
        Path(sys.executable),
        "shape_floor.py",
        {
            "model": model,
            "steps": min(steps, FLOOR_STEPS),
            "max_response_tokens": CONFIGS[name]["max_response_tokens"],
        },
        workdir,
    )
    ray_init = next(line["ray_init_s"] for line in lines if "ray_init_s" in line)
    steps_out = [{**line, "reward": 0.0} for line in lines if "step" in line]
    return {"steps": steps_out, "wall": time.time() - launched, "ray_init_s": ray_init}


# ------------------------------------------------------------------------------ summaries


def summarize(run: dict[str, Any]) -> dict[str, Optional[float]]:
    """startup, s/step, time to a 5-step mean reward >= 0.8, final reward of one side."""
    steps = run["steps"]
    times = [s["t"] for s in steps]
    rewards = [float(s["reward"]) for s in steps]
    gaps = [b - a for a, b in zip(times[1:], times[2:], strict=False)]  # from step 3 on
    to_08 = None
    for i in range(4, len(rewards)):
        if statistics.fmean(rewards[i - 4 : i + 1]) >= 0.8:
            to_08 = times[i]
            break
    return {
        "steps": float(len(steps)),
        "startup_s": times[0] if times else None,
        "s_per_step": statistics.median(gaps) if gaps else None,
        "time_to_0.8_s": to_08,
        "first_reward": statistics.fmean(rewards[:5]) if rewards else None,
        "final_reward": statistics.fmean(rewards[-5:]) if rewards else None,
    }


def steps_to(run: dict[str, Any], time_s: Optional[float]) -> Optional[int]:
    """The step whose end is at ``time_s`` (a summary's ``time_to_0.8_s``), or ``None``."""
    if time_s is None:
        return None
    return next((s["step"] for s in run["steps"] if s["t"] == time_s), None)


def floor_summary(
    floor: dict[str, Any], steps_needed: Optional[int], train_s: Optional[float] = None
) -> dict[str, Any]:
    """The ``floor`` side's startup and s/step, and its time to 0.8 had it learned as fast as
    the sides that did: launch to its first generation, then ``steps_needed - 1`` more
    generations, plus ``steps_needed`` bare training steps of ``train_s`` each (the fastest
    bare HF step of the train-step check; 0 when it did not run), one after the other as in
    sync mode. No Ray, no Trinity code: a lower bound of any run in the product's shape.
    ``engine_time_to_0.8_s`` leaves the training out."""
    s = summarize(floor)
    out: dict[str, Any] = {
        "steps": s["steps"],
        "startup_s": s["startup_s"],
        "s_per_step": s["s_per_step"],
        "ray_init_s": floor["ray_init_s"],
        "bare_train_step_s": train_s,
        "steps_to_0.8": steps_needed,
        "engine_time_to_0.8_s": None,
        "time_to_0.8_s": None,
        "first_reward": None,
        "final_reward": None,
    }
    if steps_needed and s["startup_s"] is not None and s["s_per_step"] is not None:
        engine = s["startup_s"] + (steps_needed - 1) * s["s_per_step"]
        out["engine_time_to_0.8_s"] = engine
        out["time_to_0.8_s"] = engine + steps_needed * (train_s or 0.0)
    return out


def floor_ratios(sides: dict[str, dict[str, Any]], floor: dict[str, Any]) -> dict[str, Any]:
    """Each Trinity side against the floor (issue 41's targets: both <= 1.5): its time to 0.8
    over the floor's, and its s/step over the floor's generation plus bare training step."""
    gen_train = None
    if floor["s_per_step"] is not None and floor["bare_train_step_s"] is not None:
        gen_train = floor["s_per_step"] + floor["bare_train_step_s"]
    out: dict[str, Any] = {}
    for side, s in sides.items():
        if side.startswith("trinity"):
            out[f"time_to_0.8_{side}_over_floor"] = ratio(
                s["time_to_0.8_s"], floor["time_to_0.8_s"]
            )
            out[f"s_per_step_{side}_over_floor_gen_train"] = ratio(s["s_per_step"], gen_train)
    return out


def breakdown(run: dict[str, Any]) -> dict[str, float]:
    """Median of every ``time/*`` and ``train/*`` metric over Trinity's steps from step 3."""
    rows = [s["breakdown"] for s in run["steps"][2:]] or [s["breakdown"] for s in run["steps"]]
    keys = sorted({k for r in rows for k in r})
    return {k: statistics.median([r[k] for r in rows if k in r]) for k in keys}


def cpu_summary(run: dict[str, Any], cores: int) -> Optional[dict[str, Any]]:
    """CPU seconds per step of a Trinity run, by role, between its first CPU reading from
    step 3 on and its last one; ``bound_s_per_step`` is their total over ``cores``: the
    least time a step can take with every process sharing those cores. ``None`` without two
    readings a step apart."""
    read = [s for s in run["steps"] if "cpu" in s and s["step"] >= 3]
    if len(read) < 2 or read[-1]["step"] <= read[0]["step"]:
        return None
    first, last = read[0], read[-1]
    steps = last["step"] - first["step"]
    by_role = {k: (last["cpu"][k] - first["cpu"].get(k, 0.0)) / steps for k in last["cpu"]}
    total = sum(by_role.values())
    return {
        "steps": steps,
        "cpu_s_per_step": total,
        "by_role_s_per_step": by_role,
        "cores": cores,
        "bound_s_per_step": total / cores,
        "cores_busy": total * steps / (last["t"] - first["t"]) if last["t"] > first["t"] else None,
    }


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a and b else None


def fmt(value: Optional[float], unit: str = "") -> str:
    return "-" if value is None else f"{value:.3g}{unit}"


# ------------------------------------------------------------------ the train-step check


def train_step_check(
    name: str, model: str, workdir: Path, reps: int, profile: bool = False
) -> dict[str, Any]:
    """Trinity's train step against bare HF forward+backward over the same unpadded tokens
    (with ``profile``, also print a cProfile of one Trinity step)."""
    import torch

    # the engine may set this process's torch threads for its model (cpu_threads): the next
    # config's check starts from the process's own setting again
    threads = torch.get_num_threads()
    try:
        return _train_step_check(name, model, workdir, reps, profile)
    finally:
        torch.set_num_threads(threads)


def _train_step_check(
    name: str, model: str, workdir: Path, reps: int, profile: bool
) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    from trinity.common.config import load_config
    from trinity.common.experience import Experience, collate_experiences
    from trinity.launcher.trainer.verl_engine import (
        TrinityLoss,
        VerlEngineSettings,
        VerlTrainEngine,
    )
    from trinity.launcher.trainer.verl_settings import micro_batch_token_cap

    config = load_config(str(trinity_config(name, "trinity", model, 1, workdir)))
    config.check_and_update()
    settings = VerlEngineSettings.from_config(config)
    engine = VerlTrainEngine(settings)
    loss = TrinityLoss.from_algorithm(config.algorithm)

    g = torch.Generator().manual_seed(0)
    max_r = CONFIGS[name]["max_response_tokens"]
    exps = []
    for _ in range(SHARED["batch_size"] * SHARED["repeat_times"]):
        r = int(torch.randint(1, max_r + 1, (1,), generator=g))
        exps.append(
            Experience(
                tokens=torch.randint(3, 20, (7 + r,), generator=g),
                prompt_length=7,
                reward=0.0,
                logprobs=-torch.rand(r, generator=g),
                advantages=torch.randn(r, generator=g),
                action_mask=torch.ones(r),
            )
        )
    hf = AutoModelForCausalLM.from_pretrained(
        model, attn_implementation="sdpa", dtype=torch.float32
    )
    hf.train()
    opt = torch.optim.AdamW(hf.parameters(), lr=1e-6)
    budget = int(settings.max_token_len_per_gpu or 0)
    # bare packed micro-batches attend under transformers' block mask: the budget best for that
    bare_budget = min(budget, micro_batch_token_cap(hf.config.hidden_size))

    def response_loss(logits: torch.Tensor, spans: list[tuple[int, int]], ids: torch.Tensor):
        # log-prob of each response token (what a policy loss reads), summed: one backward
        total = logits.new_zeros(())
        for start, end in spans:
            lp = torch.log_softmax(logits[start - 1 : end - 1].float(), -1)
            total = total + lp.gather(-1, ids[start:end, None]).sum()
        return total

    def bare_per_sequence() -> float:
        t0 = time.perf_counter()
        for e in exps:
            ids = e.tokens.long()
            logits = hf(input_ids=ids[None]).logits[0]
            response_loss(logits, [(e.prompt_length, len(ids))], ids).backward()
        opt.step()
        opt.zero_grad()
        return time.perf_counter() - t0

    def bare_sorted_chunks(rows: int = 16) -> float:
        t0 = time.perf_counter()
        ordered = sorted(exps, key=lambda e: len(e.tokens))
        for i in range(0, len(ordered), rows):
            part = ordered[i : i + rows]
            width = max(len(e.tokens) for e in part)
            ids = torch.zeros(len(part), width, dtype=torch.long)
            mask = torch.zeros(len(part), width, dtype=torch.long)
            for j, e in enumerate(part):
                ids[j, : len(e.tokens)] = e.tokens
                mask[j, : len(e.tokens)] = 1
            logits = hf(input_ids=ids, attention_mask=mask).logits
            total = logits.new_zeros(())
            for j, e in enumerate(part):
                total = total + response_loss(logits[j], [(e.prompt_length, len(e.tokens))], ids[j])
            total.backward()
        opt.step()
        opt.zero_grad()
        return time.perf_counter() - t0

    def bare_packed() -> float:
        t0 = time.perf_counter()
        chunk: list[Any] = []
        chunks = []
        for e in exps:
            if chunk and sum(len(c.tokens) for c in chunk) + len(e.tokens) > max(bare_budget, 1):
                chunks.append(chunk)
                chunk = []
            chunk.append(e)
        chunks.append(chunk)
        for part in chunks:
            ids = torch.cat([e.tokens for e in part]).long()
            pos = torch.cat([torch.arange(len(e.tokens)) for e in part])
            # no KV cache, so transformers masks each sequence off from the others
            logits = hf(input_ids=ids[None], position_ids=pos[None], use_cache=False).logits[0]
            spans, at = [], 0
            for e in part:
                spans.append((at + e.prompt_length, at + len(e.tokens)))
                at += len(e.tokens)
            response_loss(logits, spans, ids).backward()
        opt.step()
        opt.zero_grad()
        return time.perf_counter() - t0

    last_metrics: dict[str, float] = {}

    def trinity() -> float:
        t0 = time.perf_counter()
        last_metrics.update(engine.train_step(collate_experiences(exps), loss, 1.0))
        return time.perf_counter() - t0

    sides = {
        "trinity": trinity,
        "bare: per sequence": bare_per_sequence,
        "bare: sorted chunks of 16": bare_sorted_chunks,
        f"bare: packed, {bare_budget}-token micro-batches": bare_packed,
    }
    for fn in sides.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(reps):
        for k, fn in sides.items():
            times[k].append(fn())
    medians = {k: statistics.median(v) for k, v in times.items()}
    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(trinity)
        print(f"[{name}] profile of one Trinity train step (cumulative time):")
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    bare = min((v, k) for k, v in medians.items() if k != "trinity")
    real = sum(len(e.tokens) for e in exps)
    return {
        "medians_s": medians,
        "fastest_bare": bare[1],
        "ratio_trinity_over_bare": medians["trinity"] / bare[0],
        "real_tokens": real,
        "padded_tokens": len(exps) * max(len(e.tokens) for e in exps),
        "token_budget": budget,
        "micro_batches": last_metrics.get("train/micro_batches"),
        "breakdown": {k: v for k, v in last_metrics.items() if k.startswith("time/train")},
    }


# ---------------------------------------------------------------------------------- main


def plot(curves: dict[str, dict[str, Any]], out: Path) -> None:
    """Reward against step (``curves.png``) and against wall time since launch
    (``curves_time.png``), one line per config and side (``trinity.launcher.plot``)."""
    from trinity.launcher.plot import plot_curves

    def points(run: dict[str, Any], x: str) -> list[tuple[float, float]]:
        return [(s[x], float(s["reward"])) for s in run["steps"]]

    plot_curves({k: points(r, "step") for k, r in curves.items()}, str(out / "curves.png"))
    plot_curves(
        {k: points(r, "t") for k, r in curves.items()},
        str(out / "curves_time.png"),
        xlabel="seconds since launch",
    )


def _cores() -> int:
    """The cores this process (and the runs it launches) may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="quickstart,realistic")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--steps", type=int, default=None, help="steps of every config")
    parser.add_argument("--smoke", action="store_true", help="a few steps, trinity and trl")
    parser.add_argument("--reps", type=int, default=3, help="train-step check repetitions")
    parser.add_argument("--no-train-check", action="store_true")
    parser.add_argument("--profile", action="store_true", help="cProfile one Trinity step")
    parser.add_argument("--trl-python", type=Path, default=TRL_PYTHON)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    sides = [s for s in args.sides.split(",") if s]
    if args.smoke and args.sides == ",".join(SIDES):
        sides = ["trinity", "trl", "floor"]
    for name in configs:
        if name not in CONFIGS:
            parser.error(f"--configs: unknown {name!r}; allowed: {', '.join(CONFIGS)}")
    for side in sides:
        if side not in SIDES:
            parser.error(f"--sides: unknown {side!r}; allowed: {', '.join(SIDES)}")
    out = args.out or Path(tempfile.mkdtemp(prefix="trl-compare-"))
    out.mkdir(parents=True, exist_ok=True)

    from trinity.launcher.tiny_model import PRESETS, build_tiny_model

    results: dict[str, Any] = {"configs": {}, "machine": {"cpus": _cores()}}
    curves: dict[str, dict[str, Any]] = {}
    failed = False
    for name in configs:
        spec = CONFIGS[name]
        model = str(out / "models" / spec["preset"])
        build_tiny_model(model, PRESETS[spec["preset"]])
        steps = args.steps or (spec["smoke_steps"] if args.smoke else spec["steps"])
        entry: dict[str, Any] = {"steps": steps, "sides": {}}
        runs: dict[str, dict[str, Any]] = {}
        for side in sides:
            print(f"[{name}] {side}: {steps} steps ...", flush=True)
            workdir = out / "runs"
            workdir.mkdir(exist_ok=True)
            try:
                if side == "trl":
                    run = run_trl(name, model, steps, workdir, args.trl_python)
                elif side == "floor":
                    runs[side] = run_floor(name, model, steps, workdir)
                    continue  # summarised below, with the step count the others needed
                else:
                    run = run_trinity(name, side, model, steps, workdir)
            except RuntimeError as exc:
                print(f"[{name}] {side} FAILED: {exc}", flush=True)
                failed = True
                continue
            summary = summarize(run)
            if side not in ("trl", "floor"):
                summary["breakdown"] = breakdown(run)
                summary["cpu"] = cpu_summary(run, _cores())
            entry["sides"][side] = summary
            runs[side] = run
            curves[f"{name}/{side}"] = run
        t, r = entry["sides"].get("trinity"), entry["sides"].get("trl")
        if t and r:
            entry["ratios"] = {
                "trinity_steps_per_s_over_trl": ratio(r["s_per_step"], t["s_per_step"]),
                "startup_trinity_over_trl": ratio(t["startup_s"], r["startup_s"]),
                "time_to_0.8_trinity_over_trl": ratio(t["time_to_0.8_s"], r["time_to_0.8_s"]),
            }
        if not args.no_train_check:
            print(f"[{name}] train-step check ...", flush=True)
            entry["train_step_check"] = train_step_check(
                name, model, out / "runs", 1 if args.smoke else args.reps, args.profile
            )
        if "floor" in runs:
            needed = [
                steps_to(runs[k], entry["sides"][k]["time_to_0.8_s"])
                for k in ("trinity", "trl")
                if k in entry["sides"]
            ]
            known = [n for n in needed if n]
            check = entry.get("train_step_check")
            bare = (
                min(v for k, v in check["medians_s"].items() if k != "trinity") if check else None
            )
            f = entry["sides"]["floor"] = floor_summary(
                runs["floor"], min(known) if known else None, bare
            )
            entry.setdefault("ratios", {}).update(floor_ratios(entry["sides"], f))
            if r:
                entry.setdefault("ratios", {}).update(
                    {
                        "floor_startup_over_trl_time_to_0.8": ratio(
                            f["startup_s"], r["time_to_0.8_s"]
                        ),
                        "floor_time_to_0.8_over_trl": ratio(f["time_to_0.8_s"], r["time_to_0.8_s"]),
                    }
                )
        results["configs"][name] = entry

    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "curves.json").write_text(json.dumps(curves))
    if curves:
        plot(curves, out)
    print()
    for name, entry in results["configs"].items():
        print(f"== {name} ({entry['steps']} steps)")
        print(
            f"{'side':18s} {'startup':>9s} {'s/step':>8s} {'to 0.8':>8s} {'first5':>7s} {'last5':>7s}"
        )
        for side, s in entry["sides"].items():
            print(
                f"{side:18s} {fmt(s['startup_s'], 's'):>9s} {fmt(s['s_per_step'], 's'):>8s} "
                f"{fmt(s['time_to_0.8_s'], 's'):>8s} {fmt(s['first_reward']):>7s} "
                f"{fmt(s['final_reward']):>7s}"
            )
        for key, value in (entry.get("ratios") or {}).items():
            print(f"  {key}: {fmt(value)}")
        floor = entry["sides"].get("floor")
        if floor:
            print(
                f"  floor: time to 0.8 = {floor['steps_to_0.8'] or '-'} steps of the engine "
                f"({fmt(floor['engine_time_to_0.8_s'], 's')}) and of bare training "
                f"({fmt(floor['bare_train_step_s'], 's')} each); ray.init alone "
                f"{fmt(floor['ray_init_s'], 's')}"
            )
        for side, s in entry["sides"].items():
            if "breakdown" in s:
                parts = ", ".join(f"{k}={v:.3g}" for k, v in s["breakdown"].items())
                print(f"  {side} breakdown (medians): {parts}")
            cpu = s.get("cpu")
            if cpu:
                roles = ", ".join(f"{k} {v:.3f}s" for k, v in cpu["by_role_s_per_step"].items())
                print(
                    f"  {side} CPU per step: {cpu['cpu_s_per_step']:.3f}s ({roles}); cpu bound "
                    f"on {cpu['cores']} cores {cpu['bound_s_per_step']:.3f}s/step against "
                    f"{fmt(s['s_per_step'], 's')} measured ({fmt(cpu['cores_busy'])} cores busy)"
                )
        check = entry.get("train_step_check")
        if check:
            print(
                f"  train step: trinity {check['medians_s']['trinity']:.3f}s vs "
                f"{check['fastest_bare']} {min(v for k, v in check['medians_s'].items() if k != 'trinity'):.3f}s"
                f" -> ratio {check['ratio_trinity_over_bare']:.2f} (target <= 1.2); "
                f"{check['real_tokens']} real / {check['padded_tokens']} padded tokens, "
                f"{check['micro_batches']} micro-batches of <= {check['token_budget']} tokens"
            )
            for k, v in check["medians_s"].items():
                print(f"    {k}: {v:.3f}s")
    print(f"\nresults: {out / 'results.json'}; curves: {out / 'curves.png'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
