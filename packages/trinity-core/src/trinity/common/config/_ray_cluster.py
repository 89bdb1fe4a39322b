"""Cluster sizes a config leaves to Ray (``null``), read when a run starts.

``cluster.node_num: null`` / ``cluster.gpu_per_node: null`` mean "whatever the Ray cluster
has". Trinity-RFT 0.6 finds out inside ``check_and_update``, starting Ray for it; here
validation never starts Ray (``trinity-launch --dry-run`` stays instant and works without a
cluster), so the checks that need the sizes wait until the run has Ray up and calls
:func:`apply_cluster_sizes` with ``ray.nodes()``. The same rules then derive the GPU allocation
and check it, exactly as for sizes written in the config. ``0`` keeps this release's meaning
(no allocation by the config; the placement uses the GPUs Ray has: ``docs/gpu.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ._cluster import cluster_sizes_from_nodes
from ._errors import ConfigError
from ._rules import rule_cluster_sizes
from ._utils import _Checker, _set_derived

if TYPE_CHECKING:
    from ._core import Config

__all__ = ["apply_cluster_sizes"]

logger = logging.getLogger("trinity.common.config")


def apply_cluster_sizes(config: Config, nodes: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Fill ``cluster.node_num`` / ``cluster.gpu_per_node`` left ``None`` from Ray's ``nodes``
    (``ray.nodes()``), in place, and derive and check what depends on them.

    Sizes the config sets (0 included) are kept. On a machine without GPUs ``gpu_per_node``
    becomes 0 and nothing else changes (the CPU path). Returns the sizes read from Ray (empty
    when the config leaves none to Ray).

    Raises:
        ConfigError: the cluster cannot hold the run as configured (each problem names its
            field, and says the sizes came from Ray).
    """
    cluster = config.cluster
    if cluster.node_num is not None and cluster.gpu_per_node is not None:
        return {}
    node_num, gpu_per_node = cluster_sizes_from_nodes(nodes)
    read: dict[str, int] = {}
    if cluster.node_num is None:
        read["node_num"] = node_num
        _set_derived(cluster, "node_num", node_num)
    if cluster.gpu_per_node is None:
        read["gpu_per_node"] = gpu_per_node
        _set_derived(cluster, "gpu_per_node", gpu_per_node)
    sizes = ", ".join(f"cluster.{k}={v}" for k, v in read.items())
    logger.info("Read from the Ray cluster: %s", sizes)
    checker = _Checker(config, run_checks=False, quiet=False)
    rule_cluster_sizes(checker, config)
    if checker.issues:
        note = f" ({sizes} read from the Ray cluster, since the config leaves them to Ray"
        if (cluster.node_num, cluster.gpu_per_node) == (1, 1) and not config.run_mode.colocated:
            # Trinity-RFT switches such a run to colocate silently; here the mode is the user's
            note += "; on one GPU, mode 'colocate' shares it between the engine and the trainer"
        for issue in checker.issues:
            issue.message += note + ")"
        raise ConfigError(checker.issues)
    return read
