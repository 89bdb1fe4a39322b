"""Monitor contract and metric helpers (Trinity-RFT's ``trinity.utils.monitor``).

* :data:`MONITOR`: the registry of metric sinks (``monitor.monitor_type``). The sinks
  themselves (tensorboard, wandb, mlflow, swanlab) ship with ``trinity-launcher`` and are advertised
  through the ``trinity.monitor`` entry-point group, so ``MONITOR.get("wandb")`` works without
  importing the launcher by hand and this core module imports no sibling package. The config
  schema accepts :data:`BUILTIN_MONITOR_TYPES` and every name registered here (a plugin's
  ``@MONITOR.register_module("my_monitor")``).
* :class:`Monitor`: what a sink implements (``log(metrics, step)`` and ``close()``).
* :func:`gather_metrics`: mean / max / min of per-item metric dicts under a prefix, e.g. the
  ``group_advantages/<key>/mean`` metrics of the group advantage functions.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from trinity.utils.registry import Registry

__all__ = ["BUILTIN_MONITOR_TYPES", "MONITOR", "Monitor", "gather_metrics"]

#: Metric sinks by ``monitor.monitor_type``; plugins add theirs with
#: ``@MONITOR.register_module("my_monitor")`` on a class taking ``(config)``.
MONITOR: Registry[type] = Registry("monitor")

#: The sinks Trinity ships (with ``trinity-launcher``): configs naming them validate even where
#: the launcher is not installed (``trinity-core`` alone checking a Trinity-RFT config).
BUILTIN_MONITOR_TYPES: tuple[str, ...] = ("tensorboard", "wandb", "mlflow", "swanlab")


@runtime_checkable
class Monitor(Protocol):
    """A metrics sink: ``log`` one step's scalar metrics, ``close`` at the end of the run."""

    def log(self, metrics: dict[str, Any], step: int) -> None: ...

    def close(self) -> None: ...


def gather_metrics(metric_list: Sequence[Mapping[str, Any]], prefix: str) -> dict[str, float]:
    """``{f"{prefix}/{key}/mean"|"/max"|"/min": ...}`` over the dicts of ``metric_list``.

    Each key is aggregated over the dicts that have a finite real value for it (booleans
    count as 0/1; strings and other values are ignored), as Trinity-RFT's helper does with a
    DataFrame. An empty list gives ``{}``.
    """
    columns: dict[str, list[float]] = {}
    for metrics in metric_list:
        for key, value in metrics.items():
            if isinstance(value, numbers.Real) and math.isfinite(float(value)):
                columns.setdefault(key, []).append(float(value))
    out: dict[str, float] = {}
    for key, values in columns.items():
        out[f"{prefix}/{key}/mean"] = math.fsum(values) / len(values)
        out[f"{prefix}/{key}/max"] = max(values)
        out[f"{prefix}/{key}/min"] = min(values)
    return out
