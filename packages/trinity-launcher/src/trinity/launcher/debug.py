"""``trinity debug``: try a workflow or the models of a config, in this process, without a run.

Trinity-RFT 0.6's command and options. ``--module workflow`` starts the config's rollout model
and auxiliary models (one engine each) in this process -- no Ray, so a debugger's breakpoints
in a workflow, reward function or plugin are hit -- reads the first task of the first train
task set, runs it once (``repeat_times`` 1) and writes what came out to ``--output-dir``
(default ``debug_output``): ``experiences.db`` (SQLite, table ``debug_buffer``: the schema a
run's experience buffer has), ``experiences.jsonl`` (prompt, response, reward and metrics of
each experience, readable as it is) and, with ``--enable-profiling``, ``profiling.prof`` (the
standard library's ``cProfile``; 0.6 writes a ``viztracer`` HTML trace, a package not shipped
here). The task's reward and metrics are printed; a workflow that raises prints its traceback
and exits 1. ``--module inference_model`` starts the models with their OpenAI-compatible API
on loopback, prints the addresses and serves until Ctrl+C. ``--module viewer`` opens
``trinity view`` on ``--output-dir``'s ``experiences.db`` (table ``debug_buffer``, decoded with
the config's model tokenizer) at ``--port``; 0.6 names that database ``debug_buffer.db``.

``--disable-overwrite`` writes to ``<output-dir>_<timestamp>`` when the output directory
already holds files; otherwise they are replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Optional

__all__ = ["MODULES", "add_debug_parser", "debug_main", "debug_workflow", "output_dir_for"]

MODULES = ("workflow", "inference_model", "viewer")
#: the table of ``experiences.db`` (0.6's name)
DEBUG_TABLE = "debug_buffer"


def add_debug_parser(sub: argparse._SubParsersAction) -> None:
    """The ``trinity debug`` sub-command's options (Trinity-RFT 0.6's names)."""
    debug = sub.add_parser(
        "debug",
        help="run one task of a config's task set (or serve its models) in this process",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    debug.add_argument("--config", "-c", required=True, help="the config file")
    debug.add_argument("--module", "-m", required=True, help=f"what to debug: {', '.join(MODULES)}")
    debug.add_argument(
        "--plugin-dir", default=None, help="a directory of plugin modules (workflows, rewards)"
    )
    debug.add_argument(
        "--output-dir", "-o", default="debug_output", help="where results go (debug_output)"
    )
    debug.add_argument(
        "--disable-overwrite",
        action="store_true",
        help="write to <output-dir>_<timestamp> when the output directory is not empty",
    )
    debug.add_argument(
        "--enable-profiling", action="store_true", help="profile the task (cProfile)"
    )
    debug.add_argument("--port", "-p", type=int, default=8502, help="the viewer's port (8502)")


def output_dir_for(output_dir: str, disable_overwrite: bool) -> Path:
    """The directory results go to (see ``--disable-overwrite``)."""
    path = Path(output_dir)
    if disable_overwrite and path.is_dir() and any(path.iterdir()):
        path = Path(f"{output_dir}_{time.strftime('%Y%m%d%H%M%S')}")
    return path


def _load(config_path: str, plugin_dir: Optional[str]) -> Any:
    """The config, checked as a run would check it, as one explore job of one engine each."""
    from trinity.common.config import load_config
    from trinity.utils.plugin_loader import load_plugins

    if plugin_dir:
        os.environ["TRINITY_PLUGIN_DIRS"] = plugin_dir
        load_plugins(plugin_dir)
    return load_config(
        config_path,
        check=True,
        overrides=["mode=explore", "explorer.rollout_model.engine_num=1"],
    )


async def _start_models(config: Any, openai_api: bool = False) -> tuple[Any, list[Any], list]:
    """The rollout model and the auxiliary models as workflows get them, engines in this
    process; returns ``(model, auxiliary models, engines)``."""
    import dataclasses

    from trinity.launcher.engines import create_engine, engine_settings
    from trinity.launcher.engines.wrapper import EngineModelWrapper

    specs = [engine_settings(config.explorer.rollout_model, config.model)]
    for i, aux in enumerate(config.explorer.auxiliary_models):
        specs.append(engine_settings(aux, None, name=aux.name or f"auxiliary_{i}"))
    engines = []
    for settings in specs:
        if openai_api:
            settings = dataclasses.replace(settings, enable_openai_api=True)
        engine = create_engine(settings)
        engines.append(engine)
        await engine.start()
    wrappers = [await EngineModelWrapper.create(engine) for engine in engines]
    return wrappers[0], wrappers[1:], engines


def _first_task(config: Any) -> Any:
    from trinity.buffer import get_taskset_reader

    tasksets = config.buffer.explorer_input.get_tasksets()
    if not tasksets:
        raise ValueError("trinity debug: the config has no train task set (buffer.explorer_input)")
    tasks = get_taskset_reader(tasksets[0]).read(batch_size=1)
    if not tasks:
        raise ValueError(f"trinity debug: task set {tasksets[0].name!r} holds no task")
    task = tasks[0]
    task.repeat_times = 1
    task.batch_id, task.task_id = "debug", 0
    return task


def _write(out: Path, experiences: list) -> None:
    from trinity.buffer import get_buffer_writer
    from trinity.common.config import ExperienceBufferConfig

    out.mkdir(parents=True, exist_ok=True)
    db = out / "experiences.db"
    db.unlink(missing_ok=True)
    writer = get_buffer_writer(
        ExperienceBufferConfig(
            name=DEBUG_TABLE, storage_type="sql", path=f"sqlite:///{db}", wrap_in_ray=False
        )
    )
    try:
        if experiences:
            writer.write(experiences)
    finally:
        writer.release()
    with open(out / "experiences.jsonl", "w", encoding="utf-8") as f:
        for exp in experiences:
            row = {
                "run": exp.eid.run,
                "prompt": exp.prompt_text,
                "response": exp.response_text,
                "reward": exp.reward,
                "metrics": exp.metrics,
                "tokens": len(exp.tokens),
                "prompt_length": exp.prompt_length,
            }
            f.write(json.dumps(row, default=str) + "\n")


async def debug_workflow(config: Any, out: Path, profile: bool = False) -> tuple[list, str]:
    """Run the first task once; write the results to ``out``. Returns the experiences and
    the error's traceback (``""``: none)."""
    from trinity.common.workflows.workflow import run_task_async

    task = _first_task(config)
    model, auxiliary, engines = await _start_models(config)
    experiences: list = []
    error = ""
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        experiences, _ = await run_task_async(
            task, model, auxiliary, concurrent_mode=config.explorer.concurrent_mode
        )
    except Exception:  # the point of debugging: show it, keep what was made
        error = traceback.format_exc()
    finally:
        if profiler is not None:
            profiler.disable()
            out.mkdir(parents=True, exist_ok=True)
            profiler.dump_stats(str(out / "profiling.prof"))
        for engine in engines:
            await engine.shutdown()
    _write(out, experiences)
    return experiences, error


async def _serve(config: Any) -> None:
    _, _, engines = await _start_models(config, openai_api=True)
    try:
        for engine in engines:
            address = await engine.get_api_address()
            name, kind = engine.settings.display_name, engine.settings.engine_type
            if address:
                print(f"{name}: OpenAI API at {address}/v1", flush=True)
            else:
                print(f"{name}: engine_type {kind!r} serves no OpenAI API (vllm does)", flush=True)
        # vLLM's server takes SIGINT / SIGTERM for itself on this thread's loop; they end
        # the serving here instead (the engines and their servers are shut down below)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print("Serving until Ctrl+C", flush=True)
        await stop.wait()
    finally:
        for engine in engines:
            await engine.shutdown()


def _view_output(args: argparse.Namespace) -> int:
    """``--module viewer``: ``trinity view`` on what ``--module workflow`` wrote to
    ``--output-dir`` (only the config's model path is read: the tokenizer)."""
    from trinity.common.config import ConfigError, load_config
    from trinity.launcher.viewer import view_main

    try:
        model_path = load_config(args.config).model.model_path
    except (ConfigError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    view = argparse.Namespace(
        url=str(Path(args.output_dir).resolve() / "experiences.db"),
        table=DEBUG_TABLE,
        tokenizer=model_path,
        config=None,
        schema="experience",
        port=args.port,
        address="127.0.0.1",
    )
    return view_main(view)


def debug_main(args: argparse.Namespace) -> int:
    """``trinity debug``: 0 done, 1 the workflow failed, 2 bad options or config."""
    from trinity.common.config import ConfigError

    if args.module not in MODULES:
        print(f"error: --module {args.module!r}; allowed: {', '.join(MODULES)}", file=sys.stderr)
        return 2
    if args.module == "viewer":
        return _view_output(args)
    try:
        config = _load(args.config, args.plugin_dir)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.module == "inference_model":
        try:
            asyncio.run(_serve(config))
        except KeyboardInterrupt:
            pass
        return 0
    out = output_dir_for(args.output_dir, args.disable_overwrite)
    try:
        experiences, error = asyncio.run(debug_workflow(config, out, args.enable_profiling))
    except ValueError as exc:  # no task set or no task
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for exp in experiences:
        print(
            f"run {exp.eid.run}: reward {exp.reward}, {len(exp.tokens) - exp.prompt_length} "
            f"response tokens, metrics {exp.metrics}\n  response: {exp.response_text!r}"
        )
    print(f"{len(experiences)} experience(s) written to {out}")
    if error:
        print(f"the workflow failed:\n{error}", file=sys.stderr)
        return 1
    return 0
