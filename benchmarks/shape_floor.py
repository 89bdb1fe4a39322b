"""The floor of the product's shape: one bare vLLM engine, no Trinity code, no Ray.

Run by ``benchmarks/trl_compare.py`` as its ``floor`` side (a fresh process, like the others)::

    .venv/bin/python benchmarks/shape_floor.py SPEC.json

Trinity's architecture fixes two things a run cannot start without: a Ray session and a vLLM
engine in a Ray actor (``docs/architecture.md``). This script times the engine alone, in this
process (as if Ray, the actor hop, the trainer and every Trinity module cost nothing): it builds
vLLM's ``LLM`` for the model with the settings Trinity's CPU engine uses (float32, eager,
seeded, the engine core in-process) and generates one step's samples (``batch_size`` prompts x
``repeat_times``, ``max_response_tokens`` tokens, temperature 1.0, with logprobs) ``steps``
times, with the requests' options Trinity's engine uses (no incremental detokenization, flat
log-probs, each sample's text decoded once), and with the garbage collector handled as in
Trinity's processes (no automatic full collections until vLLM is imported, the heap frozen
before the build). Whatever Trinity does costs at least this. Then, after the engine and on its
own, it times ``ray.init`` with the arguments a local Trinity run
uses (``ray_init_s``): a run needs it too, though it may overlap the engine's start.

Writes one JSON line per generation to ``out``: ``{"step", "t"}`` where ``t`` is seconds since
``launched_at`` (the parent's clock when it launched this process), so the first line is the
floor of Trinity's start-up (launch to the end of the first step's generation) and the gaps
between lines the floor of its per-step time; the last line is ``{"ray_init_s": ...}``.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Any

_DEFAULT_GC_THRESHOLD = gc.get_threshold()


def _generate_steps(spec: dict[str, Any]) -> list[float]:
    """Build vLLM's engine and time ``spec["steps"]`` generations.

    Returns the wall-clock (``time.time()``) end of each generation.
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # as Trinity's CPU engine
    from vllm import LLM, SamplingParams

    # as Trinity's engine does before vLLM builds (vllm_engine.py): the imports' objects
    # frozen, so the full collections of vLLM's build do not walk them, and automatic full
    # collections back (paused from this process's start, as in Trinity's processes:
    # trinity.utils.gc_heap)
    gc.freeze()
    gc.set_threshold(*_DEFAULT_GC_THRESHOLD)
    llm = LLM(
        model=spec["model"],
        dtype="float32",
        enforce_eager=True,
        seed=spec["seed"],
        kv_cache_memory_bytes=512 * 1024**2,
        disable_log_stats=True,
    )
    rows = [json.loads(line) for line in open(spec["data"]) if line.strip()]
    prompts = [
        [{"role": "user", "content": rows[i % len(rows)]["question"]}]
        for i in range(spec["batch_size"])
    ]
    params = SamplingParams(
        n=spec["repeat_times"],
        temperature=spec["temperature"],
        max_tokens=spec["max_response_tokens"],
        logprobs=0,
        seed=spec["seed"],
        # as Trinity's engine asks (vllm_engine.py): no incremental detokenization, flat
        # log-probs, and each sample's text decoded once from its tokens below
        detokenize=False,
        flat_logprobs=True,
    )
    tokenizer = llm.get_tokenizer()
    ends = []
    for _ in range(spec["steps"]):
        for out in llm.chat(prompts, params, use_tqdm=False):
            for sample in out.outputs:
                tokenizer.decode(sample.token_ids, skip_special_tokens=True)
        ends.append(time.time())
    return ends


def main(spec_path: str) -> int:
    # no automatic full collections until vLLM is imported, as in Trinity's processes
    gc.set_threshold(_DEFAULT_GC_THRESHOLD[0], _DEFAULT_GC_THRESHOLD[1], 10_000)
    with open(spec_path) as f:
        spec = json.load(f)
    ends = _generate_steps(spec)
    import ray

    began = time.time()
    # the arguments trinity.launcher.modes.ray_init_kwargs gives a local run
    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        _system_config={"prestart_worker_first_driver": False},
    )
    ray_init_s = time.time() - began
    ray.shutdown()
    with open(spec["out"], "w") as f:
        for step, end in enumerate(ends, start=1):
            f.write(json.dumps({"step": step, "t": end - spec["launched_at"]}) + "\n")
        f.write(json.dumps({"ray_init_s": ray_init_s}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
