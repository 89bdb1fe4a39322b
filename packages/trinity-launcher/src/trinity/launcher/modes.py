"""Run modes the launcher can execute: ``explore`` and ``bench``.

Both follow one shape: build the :class:`~trinity.launcher.explorer.Explorer` (which checks
task sets, operators, the algorithm and engine settings without starting anything), then start
Ray (or join the one already running), prepare engines and runners, run, and shut everything
down again, also when the run fails or is interrupted.

Problems with the input found while building the explorer (a missing task-set file, an unknown
operator, an engine type this release does not have) raise :class:`LaunchInputError`, which
the command line reports as bad input (exit status 2); everything after that is a failed run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Optional, TypeVar

from trinity.common.config import Config
from trinity.launcher.explorer import Explorer
from trinity.launcher.logs import worker_runtime_env
from trinity.launcher.progress import ProgressReporter
from trinity.utils.gc_heap import freeze_startup_heap
from trinity.utils.log import get_logger

__all__ = [
    "RUNNABLE_MODES",
    "LaunchInputError",
    "ray_init_kwargs",
    "ray_session",
    "run_bench",
    "run_explore",
]

logger = get_logger(__name__)

#: Modes this release runs; the others are validated only.
RUNNABLE_MODES = ("explore", "bench", "train", "both", "colocate")
#: Set it to choose Ray's session directory (``_temp_dir``) when a local Ray is started.
RAY_TMPDIR_ENV = "TRINITY_RAY_TMPDIR"

T = TypeVar("T")


class LaunchInputError(ValueError):
    """The run's input cannot work (found before anything was started)."""


def _input_errors() -> tuple[type[BaseException], ...]:
    from trinity.buffer.operators.experience_operator import ExperienceOperatorError
    from trinity.utils.plugin_loader import PluginLoadError
    from trinity.utils.registry import RegistryError

    return (
        ValueError,
        KeyError,
        FileNotFoundError,
        RegistryError,
        ExperienceOperatorError,
        PluginLoadError,
    )


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def ray_init_kwargs(config: Config) -> dict[str, Any]:
    """Arguments of ``ray.init`` for ``config``.

    ``cluster.ray_address`` other than ``auto`` joins that cluster; ``auto`` joins the cluster
    in ``RAY_ADDRESS`` when set, else starts a local Ray with this machine's CPUs (its session
    directory in ``TRINITY_RAY_TMPDIR`` when set, no idle workers prestarted). Every Ray
    process gets the run's environment and log set-up
    (:func:`trinity.launcher.logs.worker_runtime_env`); worker output is sent to the driver,
    which writes it to the run's log file (the console with ``--verbose``).
    """
    kwargs: dict[str, Any] = {
        "namespace": config.ray_namespace or None,
        "runtime_env": worker_runtime_env(config),
        "log_to_driver": True,
    }
    address = (config.cluster.ray_address or "auto").strip()
    if address != "auto":
        kwargs["address"] = address
    elif os.environ.get("RAY_ADDRESS"):
        kwargs["address"] = os.environ["RAY_ADDRESS"]
    else:
        kwargs["num_cpus"] = _cpu_count()
        kwargs["include_dashboard"] = False
        # Ray prestarts one idle worker per CPU for the first driver, with no runtime env; every
        # Trinity actor runs with the job's runtime env, so none of them could be used, and their
        # start-up took ~0.8 s of the two cores on the way to the first step (quickstart).
        kwargs["_system_config"] = {"prestart_worker_first_driver": False}
        tmp = os.environ.get(RAY_TMPDIR_ENV)
        if tmp:
            kwargs["_temp_dir"] = os.path.abspath(tmp)
    return kwargs


@contextlib.contextmanager
def ray_session(config: Config) -> Iterator[None]:
    """Ray for the duration of a run: started (and shut down) here unless the caller has
    already initialised it (tests, notebooks), in which case it is used and left running."""
    import ray

    if ray.is_initialized():
        yield
        return
    kwargs = ray_init_kwargs(config)
    logger.info(
        "Starting Ray (%s)",
        f"joining {kwargs['address']}" if "address" in kwargs else f"{kwargs['num_cpus']} CPUs",
    )
    ray.init(**kwargs)
    try:
        yield
    finally:
        ray.shutdown()


class _LazyMonitor:
    """``create_monitor(config)`` at the first record: a resumed mode ``explore`` run cuts
    ``metrics.jsonl`` back before anything opens it."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._monitor: Any = None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self._monitor is None:
            from trinity.launcher.monitor import create_monitor

            self._monitor = create_monitor(self.config)
        self._monitor.log(metrics, step)

    def close(self) -> None:
        if self._monitor is not None:
            self._monitor.close()


def _build_explorer(config: Config, **kwargs: Any) -> Explorer:
    try:
        return Explorer(config, **kwargs)
    except _input_errors() as exc:
        raise LaunchInputError(str(exc)) from exc


async def _drive(explorer: Explorer, run: Callable[[], Awaitable[T]]) -> T:
    try:
        await explorer.prepare()
        if explorer.record is not None and explorer.pipeline is not None:
            explorer.record.restore_output(explorer.pipeline.writer)
        freeze_startup_heap()  # set up: full collections no longer walk the imports' objects
        return await run()
    finally:
        await explorer.shutdown()


def _run(
    config: Config, mode: str, progress: Optional[ProgressReporter], **explorer_options: Any
) -> Any:
    if config.mode != mode:
        raise LaunchInputError(
            f"mode: run_{mode} needs mode '{mode}', the config has {config.mode!r}"
        )
    record = None
    if mode == "explore" and config.checkpoint_job_dir:
        from trinity.launcher.resume import ExploreProgress

        # before the explorer opens metrics.jsonl: a resume cuts it back first
        record = ExploreProgress(config)
        explorer_options.setdefault("monitor", _LazyMonitor(config))
    else:
        logger.info(
            "mode bench does not resume: it evaluates the model and every checkpoint of its "
            "directory each time it runs"
        )
    explorer = _build_explorer(config, **explorer_options)
    if record is not None:
        try:
            record.load(explorer)
        except ValueError as exc:
            raise LaunchInputError(str(exc)) from exc
        explorer.record = record
    total = explorer.total_steps if mode == "explore" else None
    if progress is None:
        progress = ProgressReporter(total_steps=total, description=mode)
    elif progress.total_steps is None:
        progress.total_steps = total
    explorer.progress = progress
    from trinity.launcher.placement import placement_session

    with ray_session(config), placement_session(config) as placement:
        explorer.placement = placement
        run = explorer.explore if mode == "explore" else explorer.bench
        return asyncio.run(_drive(explorer, run))


def run_explore(
    config: Config, *, progress: Optional[ProgressReporter] = None, **explorer_options: Any
) -> dict[str, float]:
    """Mode ``explore``: write experiences for an external trainer, evaluate on schedule.

    ``config`` must be checked (``check_and_update``). ``explorer_options`` go to
    :class:`~trinity.launcher.explorer.Explorer` (``rollout_engines``, ``auxiliary_engines``:
    handles to use instead of building ``explorer.rollout_model`` / ``auxiliary_models``;
    ``plugin_dirs``, ``monitor``, ``tasks_per_runner``). Returns the last step's metrics (all of
    them are in ``<checkpoint_job_dir>/metrics.jsonl``).

    Raises:
        LaunchInputError: the input cannot work (nothing was started).
    """
    return _run(config, "explore", progress, **explorer_options)


def run_bench(
    config: Config, *, progress: Optional[ProgressReporter] = None, **explorer_options: Any
) -> dict[int, dict[str, float]]:
    """Mode ``bench``: evaluate the model on every eval task set, and the checkpoints in
    ``checkpoint_job_dir`` (see :meth:`Explorer.bench`). Returns ``{step: metrics}``;
    ``explorer_options`` as for :func:`run_explore`.

    Raises:
        LaunchInputError: the input cannot work (nothing was started).
    """
    return _run(config, "bench", progress, **explorer_options)
