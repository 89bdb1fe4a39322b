"""The ``cluster`` section: Ray cluster sizes and the custom resources that pin the explorer's and
the trainer's placement-group bundles to nodes (read by ``trinity.launcher.placement``). Its own
module so that ``_sections.py`` stays one concern per file; ``from ._sections import
ClusterConfig`` keeps working."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Optional

from pydantic import BeforeValidator, Field

from ._base import Float, Int, _Section

_RESERVED_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


def _placement_resources(value: Any) -> Any:
    """``cluster.explorer_resources`` / ``trainer_resources``: custom Ray resource names with
    amounts > 0 (CPU and GPU come from the cluster's sizes, not from here)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(
            f"{value!r} is not a mapping; allowed: {{resource name: amount > 0}}, e.g. "
            "{node_a: 0.01}"
        )
    out: dict[str, float] = {}
    for key, amount in value.items():
        if not isinstance(key, str) or not key.strip():
            raise ValueError(f"resource name {key!r} is not a non-empty string")
        if key in _RESERVED_RESOURCES or key.startswith("node:"):
            raise ValueError(
                f"resource {key!r} is set by the cluster's sizes, not here; allowed: custom "
                "resources given to `ray start --resources`"
            )
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise ValueError(f"amount of {key!r} is {amount!r}; allowed: a number > 0")
        if not 0 < float(amount) <= 1e6:
            raise ValueError(f"amount of {key!r} is {amount!r}; allowed: a number in (0, 1e6]")
        out[key] = float(amount)
    return out


def cluster_sizes_from_nodes(nodes: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """``(node_num, gpu_per_node)`` of a Ray cluster, from ``ray.nodes()``: the alive nodes, and
    the GPUs of the first alive node that has any (0 on a cluster without GPUs) -- Trinity-RFT's
    rule, so a config leaving both unset sizes its run as Trinity-RFT would. Pure: the caller
    passes what Ray reported (a run reads them once Ray is up, never during ``--dry-run``)."""
    alive = [n for n in nodes if n.get("Alive", n.get("alive", False))]
    gpus = 0
    for node in alive:
        count = (node.get("Resources") or {}).get("GPU") or 0
        if count > 0:
            gpus = int(count)
            break
    return len(alive), gpus


class ClusterConfig(_Section):
    """Ray cluster resources: sizes written, read from Ray at run start (null), or left to the
    placement (0)."""

    ray_address: str = Field("auto", description="Ray address; 'auto' starts or joins locally.")
    node_num: Optional[Int] = Field(
        0,
        ge=0,
        description=(
            "Nodes. null: read from Ray when the run starts (Trinity-RFT's detection), then "
            "GPUs are allocated and checked as for a written size; 0: no GPU allocation by "
            "the config (the placement uses the GPUs Ray has)."
        ),
    )
    gpu_per_node: Optional[Int] = Field(
        0,
        ge=0,
        description=(
            "GPUs per node. null: read from Ray when the run starts (0 on a machine without "
            "GPUs); 0: no GPU allocation by the config (engines and a driver-process trainer "
            "share the GPUs Ray has)."
        ),
    )
    total_gpu_num: Int = Field(0, ge=0, description="Computed.")
    rollout_gpu_num: Int = Field(0, ge=0, description="Computed.")
    auxiliary_model_gpu_num: Int = Field(0, ge=0, description="Computed.")
    explorer_gpu_num: Int = Field(0, ge=0, description="Computed.")
    trainer_gpu_num: Int = Field(0, ge=0, description="Computed.")
    trainer_node_num: Int = Field(0, ge=0, description="Computed.")
    trainer_gpu_num_per_node: Int = Field(0, ge=0, description="Computed.")
    explorer_resources: Annotated[dict[str, float], BeforeValidator(_placement_resources)] = Field(
        default_factory=dict,
        description=(
            "Custom Ray resources every rollout engine's placement bundle also asks for, e.g. "
            "{node_a: 0.01} with `ray start --resources '{\"node_a\": 1}'` on the nodes "
            "meant for the explorer: pins the engines (and their workflow runners) there."
        ),
    )
    trainer_resources: Annotated[dict[str, float], BeforeValidator(_placement_resources)] = Field(
        default_factory=dict,
        description=(
            "Custom Ray resources every trainer rank's placement bundle also asks for (as "
            "explorer_resources); applies to trainer ranks that run as Ray workers."
        ),
    )
    placement_timeout: Float = Field(
        60.0,
        gt=0,
        le=3600,
        description=(
            "Seconds to wait for the placement groups when the cluster could hold them but "
            "its resources are busy; then the run stops with what is missing."
        ),
    )
