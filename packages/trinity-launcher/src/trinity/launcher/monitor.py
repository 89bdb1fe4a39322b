"""Metrics sinks: ``monitor.monitor_type`` (tensorboard, wandb, mlflow, swanlab) plus ``metrics.jsonl``.

Every run writes ``<checkpoint_job_dir>/metrics.jsonl`` (one JSON object per step; what
``trinity plot`` and Trinity Studio read) and, next to it, the monitor the config names:

* ``tensorboard`` (default): event files in ``<job dir>/monitor/tensorboard``;
* ``wandb``: a W&B run (project/group/name from the config). Without ``WANDB_API_KEY`` or an
  explicit ``monitor_args.mode`` it runs ``offline`` into ``<job dir>/monitor/wandb`` (sync later
  with ``wandb sync``), so a laptop run never blocks on a login prompt;
* ``mlflow``: an MLflow run; tracking URI from ``monitor_args.tracking_uri``, else
  ``MLFLOW_TRACKING_URI``, else a local SQLite store ``<job dir>/monitor/mlflow/mlflow.db`` (MLflow has
  retired its file store).
* ``swanlab``: a SwanLab experiment; like ``wandb`` it runs ``offline`` into
  ``<job dir>/monitor/swanlab`` without ``SWANLAB_API_KEY`` or an explicit ``monitor_args.mode``.

Monitors register in :data:`MONITOR` (core's ``trinity.utils.monitor.MONITOR``; these four
are advertised as ``trinity.monitor`` entry points), and :func:`create_monitor` builds whatever
class it holds under ``monitor.monitor_type``. So a plugin can add its own
(``@MONITOR.register_module("my_monitor")`` on a class taking ``(config)`` with
``log(metrics, step)`` and ``close()``): loaded from ``--plugin-dir``, its name passes the config
schema and its ``log`` gets every step's metrics.
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Any, Optional

from trinity.common.config import Config
from trinity.launcher.progress import JsonlMonitor, Monitor
from trinity.utils.monitor import MONITOR  # the registry lives in core (trinity.utils.monitor)

METRICS_FILE = "metrics.jsonl"


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numeric metrics (booleans as 0/1); strings and structures are left out."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool):
            out[key] = float(value)
        elif isinstance(value, numbers.Real) and math.isfinite(float(value)):
            out[key] = float(value)
    return out


def _monitor_dir(config: Config, name: str) -> str:
    root = config.monitor.cache_dir or os.path.join(config.checkpoint_job_dir or ".", "monitor")
    path = os.path.join(root, name)
    os.makedirs(path, exist_ok=True)
    return path


def _run_name(config: Config) -> str:
    return "/".join(p for p in (config.project, config.group, config.name) if p)


@MONITOR.register_module("tensorboard")
class TensorboardMonitor:
    """Scalars to TensorBoard event files (``tensorboard --logdir <job dir>/monitor``)."""

    def __init__(self, config: Config) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = _monitor_dir(config, "tensorboard")
        self._writer: Optional[Any] = SummaryWriter(log_dir=self.log_dir)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self._writer is None:
            raise ValueError("TensorboardMonitor is closed")
        for key, value in _scalars(metrics).items():
            self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


@MONITOR.register_module("wandb")
class WandbMonitor:
    """A Weights & Biases run; offline unless an API key or ``monitor_args.mode`` says otherwise."""

    def __init__(self, config: Config) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise ImportError(
                "monitor.monitor_type 'wandb' needs wandb: pip install 'trinity-launcher[wandb]'"
            ) from exc
        args = dict(config.monitor.monitor_args or {})
        mode = args.pop("mode", None) or os.environ.get("WANDB_MODE")
        if mode is None:
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
        self.run = wandb.init(
            project=args.pop("project", config.project),
            group=args.pop("group", config.group or None),
            name=args.pop("name", config.name),
            dir=args.pop("dir", _monitor_dir(config, "wandb")),
            mode=mode,
            config=config.flatten(),
            reinit="finish_previous",
            **args,
        )

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.run.log(_scalars(metrics), step=step)

    def close(self) -> None:
        """Finish the run and wait until W&B has written it out.

        ``run.finish()`` can return before wandb-core has written the run's records: an
        offline run's ``.wandb`` log was seen holding only its 7-byte header right after it,
        so a process killed then would lose the whole run. ``wandb.teardown()`` waits for the
        service to close its streams (it also finishes any other run left open in this
        process, which is ending its job anyway)."""
        if self.run is not None:
            import wandb

            self.run.finish()
            self.run = None
            wandb.teardown()


@MONITOR.register_module("mlflow")
class MlflowMonitor:
    """An MLflow run in ``monitor_args.tracking_uri`` / ``MLFLOW_TRACKING_URI`` / local SQLite."""

    def __init__(self, config: Config) -> None:
        try:
            import mlflow
        except ImportError as exc:
            raise ImportError(
                "monitor.monitor_type 'mlflow' needs MLflow: pip install 'trinity-launcher[mlflow]'"
            ) from exc
        args = dict(config.monitor.monitor_args or {})
        uri = args.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            uri = "sqlite:///" + os.path.join(_monitor_dir(config, "mlflow"), "mlflow.db")
        self._mlflow = mlflow
        self.client = mlflow.MlflowClient(tracking_uri=uri)
        self.tracking_uri = uri
        experiment_name = args.get("experiment_name", config.project)
        experiment = self.client.get_experiment_by_name(experiment_name)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment(experiment_name)
        )
        tags = {"mlflow.runName": _run_name(config)}
        if config.group:
            tags["group"] = config.group
        self.run_id: Optional[str] = self.client.create_run(experiment_id, tags=tags).info.run_id
        params = {k: str(v)[:500] for k, v in config.flatten().items() if v is not None}
        batch = [mlflow.entities.Param(k, v) for k, v in params.items()]
        for start in range(0, len(batch), 100):
            self.client.log_batch(self.run_id, params=batch[start : start + 100])

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self.run_id is None:
            raise ValueError("MlflowMonitor is closed")
        import time

        now = int(time.time() * 1000)
        entries = [
            self._mlflow.entities.Metric(_mlflow_key(k), v, now, step)
            for k, v in _scalars(metrics).items()
        ]
        for start in range(0, len(entries), 500):
            self.client.log_batch(self.run_id, metrics=entries[start : start + 500])

    def close(self) -> None:
        if self.run_id is not None:
            self.client.set_terminated(self.run_id)
            self.run_id = None


#: Trinity-RFT 0.6's ``monitor_args`` names for ``swanlab.init`` -> SwanLab 0.10's
_SWANLAB_RENAMED = {"experiment_name": "name", "logdir": "log_dir"}
#: SwanLab modes before 0.10 -> now
_SWANLAB_MODES = {"cloud": "online"}


@MONITOR.register_module("swanlab")
class SwanlabMonitor:
    """A SwanLab experiment (Trinity-RFT 0.6's ``swanlab`` monitor).

    ``monitor_args`` go to ``swanlab.init`` (0.6's names ``experiment_name`` / ``logdir`` and
    mode ``cloud`` are read as SwanLab 0.10's ``name`` / ``log_dir`` / ``online``). One
    experiment holds the whole run, named ``config.name`` and tagged with the group (0.6 opens
    one per role, ``<name>_<role>``, tagged with the role: its explorer and trainer log
    separately, ours log through one monitor). Unlike 0.6,
    which refuses to start without ``SWANLAB_API_KEY``, no key and no ``mode`` means
    ``offline`` into ``<job dir>/monitor/swanlab`` (``swanlab sync`` uploads it later): a
    laptop run never stops at a login."""

    def __init__(self, config: Config) -> None:
        try:
            import swanlab
        except ImportError as exc:
            raise ImportError(
                "monitor.monitor_type 'swanlab' needs SwanLab: "
                "pip install 'trinity-launcher[swanlab]'"
            ) from exc
        args = {
            _SWANLAB_RENAMED.get(k, k): v for k, v in (config.monitor.monitor_args or {}).items()
        }
        key = os.environ.get("SWANLAB_API_KEY")
        mode = args.pop("mode", None) or os.environ.get("SWANLAB_MODE")
        mode = _SWANLAB_MODES.get(mode, mode) or ("online" if key else "offline")
        if key and mode == "online":
            swanlab.login(api_key=key, save=False)
        tags = list(args.pop("tags", None) or [])
        if config.group and config.group not in tags:
            tags.append(config.group)
        self._swanlab = swanlab
        self.run: Optional[Any] = swanlab.init(
            project=args.pop("project", config.project),
            name=args.pop("name", config.name),
            log_dir=args.pop("log_dir", _monitor_dir(config, "swanlab")),
            mode=mode,
            tags=tags or None,
            config=config.flatten(),
            **args,
        )

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self.run is None:
            raise ValueError("SwanlabMonitor is closed")
        self.run.log(_scalars(metrics), step=step)

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def _mlflow_key(key: str) -> str:
    # MLflow allows alphanumerics, _ - . space / and rejects others such as '@' (eval metrics)
    return "".join(c if c.isalnum() or c in "_-. /" else "_" for c in key)


class MultiMonitor:
    """Fans each step's metrics out to several monitors; closes all of them."""

    def __init__(self, monitors: list[Monitor]) -> None:
        self.monitors = list(monitors)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        for monitor in self.monitors:
            monitor.log(metrics, step)

    def close(self) -> None:
        errors = []
        for monitor in self.monitors:
            try:
                monitor.close()
            except Exception as exc:  # close the others all the same
                errors.append(exc)
        if errors:
            raise errors[0]


def create_monitor(config: Config, *, with_jsonl: bool = True) -> MultiMonitor:
    """``metrics.jsonl`` in the run directory plus the config's ``monitor.monitor_type``."""
    monitors: list[Monitor] = []
    if with_jsonl and config.checkpoint_job_dir:
        monitors.append(JsonlMonitor(os.path.join(config.checkpoint_job_dir, METRICS_FILE)))
    monitor_type = config.monitor.monitor_type
    if monitor_type:
        monitors.append(MONITOR[monitor_type](config))
    return MultiMonitor(monitors)
