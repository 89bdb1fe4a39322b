"""The ``trinity`` and ``trinity-launch`` commands.

``trinity-launch config.yaml`` and ``trinity run --config config.yaml`` load plugin directories,
then load and validate the config, then run it. This release runs modes ``explore`` (write
experiences for an external trainer, evaluate on schedule), ``bench`` (evaluate the model and
its checkpoints), ``train`` (SFT, DPO, off-policy RL from a data set or buffer on verl's FSDP2
engine), ``both`` (explorer and trainer together) and ``colocate`` (the same, taking turns on
shared devices), and ``stages:`` (several of those in order) -- all through one run layer
(:mod:`trinity.launcher.session`); for ``serve`` a valid config is reported and nothing is run -- the command says so
plainly instead of pretending. ``trinity studio``, ``trinity plot`` and ``trinity convert`` are
the other commands.

Output: the console shows Trinity's own progress (a live bar on a terminal, summary lines
otherwise), its warnings (each distinct one once) and errors; engine and worker output (vLLM,
Ray workers, verl, transformers) goes to ``<checkpoint_job_dir>/log/run.log``. ``--verbose``
leaves that output on the console; ``--log-level`` sets the lowest level of Trinity's records
shown there (see :mod:`trinity.launcher.logs`).

Exit status: 0 on success; 2 for bad input (a bad config, a missing plugin directory or task-set
file, ...), with one message naming each bad field and never a traceback; 1 when a started run
fails (with the traceback, which is what one needs to debug it); 130 when interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from trinity.common.config import Config, ConfigError
from trinity.launcher.validation import check_component_names, validate_config  # noqa: F401
from trinity.utils.plugin_loader import PluginLoadError
from trinity.utils.registry import RegistryError

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def _add_run_arguments(parser: argparse.ArgumentParser, positional: bool) -> None:
    if positional:
        parser.add_argument("config", help="path to the run config (YAML)")
    else:
        parser.add_argument("--config", required=True, help="path to the run config (YAML)")
    parser.add_argument(
        "--plugin-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="directory of plugin modules to import first (repeatable; also TRINITY_PLUGIN_DIRS)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the config (every check a run makes before starting) and stop",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default=None,
        metavar="LEVEL",
        help="lowest level of Trinity's log records on the console: DEBUG, INFO, WARNING or "
        "ERROR (default INFO); the log file gets at least log.level",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show engine and worker output (vLLM, Ray workers, verl) on the console, as "
        "without Trinity, instead of writing it to <checkpoint_job_dir>/log/run.log",
    )
    parser.add_argument(
        "--progress-interval",
        type=int,
        default=None,
        metavar="N",
        help="when the output is not a terminal: a progress line every N steps or 10 s, "
        "whichever comes first (default 10; also TRINITY_PROGRESS_INTERVAL)",
    )


@dataclass
class ConsoleOptions:
    """How a run uses the console (``--verbose``, ``--log-level``, ``--progress-interval``)."""

    verbose: bool = False
    log_level: Optional[str] = None
    progress_interval: Optional[int] = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ConsoleOptions:
        return cls(
            verbose=bool(getattr(args, "verbose", False)),
            log_level=getattr(args, "log_level", None),
            progress_interval=getattr(args, "progress_interval", None),
        )


def _summary(config: Config) -> str:
    taskset = config.buffer.explorer_input.taskset
    lines = [
        f"Config OK: mode={config.mode} project={config.project!r} name={config.name!r}",
        f"  algorithm: {config.algorithm.algorithm_type} (repeat_times={config.algorithm.repeat_times})",
        f"  model:     {config.model.model_path}",
    ]
    if taskset is not None and getattr(taskset, "path", None):
        lines.append(f"  taskset:   {taskset.path} (workflow={taskset.default_workflow_type})")
    for warning in getattr(config, "warnings", []) or []:
        lines.append(f"  warning:   {warning}")
    return "\n".join(lines)


def prepare_config(config_path: str, plugin_dirs: Sequence[str] = ()) -> tuple[Config, list[str]]:
    """Load plugins and the config, fill the algorithm type's defaults, run every check.

    Returns the ready config and the warnings of the algorithm type's own checks (see
    :func:`trinity.launcher.validation.validate_config`, which Trinity Studio shares).
    """
    return validate_config(config_path, plugin_dirs)


def _validate_and_run(
    config_path: str,
    plugin_dirs: Sequence[str],
    dry_run: bool = False,
    console: Optional[ConsoleOptions] = None,
) -> int:
    """Validate, then run the modes this release can run."""
    console = console or ConsoleOptions()
    if console.progress_interval is not None:
        if console.progress_interval < 1:
            print(
                f"error: --progress-interval {console.progress_interval} is invalid; "
                "allowed: an integer >= 1",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        os.environ["TRINITY_PROGRESS_INTERVAL"] = str(console.progress_interval)
    try:
        from trinity.launcher.progress import progress_interval

        progress_interval()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        config, warnings = prepare_config(config_path, plugin_dirs)
    except (ConfigError, PluginLoadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (RegistryError, ValueError) as exc:  # unknown component names, type-level checks
        print(f"error: {config_path}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(_summary(config))
    for warning in warnings:
        print(f"  warning:   {warning}")
    sys.stdout.flush()
    from trinity.launcher.modes import RUNNABLE_MODES

    if config.stages:
        return _run_stages(config, config_path, dry_run, console)
    if dry_run:
        print("Dry run: the config is valid; nothing was run.")
        return EXIT_OK
    if config.mode not in RUNNABLE_MODES:
        print(
            f"Validated only: this trinity-launcher release runs modes "
            f"{', '.join(RUNNABLE_MODES)}; mode {config.mode!r} is not implemented yet, "
            "so nothing was run."
        )
        return EXIT_OK
    return _run_mode(config, config_path, console=console)


def _run_stages(
    config: Config, config_path: str, dry_run: bool, console: Optional[ConsoleOptions] = None
) -> int:
    """Check every stage (as its run would), then run them in order unless ``dry_run``."""
    from trinity.launcher.modes import RUNNABLE_MODES
    from trinity.launcher.stages import run_stages, stage_configs

    try:
        stages = stage_configs(config)
    except (ConfigError, RegistryError, ValueError) as exc:
        print(f"error: {config_path}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for index, stage in enumerate(stages):
        print(
            f"  stage {index + 1}: {config.stages[index].stage_name} "
            f"(mode={stage.mode}, algorithm={stage.algorithm.algorithm_type})"
        )
    not_runnable = [
        f"stages[{i}] mode {s.mode!r}" for i, s in enumerate(stages) if s.mode not in RUNNABLE_MODES
    ]
    if not_runnable:
        print(
            f"error: {config_path}: {', '.join(not_runnable)}: this release runs modes "
            f"{', '.join(RUNNABLE_MODES)}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if dry_run:
        print("Dry run: the config and its stages are valid; nothing was run.")
        return EXIT_OK
    return _run_mode(config, config_path, run=lambda: run_stages(config, _execute), console=console)


def _execute(config: Config) -> None:
    """Run one (stage) config in its mode; raises what the run raises."""
    from trinity.launcher.session import run

    run(config)


def _run_mode(
    config: Config,
    config_path: str,
    run: Callable[[], Any] | None = None,
    console: Optional[ConsoleOptions] = None,
) -> int:
    """Run inside a :class:`~trinity.launcher.logs.ConsoleSession`: engine and worker output
    to the run's log file (unless ``--verbose``), Trinity's own output on the console."""
    from trinity.launcher.logs import ConsoleSession, run_log_dir

    console = console or ConsoleOptions()
    session = ConsoleSession(
        run_log_dir(config),
        verbose=console.verbose,
        level=console.log_level,
        file_level=str(config.log.level),
    )
    if session.redirected:
        print(
            f"Running mode {config.mode}; engine and worker logs go to {session.log_path} "
            "(--verbose shows them here).",
            flush=True,
        )
    with session:
        code = _run_in_session(config, config_path, run)
        if code == EXIT_RUN_FAILED and session.redirected:
            print(f"error: see {session.log_path} for the engine and worker logs", file=sys.stderr)
    for line in session.report():
        print(line, file=sys.stderr if code else sys.stdout)
    return code


def _run_in_session(config: Config, config_path: str, run: Callable[[], Any] | None) -> int:
    from trinity.launcher.logs import console_err, console_out
    from trinity.launcher.modes import LaunchInputError
    from trinity.launcher.placement import PlacementError

    try:
        if run is None:
            _execute(config)
        else:
            run()
    except (LaunchInputError, PlacementError, FileNotFoundError) as exc:
        print(f"error: {config_path}: {exc}", file=console_err(), flush=True)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=console_err(), flush=True)
        return EXIT_INTERRUPTED
    except Exception as exc:
        traceback.print_exc()  # into the log file beside the engines' output (or the console)
        if console_err() is not sys.stderr:
            traceback.print_exc(file=console_err())
        print(
            f"error: the {config.mode} run failed: {type(exc).__name__}: {exc}",
            file=console_err(),
            flush=True,
        )
        return EXIT_RUN_FAILED
    out = console_out()
    where = (
        f" (metrics in {config.checkpoint_job_dir}/metrics.jsonl)"
        if config.checkpoint_job_dir
        else ""
    )
    if config.stages:
        print(
            f"All {len(config.stages)} stages finished (each in {config.checkpoint_job_dir}/<stage>).",
            file=out,
            flush=True,
        )
        return EXIT_OK
    print(f"Mode {config.mode} finished{where}.", file=out, flush=True)
    return EXIT_OK


def launch_main(argv: Sequence[str] | None = None) -> int:
    """``trinity-launch config.yaml [--plugin-dir DIR]``."""
    parser = argparse.ArgumentParser(
        prog="trinity-launch", description="Run a Trinity RFT job from a config file."
    )
    _add_run_arguments(parser, positional=True)
    args = parser.parse_args(argv)
    return _validate_and_run(
        args.config, args.plugin_dir, args.dry_run, ConsoleOptions.from_args(args)
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``trinity run --config config.yaml [--plugin-dir DIR]``."""
    parser = argparse.ArgumentParser(prog="trinity", description="Trinity RFT command line.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a job from a config file")
    _add_run_arguments(run, positional=False)
    studio = sub.add_parser(
        "studio",
        help="start Trinity Studio, the config generator (pip install 'trinity-launcher[studio]')",
    )
    studio.add_argument("--port", type=int, default=8501, help="port to serve on (8501)")
    studio.add_argument(
        "--address", default="127.0.0.1", help="address to listen on (127.0.0.1: this machine)"
    )
    studio.add_argument(
        "--plugin-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="plugin directory whose workflows, rewards, operators and config entries "
        "the page lists (repeatable; also TRINITY_PLUGIN_DIRS)",
    )
    plot = sub.add_parser("plot", help="write a PNG of a run's reward curve (from metrics.jsonl)")
    plot.add_argument("run_dir", help="the run directory holding metrics.jsonl")
    plot.add_argument("--out", default=None, help="PNG to write (default RUN_DIR/reward.png)")
    plot.add_argument(
        "--metric",
        action="append",
        default=None,
        help="metric to draw (repeatable; default: every */reward/mean* metric)",
    )
    convert = sub.add_parser(
        "convert", help="write a Hugging Face model directory from a trainer checkpoint"
    )
    convert.add_argument(
        "checkpoint", help="an actor/, global_step_N/ or run directory (latest step)"
    )
    convert.add_argument(
        "--out", default=None, help="output directory (default: the checkpoint's huggingface/)"
    )
    convert.add_argument(
        "--model-path", default=None, help="the base model, if not where the run found it"
    )
    args = parser.parse_args(argv)
    if args.command == "convert":
        from trinity.launcher.convert import ConvertError, convert_checkpoint

        try:
            out = convert_checkpoint(args.checkpoint, args.out, args.model_path)
        except (ConvertError, ImportError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"Wrote {out}")
        return EXIT_OK
    if args.command == "plot":
        from trinity.launcher.plot import PlotError, plot_run

        try:
            out = plot_run(args.run_dir, args.out, args.metric)
        except PlotError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"Wrote {out}")
        return EXIT_OK
    if args.command == "run":
        return _validate_and_run(
            args.config, args.plugin_dir, args.dry_run, ConsoleOptions.from_args(args)
        )
    if args.command == "studio":
        from trinity.manager.studio import run_studio

        return run_studio(args.port, args.address, args.plugin_dir)
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover - argparse exits first
    return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
