"""The launcher's entry points for each run mode, all one path: :mod:`trinity.launcher.run`.

``run_explore``, ``run_bench``, ``run_both`` and ``run_train`` are :func:`run_config` for a
config of that mode (they check the mode, so a caller that meant one gets no other). Problems
with the input found before anything starts (a missing task-set file, an unknown operator, an
engine type this release does not have, a checkpoint the run cannot continue from) raise
:class:`LaunchInputError`, which the command line reports as bad input (exit status 2);
everything after that is a failed run.
"""

from __future__ import annotations

from typing import Any, Optional

from trinity.common.config import RUN_MODES, Config, run_mode_spec
from trinity.launcher.errors import LaunchInputError
from trinity.launcher.run.ray_session import RAY_TMPDIR_ENV, ray_init_kwargs, ray_session

__all__ = [
    "RAY_TMPDIR_ENV",
    "RUNNABLE_MODES",
    "LaunchInputError",
    "ray_init_kwargs",
    "ray_session",
    "run_bench",
    "run_both",
    "run_config",
    "run_explore",
    "run_train",
]

#: Modes this release runs; the others are validated only.
RUNNABLE_MODES = tuple(name for name, spec in RUN_MODES.items() if spec.runnable)


def run_config(config: Config, **options: Any) -> Any:
    """Run ``config`` (checked: ``check_and_update``) in its mode; see
    :class:`~trinity.launcher.session.RunSession` for ``options``.

    Raises:
        LaunchInputError: the input cannot work (nothing was started).
    """
    from trinity.launcher.session import run

    return run(config, **options)


def _run_as(config: Config, kind: str, **options: Any) -> Any:
    spec = run_mode_spec(config.mode)
    wanted = {
        "explore": spec.explores and not spec.trains,
        "bench": spec.evaluates_checkpoints,
        "both": spec.explores_and_trains,
        "train": spec.trains and not spec.explores,
    }[kind]
    if not wanted:
        raise LaunchInputError(
            f"mode: run_{kind} needs mode '{kind}', the config has {config.mode!r}"
        )
    return run_config(config, **options)


def run_explore(
    config: Config, *, progress: Optional[Any] = None, **explorer_options: Any
) -> dict[str, float]:
    """Mode ``explore``: write experiences for an external trainer, evaluate on schedule.

    ``explorer_options`` go to :class:`~trinity.launcher.explorer.Explorer`
    (``rollout_engines``, ``auxiliary_engines``: handles to use instead of building
    ``explorer.rollout_model`` / ``auxiliary_models``; ``plugin_dirs``, ``monitor``,
    ``tasks_per_runner``). Returns the last step's metrics (all of them are in
    ``<checkpoint_job_dir>/metrics.jsonl``).
    """
    return _run_as(config, "explore", progress=progress, **explorer_options)


def run_bench(
    config: Config, *, progress: Optional[Any] = None, **explorer_options: Any
) -> dict[int, dict[str, float]]:
    """Mode ``bench``: evaluate the model on every eval task set, and the checkpoints in
    ``checkpoint_job_dir`` (see :meth:`Explorer.bench`). Returns ``{step: metrics}``;
    ``explorer_options`` as for :func:`run_explore`."""
    return _run_as(config, "bench", progress=progress, **explorer_options)


def run_both(config: Config, progress: Any = None, **explorer_options: Any) -> dict[str, Any]:
    """Modes ``both`` and ``colocate``: the explorer and the trainer together (``colocate``:
    taking turns on the same devices); returns the last train step's metrics. With
    ``continue_from_checkpoint`` (the default) and a complete checkpoint in the run directory,
    the run resumes from it."""
    return _run_as(config, "both", progress=progress, **explorer_options)


def run_train(config: Config, monitor: Any = None, progress: Any = None) -> dict[str, float]:
    """Mode ``train``: train until ``buffer.total_steps`` or the end of the data (SFT, DPO,
    off-policy RL from a data set or buffer); returns the last metrics. ``progress`` shows
    each train step (default: summary lines on the console)."""
    return _run_as(config, "train", monitor=monitor, trainer_progress=progress)
