"""``trinity.cli.launcher``: Trinity-RFT 0.6's typer command line and launch functions.

Scripts and code written for Trinity-RFT run ``python -m trinity.cli.launcher run --config X``
or use this module's names (``app``, ``MODE_MAP``, ``explore`` ... ``serve``, ``run_stage``);
here they drive our run layer, so ``run`` makes the run ``trinity run --config X`` makes: the
same checks (:func:`trinity.launcher.validation.check_loaded_config`), console session (engine
output to ``<job dir>/log/run.log``), preemption signals and exit status (0 done, 1 the run
failed, 2 bad input, 75 preempted, 130 interrupted). What follows Trinity-RFT instead:

* ``--plugin-dir DIR`` sets ``TRINITY_PLUGIN_DIRS``; a directory that does not exist is logged
  and skipped here, as Trinity-RFT does (``trinity run`` refuses it; the run's workflow
  runners, which import the same directories, then fail on it).
* The config is read with this module's :func:`load_config` and checked in place.
* Each run, and each stage of a staged config, joins Ray with Trinity-RFT's call --
  ``ray.init(address=cluster.ray_address, ignore_reinit_error=True, namespace=ray_namespace,
  runtime_env={"env_vars": config.get_envs()})`` -- and leaves it after. With ``auto`` and no
  Ray running here nothing is joined: the run starts its own local Ray, as ``trinity run``
  does (Trinity-RFT asks for ``ray start --head`` first).
* ``MODE_MAP[mode]`` is looked up at each call (``mock.patch.dict`` works); a stage after a
  training stage starts from the Hugging Face weights
  ``trinity.trainer.verl.utils.get_latest_hf_checkpoint_path`` finds (read at call time).
* ``--dlc``: :func:`trinity.launcher.dlc.setup_ray_cluster` before, and
  :func:`~trinity.launcher.dlc.stop_ray_cluster` after, in the namespace
  ``<project>-<group>-<name>``.

``studio`` serves Trinity Studio (``ConfigManager.run``), ``log`` follows a run's logs
(:class:`trinity.manager.log_manager.LogManager`), ``debug`` is our ``trinity debug``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

from trinity.cli.launch import (
    bench,
    both,
    console_options,
    explore,
    join_ray,
    latest_hf_weights,
    load_plugin_dirs,
    serve,
    train,
)
from trinity.common.config import Config, load_config
from trinity.common.constants import PLUGIN_DIRS_ENV_VAR
from trinity.launcher.dlc import setup_ray_cluster, stop_ray_cluster

__all__ = [
    "MODE_MAP",
    "PLUGIN_DIRS_ENV_VAR",
    "app",
    "bench",
    "both",
    "explore",
    "load_config",
    "main",
    "run_stage",
    "serve",
    "setup_ray_cluster",
    "stop_ray_cluster",
    "train",
]


app = typer.Typer(
    help="Trinity CLI (Trinity-RFT's commands): run a job, start the Studio, follow a run's "
    "logs, debug a workflow.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    pretty_exceptions_short=True,
)


#: mode name -> its launch function (looked up at each call)
MODE_MAP: dict[str, Callable[[Config], Any]] = {
    "explore": explore,
    "train": train,
    "both": both,
    "bench": bench,
    "serve": serve,
    "colocate": both,
}


def run_stage(config: Config) -> Any:
    """One run of a checked config (or one stage): join Ray, run its mode, leave Ray."""
    import ray

    joined = join_ray(config)
    try:
        return MODE_MAP[config.mode](config)
    finally:
        if joined:
            ray.shutdown()


# ---------------------------------------------------------------------- run
def _bad_input(message: str) -> int:
    from trinity.launcher.cli import EXIT_BAD_INPUT

    print(f"error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _check_and_run(cfg: Config, path: str) -> int:
    """``trinity run``'s checks on the loaded config, then its run (or its stages)."""
    from trinity.common.config import ConfigError
    from trinity.launcher.cli import _run_mode, _summary
    from trinity.launcher.stages import run_stages
    from trinity.launcher.validation import check_loaded_config
    from trinity.utils.registry import RegistryError

    try:
        warnings = check_loaded_config(cfg, path if os.path.isfile(path) else None)
    except ConfigError as exc:
        return _bad_input(str(exc))
    except (RegistryError, ValueError) as exc:
        return _bad_input(f"{path}: {exc}")
    print(_summary(cfg))
    for warning in warnings:
        print(f"  warning:   {warning}")
    if not cfg.stages:
        return _run_mode(cfg, path, run=lambda: run_stage(cfg), console=console_options())
    modes = zip(cfg.stages, cfg.iter_stages(), strict=True)
    serving = [s.stage_name for s, merged in modes if merged.run_mode.serves_api]
    if serving:  # as trinity run: no stage could follow it
        return _bad_input(f"{path}: stage {serving[0]!r} has mode 'serve', which never ends")
    return _run_mode(
        cfg,
        path,
        run=lambda: run_stages(cfg, run_stage, final_weights=latest_hf_weights),
        console=console_options(),
    )


@app.command()
def run(
    config: Annotated[str, typer.Option("--config", "-c", help="Path to the config file.")],
    dlc: Annotated[
        bool, typer.Option("--dlc", help="Running as a job of Alibaba PAI-DLC (several nodes).")
    ] = False,
    plugin_dir: Annotated[
        Optional[str],
        typer.Option("--plugin-dir", help="Directory of plugin modules (TRINITY_PLUGIN_DIRS)."),
    ] = None,
) -> None:
    """Run a job from a config file: the run trinity run --config makes."""
    from trinity.common.config import ConfigError
    from trinity.launcher.errors import LaunchInputError
    from trinity.utils.plugin_loader import PluginLoadError

    try:
        load_plugin_dirs(plugin_dir)
        cfg = load_config(config)
    except (ConfigError, PluginLoadError) as exc:
        raise typer.Exit(_bad_input(str(exc))) from None
    namespace = "-".join(p for p in (cfg.project, cfg.group, cfg.name) if p)
    if dlc:
        try:
            cfg.cluster.ray_address = setup_ray_cluster(namespace=namespace)
        except LaunchInputError as exc:
            raise typer.Exit(_bad_input(str(exc))) from None
    try:
        code = _check_and_run(cfg, config)
    finally:
        if dlc:
            stop_ray_cluster(namespace=namespace)
    if code:
        raise typer.Exit(code)


# ---------------------------------------------------------------------- other commands
@app.command("studio")
def studio_command(
    port: Annotated[int, typer.Option("--port", "-p", help="The Studio's port.")] = 8501,
) -> None:
    """Start Trinity Studio, the config generator (the studio extra of trinity-launcher)."""
    if importlib.util.find_spec("streamlit") is None:
        raise typer.Exit(
            _bad_input("Trinity Studio needs Streamlit: pip install 'trinity-launcher[studio]'")
        )
    from trinity.manager.config_manager import ConfigManager

    ConfigManager.run(port=port)


def _log_dir_of(cfg: Any) -> str:
    """``log.save_dir`` when the config sets one (the run writes there), else
    ``<checkpoint_job_dir>/log``; the config is not checked (it may name another machine's
    paths)."""
    save_dir = getattr(getattr(cfg, "log", None), "save_dir", None)
    if isinstance(save_dir, str) and save_dir:
        return save_dir
    return os.path.join(cfg.get_checkpoint_job_dir(), "log")


@app.command("log")
def log_command(
    log_dir: Annotated[str, typer.Option("--log-dir", "-d", help="The log directory.")] = "",
    config: Annotated[
        str, typer.Option("--config", "-c", help="A config file: its run's log directory.")
    ] = "",
    keyword: Annotated[
        Optional[str], typer.Option("--keyword", "-k", help="Only files whose name holds it.")
    ] = None,
    level: Annotated[
        str, typer.Option("--level", "-l", help="The lowest level shown as files grow.")
    ] = "INFO",
    last_n_lines: Annotated[
        int, typer.Option("--last-n-lines", "-n", help="Lines of each file shown first.")
    ] = 0,
    search_pattern: Annotated[
        Optional[str],
        typer.Option("--search-pattern", "-p", help="Show the lines holding it (and context)."),
    ] = None,
    no_color: Annotated[bool, typer.Option("--no-color", help="Plain output.")] = False,
) -> None:
    """Follow the log files of a run (Ctrl+C stops)."""
    from trinity.launcher.log_follow import LEVELS
    from trinity.manager.log_manager import LogManager

    if not config and not log_dir:
        raise typer.BadParameter("Either --config or --log-dir must be provided.")
    if level.upper() not in (*LEVELS, "WARN", "FATAL"):
        raise typer.BadParameter(f"{level!r}; allowed: {', '.join(LEVELS)}", param_hint="--level")
    if not log_dir:
        log_dir = _log_dir_of(load_config(config))
    if not os.path.exists(log_dir):
        raise FileNotFoundError(f"Log directory not found: {log_dir}")
    LogManager(
        log_dir=log_dir,
        keyword=keyword,
        min_level=level,
        color_output=not no_color,
        last_n_lines=last_n_lines,
        search_pattern=search_pattern,
    ).monitor()


@app.command("debug")
def debug_command(
    config: Annotated[str, typer.Option("--config", "-c", help="Path to the config file.")],
    module: Annotated[
        str, typer.Option("--module", "-m", help="workflow, inference_model or viewer.")
    ],
    plugin_dir: Annotated[
        Optional[str], typer.Option("--plugin-dir", help="Directory of plugin modules.")
    ] = None,
    output_dir: Annotated[
        str, typer.Option("--output-dir", "-o", help="Where results go.")
    ] = "debug_output",
    disable_overwrite: Annotated[
        bool, typer.Option("--disable-overwrite", help="Write to <output-dir>_<time> instead.")
    ] = False,
    enable_profiling: Annotated[
        bool, typer.Option("--enable-profiling", help="Profile the task (cProfile).")
    ] = False,
    port: Annotated[int, typer.Option("--port", "-p", help="The viewer's port.")] = 8502,
    output_file: Annotated[Optional[str], typer.Option("--output-file", hidden=True)] = None,
) -> None:
    """Run one task of a config's task set (or serve its models) in this process."""
    from trinity.launcher.debug import debug_main

    if output_file is not None:
        raise typer.BadParameter(
            "Trinity-RFT 0.5's viztracer HTML is not written here; --enable-profiling writes "
            "<output-dir>/profiling.prof (cProfile)",
            param_hint="--output-file",
        )
    args = argparse.Namespace(
        config=config,
        module=module,
        plugin_dir=plugin_dir,
        output_dir=output_dir,
        disable_overwrite=disable_overwrite,
        enable_profiling=enable_profiling,
        port=port,
    )
    code = debug_main(args)
    if code:
        raise typer.Exit(code)


def main() -> None:
    """``python -m trinity.cli.launcher``: the app; a missing log directory or a config that
    does not load is one ``error:`` line and exit status 2 (the app raises them)."""
    from trinity.common.config import ConfigError

    try:
        app()
    except (FileNotFoundError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
