"""Plugins extend the value sets the registries own (issue 37): a ``--plugin-dir`` module that
registers a monitor (``trinity.utils.monitor.MONITOR``), a storage (``READER`` / ``WRITER``) or
an engine (``ENGINES``) makes its name a valid ``monitor_type`` / ``storage_type`` /
``engine_type``, and a run uses the plugin's classes: its monitor's ``log`` gets every step's
metrics, its writer takes the experiences, its engine answers the workflows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from trinity.common.engines import ENGINES
from trinity.launcher.engines import ENGINE_TYPES, EngineSettings, create_engine, engine_class

BIN = Path(sys.executable).parent

PLUGIN = '''
"""A user's plugin directory: a monitor, a storage and an engine, each leaving a trace."""
import json
import os

from trinity.buffer.reader import READER
from trinity.buffer.storage.file import FileReader, FileWriter
from trinity.buffer.writer import WRITER
from trinity.common.engines import ENGINES
from trinity.launcher.engines.hf_engine import TransformersEngine
from trinity.utils.monitor import MONITOR

TRACES = {traces!r}


def trace(kind, **data):
    with open(os.path.join(TRACES, kind + ".jsonl"), "a") as f:
        f.write(json.dumps(dict(data, pid=os.getpid())) + "\\n")


@MONITOR.register_module("my_monitor")
class MyMonitor:
    def __init__(self, config):
        trace("monitor", event="open", job_dir=config.checkpoint_job_dir)

    def log(self, metrics, step):
        trace("monitor", event="log", step=step, reward=metrics.get("rollout/reward/mean"))

    def close(self):
        trace("monitor", event="close")


@READER.register_module("my_storage")
class MyReader(FileReader):
    pass


@WRITER.register_module("my_storage")
class MyWriter(FileWriter):
    def __init__(self, config):
        trace("writer", path=config.path)
        super().__init__(config)


@ENGINES.register_module("my_engine")
class MyEngine(TransformersEngine):
    def __init__(self, settings):
        trace("engine", model=settings.model_path)
        super().__init__(settings)
'''


def write_plugins(tmp_path: Path) -> tuple[Path, Path]:
    plugins, traces = tmp_path / "plugins", tmp_path / "traces"
    plugins.mkdir()
    traces.mkdir()
    (plugins / "my_parts.py").write_text(PLUGIN.format(traces=str(traces)))
    return plugins, traces


def write_config(tmp_path: Path, model: str, **names: str) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"{a}+{a}="}) + "\n" for a in range(1, 5)))
    names = {"monitor": "my_monitor", "storage": "my_storage", "engine": "my_engine", **names}
    config = tmp_path / "config.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            mode: explore
            project: plugins
            name: run
            checkpoint_root_dir: {tmp_path / "ckpt"}
            algorithm:
              algorithm_type: grpo
              repeat_times: 2
            model:
              model_path: {model}
              max_prompt_tokens: 32
              max_response_tokens: 2
              max_model_len: 64
            buffer:
              batch_size: 2
              total_steps: 1
              explorer_input:
                taskset:
                  name: arithmetic
                  path: {tasks}
                  format: {{prompt_key: question}}
                  default_workflow_type: arithmetic_workflow
              trainer_input:
                experience_buffer:
                  name: experiences
                  storage_type: {names["storage"]}
                  path: {tmp_path / "experiences.jsonl"}
            explorer:
              runner_per_model: 1
              rollout_model:
                engine_type: {names["engine"]}
                engine_num: 1
                dtype: float32
            monitor:
              monitor_type: {names["monitor"]}
            """
        )
    )
    return config


def trinity_run(config: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "trinity"), "run", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TRINITY_PLUGIN_DIRS": ""},
    )


def traces_of(traces: Path, kind: str) -> list[dict]:
    path = traces / f"{kind}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_plugin_names_pass_the_dry_run_only_with_their_plugin_dir(tmp_path):
    plugins, _ = write_plugins(tmp_path)
    config = write_config(tmp_path, str(tmp_path / "model"))
    out = trinity_run(config, "--plugin-dir", str(plugins), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "Dry run: the config is valid" in out.stdout
    # without the plugin directory, each name is refused: field, value, the registered names
    out = trinity_run(config, "--dry-run")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "monitor.monitor_type: invalid value 'my_monitor'" in out.stderr
    assert "'tensorboard', 'wandb', 'mlflow' or 'swanlab'" in out.stderr
    assert "experience_buffer.storage_type: invalid value 'my_storage'" in out.stderr
    assert "explorer.rollout_model.engine_type: invalid value 'my_engine'" in out.stderr


def test_misspelt_plugin_names_are_refused_naming_the_registered_ones(tmp_path):
    plugins, _ = write_plugins(tmp_path)
    config = write_config(
        tmp_path,
        str(tmp_path / "model"),
        monitor="my_monitr",
        storage="my_storag",
        engine="my_engin",
    )
    out = trinity_run(config, "--plugin-dir", str(plugins), "--dry-run")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    err = out.stderr
    assert (
        "monitor.monitor_type: invalid value 'my_monitr'; allowed values: 'tensorboard', "
        "'wandb', 'mlflow', 'swanlab' or 'my_monitor'; did you mean 'my_monitor'?"
    ) in err
    assert (
        "buffer.trainer_input.experience_buffer.storage_type: invalid value 'my_storag'; "
        "allowed values: 'file', 'queue', 'priority_queue', 'sql' or 'my_storage'; "
        "did you mean 'my_storage'?"
    ) in err
    assert "explorer.rollout_model.engine_type: invalid value 'my_engin'" in err
    assert "'external'" in err and "'my_engine'; did you mean 'my_engine'?" in err


class PluginEngine:
    """Stands in for a plugin's engine class (user code: defined in this test module)."""

    def __init__(self, settings):
        self.settings = settings


def test_engines_are_built_through_the_registry():
    assert {"vllm", "vllm_async", "transformers", "external"} <= set(ENGINE_TYPES)
    assert ENGINE_TYPES["transformers"] == "trinity.launcher.engines.hf_engine:TransformersEngine"
    assert "my_test_engine" not in ENGINE_TYPES
    ENGINES.register_module("my_test_engine", PluginEngine)
    try:
        # the explorer's pre-start check reads ENGINE_TYPES: a plugin's engine is in it
        assert "my_test_engine" in ENGINE_TYPES
        assert ENGINE_TYPES["my_test_engine"] == f"{__name__}:PluginEngine"
        assert engine_class("my_test_engine") is PluginEngine
        engine = create_engine(EngineSettings(model_path="m", engine_type="my_test_engine"))
        assert isinstance(engine, PluginEngine)
    finally:
        ENGINES.unregister("my_test_engine")
    with pytest.raises(ValueError, match="unknown engine 'my_test_engine'; this release supports"):
        engine_class("my_test_engine")


@pytest.mark.slow
def test_a_run_uses_the_plugin_monitor_storage_and_engine(tmp_path, model_path):
    plugins, traces = write_plugins(tmp_path)
    config = write_config(tmp_path, model_path)
    ray_tmp = tempfile.mkdtemp(prefix="tr-ray-")  # Ray's socket paths must stay short
    try:
        done = subprocess.run(
            [str(BIN / "trinity"), "run", "--config", str(config), "--plugin-dir", str(plugins)],
            capture_output=True,
            text=True,
            timeout=600,
            env={
                **{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
                "TRINITY_RAY_TMPDIR": ray_tmp,
                "TRINITY_PLUGIN_DIRS": "",
                "OMP_NUM_THREADS": "1",
            },
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "Mode explore finished" in done.stdout

    events = traces_of(traces, "monitor")
    assert [e["event"] for e in events] == ["open", "log", "close"]
    assert events[1]["step"] == 1 and events[1]["reward"] is not None
    job_dir = tmp_path / "ckpt" / "plugins" / "run"
    assert events[0]["job_dir"] == str(job_dir)
    logged = [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["rollout/reward/mean"] for m in logged if "rollout/reward/mean" in m] == [
        events[1]["reward"]
    ]

    assert traces_of(traces, "writer"), "the plugin's writer was not used"
    rows = (tmp_path / "experiences.jsonl").read_text().splitlines()
    assert len(rows) == 2 * 2  # batch_size x repeat_times
    (engine,) = traces_of(traces, "engine")
    assert engine["model"] == model_path and engine["pid"] != events[0]["pid"]  # a Ray actor
