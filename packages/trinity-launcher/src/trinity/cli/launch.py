"""The launch functions of :mod:`trinity.cli.launcher` and its Ray and plugin handling.

Each launch function runs a checked config of its mode through our run layer
(:func:`trinity.launcher.session.run`) with ``trinity run``'s preemption signals, and refuses a
config of another mode (:class:`~trinity.launcher.errors.LaunchInputError`): Trinity-RFT's
``explore(config)`` would run only the explorer of any config, ours runs configs as they are.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from trinity.common.config import Config
from trinity.common.constants import PLUGIN_DIRS_ENV_VAR
from trinity.utils.log import get_logger

__all__ = [
    "PREEMPTION_SIGNALS",
    "bench",
    "both",
    "console_options",
    "explore",
    "join_ray",
    "latest_hf_weights",
    "load_plugin_dirs",
    "serve",
    "train",
]

logger = get_logger(__name__)

#: the signals that stop a run with a checkpoint (``trinity run``'s default)
PREEMPTION_SIGNALS = "TERM,USR1"


def console_options() -> Any:
    """``trinity run``'s console and preemption settings (its defaults)."""
    from trinity.launcher.cli import ConsoleOptions

    return ConsoleOptions(preemption_signals=PREEMPTION_SIGNALS)


def load_plugin_dirs(plugin_dir: Optional[str]) -> None:
    """``--plugin-dir`` into ``TRINITY_PLUGIN_DIRS``; import the directories that exist."""
    from trinity.utils.plugin_loader import load_plugins

    if plugin_dir:
        os.environ[PLUGIN_DIRS_ENV_VAR] = plugin_dir
    dirs = [d for d in os.environ.get(PLUGIN_DIRS_ENV_VAR, "").split(os.pathsep) if d]
    for missing in [d for d in dirs if not os.path.isdir(d)]:
        logger.error("plugin directory %s does not exist; not loaded", missing)
    load_plugins([d for d in dirs if os.path.isdir(d)], include_env=False)


def _run_as(config: Config, kind: str, modes: tuple[str, ...]) -> Any:
    """Run ``config`` through the run layer, which must be of one of ``modes``."""
    from trinity.launcher.errors import LaunchInputError
    from trinity.launcher.session import run

    if config.mode not in modes:
        raise LaunchInputError(f"mode: {kind}() runs mode {kind!r}; the config has {config.mode!r}")
    if config.run_mode.serves_api:
        return run(config)
    return run(config, preemption=console_options().preemption())


def explore(config: Config) -> Any:
    """Mode ``explore``: experiences for an external trainer; returns the last metrics."""
    return _run_as(config, "explore", ("explore",))


def train(config: Config) -> Any:
    """Mode ``train``: train from a data set or buffer; returns the last metrics."""
    return _run_as(config, "train", ("train",))


def both(config: Config) -> Any:
    """Modes ``both`` and ``colocate``: explorer and trainer together."""
    return _run_as(config, "both", ("both", "colocate"))


def bench(config: Config) -> Any:
    """Mode ``bench``: evaluate the model and its checkpoints; returns ``{step: metrics}``."""
    return _run_as(config, "bench", ("bench",))


def serve(config: Config) -> Any:
    """Mode ``serve``: the OpenAI-compatible API in front of the engines, until stopped."""
    return _run_as(config, "serve", ("serve",))


def join_ray(config: Config) -> bool:
    """Trinity-RFT's ``ray.init`` for one run; ``False``: no Ray to join (``auto`` and none
    running here), so the run layer starts its own."""
    import ray

    from trinity.launcher.run.ray_session import check_head_reachable

    address = (config.cluster.ray_address or "auto").strip()
    if address != "auto":  # refused at once when no head answers (Ray would retry for minutes)
        check_head_reachable(address)
    elif os.environ.get("RAY_ADDRESS"):
        check_head_reachable(os.environ["RAY_ADDRESS"], "RAY_ADDRESS")
    try:
        ray.init(
            address=address,
            ignore_reinit_error=True,
            namespace=config.ray_namespace,
            runtime_env={"env_vars": config.get_envs()},
        )
    except ConnectionError:
        if address != "auto":
            raise
        logger.info("No Ray cluster is running here: the run starts its own")
        return False
    return True


def latest_hf_weights(stage: Config) -> Optional[str]:
    """``get_latest_hf_checkpoint_path`` of :mod:`trinity.trainer.verl.utils`."""
    from trinity.trainer.verl import utils  # read at each call: Trinity-RFT's tests patch it

    return utils.get_latest_hf_checkpoint_path(stage)
