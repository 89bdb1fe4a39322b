"""The ``trinity`` and ``trinity-launch`` commands.

``trinity-launch config.yaml`` and ``trinity run --config config.yaml`` load plugin directories,
then load and validate the config, then run it. This release runs modes ``explore`` (write
experiences for an external trainer, evaluate on schedule), ``bench`` (evaluate the model and
its checkpoints), ``train`` (SFT, DPO, off-policy RL from a data set or buffer on verl's FSDP2
engine), ``both`` (explorer and trainer together) and ``colocate`` (the same, taking turns on
shared devices), and ``stages:`` (several of those in order) -- all through one run layer
(:mod:`trinity.launcher.session`). ``serve`` is not implemented in this release: its config is
validated, and the command says so and exits 2 (also with ``--dry-run``), so a script never
takes it for a run. ``trinity studio``, ``trinity plot``, ``trinity convert``, ``trinity log``,
``trinity debug`` and ``trinity view`` are the other commands; ``--version`` prints the
installed trinity-* distributions.

``KEY=VALUE`` arguments after the config override its values (OmegaConf's dotlist, as verl and
Hydra users write them: ``buffer.total_steps=3 algorithm.repeat_times=4
trainer.trainer_config.x=[1,2] model.max_model_len=null``). They are applied to the loaded YAML
before validation, checked like the file (a problem names the override, not a line), shown in
the config summary and written to the run's log; the run executes the overridden config.

Nothing heavy is imported at module level (the config schema, validation and the run layer are
imported by the functions that need them), so every ``--help`` answers at once.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # imported where used: ``--help`` must not wait for torch
    from trinity.common.config import Config
    from trinity.launcher.run.preemption import PreemptionSettings

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
# 75: stopped by a preemption signal (trinity.launcher.run.preemption.EXIT_PREEMPTED)

#: The distributions ``--version`` reports, in dependency order.
DISTRIBUTIONS = (
    "trinity-launcher",
    "trinity-core",
    "trinity-algorithms",
    "trinity-buffer",
    "trinity-workflows",
)


def __getattr__(name: str) -> Any:
    """``cli.validate_config`` / ``cli.check_component_names``: the validation functions, as
    before (imported on first use, not with the module)."""
    if name in ("validate_config", "check_component_names"):
        from trinity.launcher import validation

        return getattr(validation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def versions() -> list[tuple[str, Optional[str]]]:
    """``(distribution, version or None when not installed)`` of each trinity-* package."""
    from importlib.metadata import PackageNotFoundError, version

    found: list[tuple[str, Optional[str]]] = []
    for name in DISTRIBUTIONS:
        try:
            found.append((name, version(name)))
        except PackageNotFoundError:
            found.append((name, None))
    return found


class _VersionAction(argparse.Action):
    """``--version``: one line per trinity-* distribution, then exit 0."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the installed trinity-* package versions and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        lines = [f"{name} {ver or '(not installed)'}" for name, ver in versions()]
        sys.stdout.write("\n".join(lines) + "\n")
        parser.exit()


_OVERRIDES_HELP = (
    "override a value of the config, after the file is read and before it is validated "
    "(OmegaConf dotlist: buffer.total_steps=3 algorithm.repeat_times=4 "
    "trainer.trainer_config.x=[1,2] model.max_model_len=null; repeatable, later wins)"
)

_RUN_DESCRIPTION = (
    "Validate a run config (every check a run makes: schema, paths, models, task sets,\n"
    "component names and arguments), then run it in its mode: explore, bench, train, both,\n"
    "colocate, or its stages. Bad input exits 2 before Ray starts, naming each bad field."
)


def _run_epilog(config: str) -> str:
    return (
        "examples:\n"
        f"  %(prog)s {config} --dry-run     validate only\n"
        f"  %(prog)s {config} buffer.total_steps=3 algorithm.repeat_times=4\n"
        "\n"
        "environment: TRINITY_PLUGIN_DIRS, TRINITY_PROGRESS_INTERVAL; TRINITY_ALLOW_HUB_MODELS=1\n"
        "lets a run download a model named by a hub id that is not in the Hugging Face cache\n"
        "(refused otherwise: download it first, or point model_path at a local directory).\n"
        "\n"
        "exit status: 0 done, 1 the run failed, 2 bad input (nothing was run), 75 stopped by a "
        "preemption signal (the same command resumes), 130 interrupted."
    )


def _add_run_arguments(parser: argparse.ArgumentParser, positional: bool) -> None:
    if positional:
        parser.add_argument("config", help="path to the run config (YAML)")
    else:
        parser.add_argument("--config", required=True, help="path to the run config (YAML)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=_OVERRIDES_HELP)
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
        "--preemption-signals",
        default="TERM,USR1",
        metavar="SIGNALS",
        help="signals that stop the run cleanly: the train step in progress finishes, a "
        "checkpoint is written, exit status 75, and the same command resumes (comma-separated "
        "names, default TERM,USR1; '' keeps the signals' default effect)",
    )
    parser.add_argument(
        "--grace-period",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="after a preemption signal, exit at the latest this many seconds later even "
        "without the checkpoint (the previous one is resumed from; default 120)",
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
    """How a run uses the console and the process (``--verbose``, ``--log-level``,
    ``--progress-interval``, ``--preemption-signals``, ``--grace-period``)."""

    verbose: bool = False
    log_level: Optional[str] = None
    progress_interval: Optional[int] = None
    #: the command line's ``KEY=VALUE`` overrides (written to the run's log)
    overrides: list[str] = field(default_factory=list)
    preemption_signals: str = ""
    grace_period: float = 120.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ConsoleOptions:
        return cls(
            verbose=bool(getattr(args, "verbose", False)),
            log_level=getattr(args, "log_level", None),
            progress_interval=getattr(args, "progress_interval", None),
            preemption_signals=getattr(args, "preemption_signals", ""),
            grace_period=getattr(args, "grace_period", 120.0),
        )

    def preemption(self) -> Optional[PreemptionSettings]:
        """The preemption settings (``None``: no signal is handled); ``ValueError`` names a
        bad signal or grace period."""
        from trinity.launcher.run.preemption import PreemptionSettings, parse_signals

        signals = parse_signals(self.preemption_signals)
        if not signals:
            return None
        try:
            return PreemptionSettings(signals, float(self.grace_period))
        except ValueError as exc:
            raise ValueError(f"--grace-period: {exc}") from None


def _summary(config: Config, overrides: Sequence[str] = ()) -> str:
    taskset = config.buffer.explorer_input.taskset
    lines = [
        f"Config OK: mode={config.mode} project={config.project!r} name={config.name!r}",
        f"  algorithm: {config.algorithm.algorithm_type} (repeat_times={config.algorithm.repeat_times})",
        f"  model:     {config.model.model_path}",
    ]
    if taskset is not None and getattr(taskset, "path", None):
        lines.append(f"  taskset:   {taskset.path} (workflow={taskset.default_workflow_type})")
    if overrides:
        lines.append(f"  overrides: {' '.join(overrides)}")
    for warning in getattr(config, "warnings", []) or []:
        lines.append(f"  warning:   {warning}")
    return "\n".join(lines)


def prepare_config(
    config_path: str, plugin_dirs: Sequence[str] = (), overrides: Sequence[str] = ()
) -> tuple[Config, list[str]]:
    """Load plugins and the config (with the command line's ``KEY=VALUE`` overrides), fill
    the algorithm type's defaults, run every check.

    Returns the ready config and the warnings of the algorithm type's own checks (see
    :func:`trinity.launcher.validation.validate_config`, which Trinity Studio shares).
    """
    from trinity.launcher.validation import validate_config

    return validate_config(config_path, plugin_dirs, overrides)


def _validate_and_run(
    config_path: str,
    plugin_dirs: Sequence[str],
    dry_run: bool = False,
    console: Optional[ConsoleOptions] = None,
    overrides: Sequence[str] = (),
) -> int:
    """Validate, then run the modes this release can run. Automatic full garbage collections
    pause while the imports and the run's start-up build ~600K long-lived objects (the run
    freezes them once set up, which ends the pause; :mod:`trinity.utils.gc_heap`), and are
    back when this returns, whatever the way."""
    from trinity.utils.gc_heap import pause_collection_during_startup, resume_collection

    pause_collection_during_startup()
    try:
        return _checked_run(config_path, plugin_dirs, dry_run, console, overrides)
    finally:
        resume_collection()


def _checked_run(
    config_path: str,
    plugin_dirs: Sequence[str],
    dry_run: bool,
    console: Optional[ConsoleOptions],
    overrides: Sequence[str],
) -> int:
    """:func:`_validate_and_run`'s work: the config checked, its summary printed, then its
    stages or its mode run (unless ``dry_run``); returns the exit status."""
    from trinity.common.config import ConfigError
    from trinity.utils.plugin_loader import PluginLoadError
    from trinity.utils.registry import RegistryError

    console = console or ConsoleOptions()
    console.overrides = list(overrides)
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
        console.preemption()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        config, warnings = prepare_config(config_path, plugin_dirs, overrides)
    except (ConfigError, PluginLoadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (RegistryError, ValueError) as exc:  # unknown component names, type-level checks
        print(f"error: {config_path}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(_summary(config, overrides))
    for warning in warnings:
        print(f"  warning:   {warning}")
    sys.stdout.flush()
    from trinity.launcher.modes import RUNNABLE_MODES

    if config.stages:
        return _run_stages(config, config_path, dry_run, console)
    if config.mode not in RUNNABLE_MODES:
        # valid, but nothing here can run it: a script must not take this for a run
        print(
            f"error: {config_path}: mode {config.mode!r} is not implemented yet in this "
            f"trinity-launcher release (it runs modes {', '.join(RUNNABLE_MODES)}); the "
            "config is valid, but nothing was run.",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if dry_run:
        print("Dry run: the config is valid; nothing was run.")
        return EXIT_OK
    return _run_mode(config, config_path, console=console)


def _run_stages(
    config: Config, config_path: str, dry_run: bool, console: Optional[ConsoleOptions] = None
) -> int:
    """Check every stage (as its run would), then run them in order unless ``dry_run``."""
    from trinity.common.config import ConfigError
    from trinity.launcher.modes import RUNNABLE_MODES
    from trinity.launcher.stages import run_stages, stage_configs
    from trinity.utils.registry import RegistryError

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
    from trinity.common.config import run_mode_spec

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
    serving = [
        f"stages[{i}] mode {s.mode!r}"
        for i, s in enumerate(stages)
        if run_mode_spec(s.mode).serves_api
    ]
    if serving:
        print(
            f"error: {config_path}: {', '.join(serving)}: mode 'serve' runs until it is stopped, "
            "so no stage could follow it; run it as a job of its own",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if dry_run:
        print("Dry run: the config and its stages are valid; nothing was run.")
        return EXIT_OK
    preemption = (console or ConsoleOptions()).preemption()
    return _run_mode(
        config,
        config_path,
        run=lambda: run_stages(config, lambda stage: _execute(stage, preemption)),
        console=console,
    )


def _execute(config: Config, preemption: Optional[PreemptionSettings] = None) -> None:
    """Run one (stage) config in its mode; raises what the run raises."""
    from trinity.launcher.session import run

    run(config, preemption=preemption)


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
        if console.overrides:  # into the run's log (the console has the summary already)
            print(f"Config overrides: {' '.join(console.overrides)}", flush=True)
        code = _run_in_session(config, config_path, run, console.preemption())
        if code == EXIT_RUN_FAILED and session.redirected:
            print(f"error: see {session.log_path} for the engine and worker logs", file=sys.stderr)
    for line in session.report():
        print(line, file=sys.stderr if code else sys.stdout)
    return code


def _run_in_session(
    config: Config,
    config_path: str,
    run: Callable[[], Any] | None,
    preemption: Optional[PreemptionSettings] = None,
) -> int:
    from trinity.launcher.logs import console_err, console_out
    from trinity.launcher.modes import LaunchInputError
    from trinity.launcher.placement import PlacementError
    from trinity.launcher.run.preemption import EXIT_PREEMPTED, Preempted

    try:
        if run is None:
            _execute(config, preemption)
        else:
            run()
    except (LaunchInputError, PlacementError, FileNotFoundError) as exc:
        print(f"error: {config_path}: {exc}", file=console_err(), flush=True)
        return EXIT_BAD_INPUT
    except Preempted as exc:
        print(f"preempted: {exc}", file=console_err(), flush=True)
        return EXIT_PREEMPTED
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
    from trinity.common.config import run_mode_spec

    metrics_file = (
        "serve_metrics.jsonl" if run_mode_spec(config.mode).serves_api else "metrics.jsonl"
    )
    where = (
        f" (metrics in {config.checkpoint_job_dir}/{metrics_file})"
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


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, collecting ``KEY=VALUE`` overrides wherever they stand among the options
    (``CONFIG --dry-run a=1 b=2``); anything else unknown is an error (exit 2)."""
    args, extra = parser.parse_known_args(argv)
    unknown = [a for a in extra if a.startswith("-") or "=" not in a]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if hasattr(args, "overrides"):
        args.overrides = list(args.overrides or []) + extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _launch_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trinity-launch",
        description="Run a Trinity RFT job from a config file.\n\n" + _RUN_DESCRIPTION,
        epilog=_run_epilog("CONFIG"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction)
    _add_run_arguments(parser, positional=True)
    return parser


def launch_main(argv: Sequence[str] | None = None) -> int:
    """``trinity-launch config.yaml [KEY=VALUE ...] [--plugin-dir DIR] [--dry-run]``."""
    args = _parse(_launch_parser(), argv)
    return _validate_and_run(
        args.config,
        args.plugin_dir,
        args.dry_run,
        ConsoleOptions.from_args(args),
        overrides=args.overrides,
    )


def _main_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trinity",
        description="Trinity RFT command line: run a job, generate a config (studio), plot a "
        "run's reward curve, convert a trainer checkpoint to a Hugging Face model, follow a "
        "run's logs, debug a workflow, browse an experience table (view).",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="validate and run a job from a config file",
        description=_RUN_DESCRIPTION,
        epilog=_run_epilog("--config CONFIG"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_run_arguments(run, positional=False)
    studio = sub.add_parser(
        "studio",
        help="start Trinity Studio, the config generator (pip install 'trinity-launcher[studio]')",
        description="Start Trinity Studio, a web page that writes a run config: each field "
        "with its help, checked by the same validation as a run "
        "(pip install 'trinity-launcher[studio]').",
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
    plot = sub.add_parser(
        "plot",
        help="write a PNG of a run's reward curve (from metrics.jsonl)",
        description="Write a PNG of a run's reward curve (or other metrics) from the "
        "metrics.jsonl in its run directory.",
    )
    plot.add_argument("run_dir", help="the run directory holding metrics.jsonl")
    plot.add_argument("--out", default=None, help="PNG to write (default RUN_DIR/reward.png)")
    plot.add_argument(
        "--metric",
        action="append",
        default=None,
        help="metric to draw (repeatable; default: every */reward/mean* metric)",
    )
    convert = sub.add_parser(
        "convert",
        help="write a Hugging Face model directory from a trainer checkpoint",
        description="Write a Hugging Face model directory (config, tokenizer, safetensors) "
        "from a trainer checkpoint of a run.",
    )
    convert.add_argument(
        "checkpoint", help="an actor/, global_step_N/ or run directory (latest step)"
    )
    convert.add_argument(
        "--out",
        default=None,
        help="output directory (default: the checkpoint's huggingface/; a LoRA adapter: "
        "its lora_adapter/)",
    )
    convert.add_argument(
        "--model-path", default=None, help="the base model, if not where the run found it"
    )
    convert.add_argument(
        "--merged",
        action="store_true",
        help="LoRA checkpoint: write the merged model (base + adapter) instead of the PEFT "
        "adapter (adapter_config.json, adapter_model.safetensors); no effect on a full "
        "fine-tuning checkpoint",
    )
    from trinity.launcher.debug import add_debug_parser
    from trinity.launcher.log_follow import add_log_parser
    from trinity.launcher.viewer import add_view_parser

    add_log_parser(sub)
    add_debug_parser(sub)
    add_view_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``trinity run --config config.yaml [KEY=VALUE ...] [--plugin-dir DIR]``, ``trinity
    studio``, ``trinity plot``, ``trinity convert``, ``trinity log``, ``trinity debug``,
    ``trinity view``."""
    parser = _main_parser()
    args = _parse(parser, argv)
    if args.command == "convert":
        from trinity.launcher.convert import (
            ConvertError,
            convert_checkpoint,
            find_actor_dir,
            has_hf_weights,
            is_lora_checkpoint,
        )

        try:
            adapter = is_lora_checkpoint(args.checkpoint) and not args.merged
            reused = (
                not adapter
                and args.out is None
                and has_hf_weights(find_actor_dir(args.checkpoint) / "huggingface")
            )
            out = convert_checkpoint(args.checkpoint, args.out, args.model_path, args.merged)
        except (ConvertError, ImportError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if adapter:
            print(f"Wrote {out} (the LoRA adapter, PEFT format; --merged: the merged model)")
        elif reused:
            print(f"{out} already holds the trainer's Hugging Face weights (nothing written)")
        else:
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
            args.config,
            args.plugin_dir,
            args.dry_run,
            ConsoleOptions.from_args(args),
            overrides=args.overrides,
        )
    if args.command == "debug":
        from trinity.launcher.debug import debug_main

        return debug_main(args)
    if args.command == "log":
        from trinity.launcher.log_follow import log_main

        return log_main(args)
    if args.command == "view":
        from trinity.launcher.viewer import view_main

        return view_main(args)
    if args.command == "studio":
        from trinity.manager.studio import run_studio

        return run_studio(args.port, args.address, args.plugin_dir)
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover - argparse exits first
    return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
