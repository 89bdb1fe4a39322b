"""Where the run's actors go: Ray placement groups built from the ``cluster`` section.

Without placement groups Ray's default scheduler puts each actor wherever it fits *now*, and a
request no node can ever satisfy (a GPU on a GPU-less cluster, 8 GPUs on 2-GPU nodes) waits
forever without a word. So a run first **plans** its bundles (pure: :func:`plan_placement`),
**checks** the plan against the cluster's nodes (pure: :func:`placement_shortfalls`, which
returns what is missing in words: "needs 4 GPUs on one node for the trainer; the cluster's
largest node has 2 GPUs") and refuses an impossible plan in seconds
(:class:`PlacementError`), then **reserves** the bundles (:meth:`Placement.create`, waiting
at most ``cluster.placement_timeout`` seconds when the cluster could hold them but they are
busy) and hands out ``.options(...)`` for every actor:

* one placement group of the rollout engines (strategy ``PACK``): engine ``i`` on bundle ``i``
  of ``tensor_parallel_size`` GPUs (or a sliver of a CPU on a CPU cluster), its workflow
  runners on the same bundle (they reserve nothing, so they simply land on the engine's node);
  one such group per auxiliary model;
* the trainer's Ray worker ranks packed per node: one ``STRICT_PACK`` group of
  ``ranks_per_node`` one-GPU (or CPU-sliver) bundles per trainer node;
* ``cluster.explorer_resources`` / ``cluster.trainer_resources``: custom Ray resources (from
  ``ray start --resources``) every engine / trainer bundle also asks for -- how a config says
  "engines on these nodes, trainer on those".

A replaced engine (:mod:`trinity.launcher.engines.supervisor`) gets the options of the engine
it replaces, so it lands in the same bundle. At start the run logs a placement table (actor,
node, bundle, resources) to its log, a one-line summary to the console. A node that dies
mid-run is named by :meth:`Placement.lost_nodes` in the run's error.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from trinity.common.config.modes import run_mode_spec
from trinity.utils.log import get_logger

__all__ = [
    "BUNDLE_CPUS",
    "BundleGroup",
    "NodeLostError",
    "Placement",
    "PlacementError",
    "PlacementPlan",
    "placement_session",
    "placement_shortfalls",
    "plan_placement",
]

logger = get_logger(__name__)

#: CPUs every bundle reserves: a sliver, so that engines and trainer ranks (which mostly wait
#: on each other or on a GPU) fit beside each other on a small machine; bundles cannot be empty
BUNDLE_CPUS = 0.01
#: engine types whose actors take GPUs on a GPU cluster (as ``engines._actor_resources``)
GPU_ENGINE_TYPES = ("vllm", "vllm_async", "transformers")


class PlacementError(RuntimeError):
    """The cluster cannot hold the run's bundles (found before any engine or rank started)."""


class NodeLostError(RuntimeError):
    """A node holding some of the run's actors died during the run."""


# ------------------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class BundleGroup:
    """One placement group: ``bundles[i]`` are Ray resource dicts, ``actors[i]`` what runs
    in bundle ``i`` (for messages and the placement table)."""

    name: str
    strategy: str
    bundles: tuple[dict[str, float], ...]
    actors: tuple[str, ...]
    #: what the group is, in a refusal message ("the trainer (4 ranks x 1 GPU)")
    label: str = ""

    def total(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for bundle in self.bundles:
            for key, amount in bundle.items():
                out[key] = out.get(key, 0.0) + amount
        return out


@dataclass
class PlacementPlan:
    """Every placement group of a run: ``engines[k]`` (``k = 0`` the rollout model, then the
    auxiliary models in order; an entry per engine role that has engines) and the trainer's
    per-node groups."""

    engines: list[BundleGroup] = field(default_factory=list)
    trainer: list[BundleGroup] = field(default_factory=list)
    #: trainer ranks per trainer group (rank ``r`` is bundle ``r % per_node`` of group
    #: ``r // per_node``)
    ranks_per_node: int = 1

    @property
    def groups(self) -> list[BundleGroup]:
        return [*self.engines, *self.trainer]


def _engine_resources(model_cfg: Any, gpus: bool, extra: Mapping[str, float]) -> dict[str, float]:
    bundle = {"CPU": BUNDLE_CPUS, **extra}
    if gpus and model_cfg.engine_type in GPU_ENGINE_TYPES:
        bundle["GPU"] = float(max(1, int(model_cfg.tensor_parallel_size or 1)))
    return bundle


def plan_placement(
    config: Any,
    *,
    gpus: bool,
    trainer_ranks: int = 0,
    trainer_device: str = "cpu",
    ranks_per_node: Optional[int] = None,
) -> PlacementPlan:
    """The bundles of a run (pure: reads ``config`` only).

    Args:
        config: a checked :class:`~trinity.common.config.Config`.
        gpus: whether engines take GPUs (a GPU cluster: ``cluster.gpu_per_node`` set or GPUs
            found); their bundles then hold ``tensor_parallel_size`` GPUs.
        trainer_ranks: trainer ranks that run as Ray workers (0: none, e.g. mode explore or
            a trainer in the driver process).
        trainer_device: ``cuda`` gives every rank a one-GPU bundle, ``cpu`` a CPU sliver.
        ranks_per_node: ranks packed on one node (default: all on one node).
    """
    plan = PlacementPlan()
    cluster = config.cluster
    explorer = config.explorer
    if run_mode_spec(config.mode).uses_rollout_engines:
        models = [("rollout", explorer.rollout_model)]
        models += [(f"auxiliary_{k}", aux) for k, aux in enumerate(explorer.auxiliary_models or [])]
        for k, (name, model_cfg) in enumerate(models):
            if int(model_cfg.engine_num) < 1:
                continue
            bundle = _engine_resources(model_cfg, gpus, cluster.explorer_resources)
            what = "rollout engine" if k == 0 else f"auxiliary model {k - 1} engine"
            n = int(model_cfg.engine_num)
            plan.engines.append(
                BundleGroup(
                    name=name,
                    strategy="PACK",
                    bundles=tuple(dict(bundle) for _ in range(n)),
                    actors=tuple(f"{what} {i}" for i in range(n)),
                    label=f"{what} (tensor_parallel_size {model_cfg.tensor_parallel_size})"
                    if "GPU" in bundle
                    else what,
                )
            )
    if trainer_ranks > 0:
        per_node = int(ranks_per_node or trainer_ranks)
        if per_node < 1:
            raise ValueError(f"ranks_per_node={per_node} is invalid; allowed: an integer >= 1")
        plan.ranks_per_node = per_node
        bundle = {"CPU": BUNDLE_CPUS, **cluster.trainer_resources}
        unit = "1 GPU" if trainer_device == "cuda" else f"{BUNDLE_CPUS:g} CPU"
        if trainer_device == "cuda":
            bundle["GPU"] = 1.0
        for node, first in enumerate(range(0, trainer_ranks, per_node)):
            ranks = range(first, min(first + per_node, trainer_ranks))
            plan.trainer.append(
                BundleGroup(
                    name=f"trainer_{node}",
                    strategy="STRICT_PACK",
                    bundles=tuple(dict(bundle) for _ in ranks),
                    actors=tuple(f"trainer rank {r}" for r in ranks),
                    label=f"the trainer ({len(ranks)} ranks x {unit})",
                )
            )
    return plan


# ------------------------------------------------------------------------------ feasibility


def _amount(key: str, amount: float) -> str:
    text = f"{amount:g}"
    if key == "GPU":
        return f"{text} GPU{'' if amount == 1 else 's'}"
    if key == "CPU":
        return f"{text} CPU{'' if amount == 1 else 's'}"
    return f"{text} of resource {key!r}"


def _describe(need: Mapping[str, float]) -> str:
    order = sorted(need, key=lambda k: (k not in ("GPU", "CPU"), k != "GPU", k))
    return ", ".join(_amount(k, need[k]) for k in order)


_EPS = 1e-9


def placement_shortfalls(plan: PlacementPlan, nodes: Sequence[Mapping[str, float]]) -> list[str]:
    """What the cluster lacks for ``plan``, in words; empty when it may hold it.

    ``nodes`` are the alive nodes' total resources (``ray.nodes()[i]["Resources"]``). These
    are necessary conditions, checked without Ray: enough of every resource in total, and for
    every group that must sit on one node (``STRICT_PACK``) or every single bundle, a node
    that has all of it. A plan that passes may still wait for busy resources (the caller
    waits ``cluster.placement_timeout`` seconds for that).
    """
    problems: list[str] = []
    totals: dict[str, float] = {}
    for node in nodes:
        for key, amount in node.items():
            totals[key] = totals.get(key, 0.0) + float(amount)
    need_total: dict[str, dict[str, float]] = {}
    for group in plan.groups:
        for key, amount in group.total().items():
            per = need_total.setdefault(key, {})
            who = (
                "the trainer"
                if group in plan.trainer
                else f"the {group.actors[0].rpartition(' ')[0]}s"
            )
            per[who] = per.get(who, 0.0) + amount
    for key in sorted(need_total, key=lambda k: (k != "GPU", k != "CPU", k)):
        need = sum(need_total[key].values())
        have = totals.get(key, 0.0)
        if need > have + _EPS:
            parts = ", ".join(f"{amount:g} for {who}" for who, amount in need_total[key].items())
            problems.append(
                f"needs {_amount(key, need)} in total ({parts}); the cluster has "
                f"{'none' if not have else f'{have:g}'}"
            )
    units: list[tuple[str, dict[str, float]]] = []
    for group in plan.groups:
        if group.strategy == "STRICT_PACK":
            units.append((group.label or group.name, group.total()))
        else:
            seen: set[tuple] = set()
            for bundle in group.bundles:
                key = tuple(sorted(bundle.items()))
                if key not in seen:  # alike bundles: one message
                    seen.add(key)
                    units.append((group.label or group.name, dict(bundle)))
    for what, need in units:
        if any(all(node.get(k, 0.0) + _EPS >= v for k, v in need.items()) for node in nodes):
            continue
        short = [k for k, v in need.items() if not any(n.get(k, 0.0) + _EPS >= v for n in nodes)]
        if not short:  # each part fits somewhere, never all of it on one node
            problems.append(
                f"needs {_describe(need)} on one node for {what}; nodes have each part, "
                "but no node has all of it"
            )
            continue
        largest = []
        for key in short:
            best = max((float(n.get(key, 0.0)) for n in nodes), default=0.0)
            if best:
                largest.append(f"the cluster's largest node has {_amount(key, best)}")
            elif key in ("GPU", "CPU"):
                largest.append(f"no node has any {key}s")
            else:
                largest.append(f"no node has resource {key!r}")
        needs = _describe({k: need[k] for k in short})
        problems.append(f"needs {needs} on one node for {what}; " + "; ".join(largest))
    return problems


# ------------------------------------------------------------------------------ Ray


def _alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def _node_label(node: Mapping[str, Any]) -> str:
    custom = sorted(
        k
        for k in (node.get("Resources") or {})
        if k not in ("CPU", "GPU", "memory", "object_store_memory")
        and not k.startswith("node:")
        and not k.startswith("accelerator_type")
    )
    ip = node.get("NodeManagerAddress", "?")
    node_id = str(node.get("NodeID", ""))[:8]
    return f"{ip} {node_id}" + (f" ({', '.join(custom)})" if custom else "")


class Placement:
    """The reserved placement groups of a run and the ``.options(...)`` of its actors."""

    def __init__(self, plan: PlacementPlan, groups: dict[str, Any]) -> None:
        self.plan = plan
        self.groups = groups
        #: ``(group name, bundle index) -> node id``, filled by :meth:`locate`
        self.bundle_nodes: dict[tuple[str, int], str] = {}
        self.node_labels: dict[str, str] = {}

    # ---------------------------------------------------------------- creation
    @classmethod
    def create(cls, plan: PlacementPlan, timeout: float) -> Placement:
        """Check ``plan`` against the cluster, reserve its groups, wait for them.

        Raises:
            PlacementError: the cluster cannot hold the plan (at once), or its groups were
                not all ready within ``timeout`` seconds (the resources stayed busy).
        """
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        nodes = _alive_nodes()
        problems = placement_shortfalls(plan, [n.get("Resources") or {} for n in nodes])
        if problems:
            raise PlacementError(
                "the cluster cannot hold this run: "
                + "; ".join(problems)
                + f" (cluster: {_cluster_summary(nodes)}; see docs/cluster.md)"
            )
        groups: dict[str, Any] = {}
        try:
            for group in plan.groups:
                groups[group.name] = placement_group(
                    [dict(b) for b in group.bundles], strategy=group.strategy
                )
            began = time.monotonic()
            for group in plan.groups:
                left = max(0.1, timeout - (time.monotonic() - began))
                try:
                    ray.get(groups[group.name].ready(), timeout=left)
                except ray.exceptions.GetTimeoutError:
                    free = ray.available_resources()
                    raise PlacementError(
                        f"the cluster could hold this run but its resources stayed busy: "
                        f"{group.label or group.name} ({_describe(group.total())} as "
                        f"{len(group.bundles)} bundle(s), {group.strategy}) was not placed "
                        f"within cluster.placement_timeout ({timeout:g}s); free now: "
                        f"{_describe({k: v for k, v in free.items() if k in ('CPU', 'GPU') or k in group.total()})}"
                    ) from None
        except BaseException:
            for pg in groups.values():
                with contextlib.suppress(Exception):
                    remove_placement_group(pg)
            raise
        placement = cls(plan, groups)
        placement.locate(nodes)
        return placement

    def locate(self, nodes: Optional[list[dict[str, Any]]] = None) -> None:
        """Learn which node holds each bundle (for the table and :meth:`lost_nodes`)."""
        from ray.util.placement_group import placement_group_table

        for node in nodes if nodes is not None else _alive_nodes():
            self.node_labels[str(node.get("NodeID"))] = _node_label(node)
        for name, pg in self.groups.items():
            table = placement_group_table(pg)
            for index, node_id in (table.get("bundles_to_node_id") or {}).items():
                self.bundle_nodes[(name, int(index))] = str(node_id)

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for pg in self.groups.values():
            with contextlib.suppress(Exception):
                remove_placement_group(pg)
        self.groups = {}

    # ---------------------------------------------------------------- options
    def _strategy(self, name: str, index: int) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            placement_group=self.groups[name], placement_group_bundle_index=index
        )

    def _engine_group(self, model: int) -> BundleGroup:
        name = "rollout" if model == 0 else f"auxiliary_{model - 1}"
        for group in self.plan.engines:
            if group.name == name:
                return group
        raise KeyError(f"no placement group of engines {name!r}")

    def engine_options(self, index: int, model: int = 0) -> dict[str, Any]:
        """Options of engine ``index`` of model ``model`` (0: the rollout model, ``k``:
        auxiliary model ``k - 1``): its bundle, and the bundle's GPUs."""
        group = self._engine_group(model)
        return {
            "num_cpus": 0,
            "num_gpus": group.bundles[index].get("GPU", 0.0),
            "scheduling_strategy": self._strategy(group.name, index),
        }

    def runner_options(self, engine_index: int) -> dict[str, Any]:
        """Options of a workflow runner of rollout engine ``engine_index``: its engine's bundle
        (runners reserve nothing: they land on the engine's node)."""
        return {"num_cpus": 0, "scheduling_strategy": self._strategy("rollout", engine_index)}

    def trainer_options(self, rank: int) -> dict[str, Any]:
        """Options of trainer rank ``rank``: bundle ``rank % per_node`` of its node's group."""
        per = self.plan.ranks_per_node
        group = self.plan.trainer[rank // per]
        return {
            "num_cpus": 0,
            "num_gpus": group.bundles[rank % per].get("GPU", 0.0),
            "scheduling_strategy": self._strategy(group.name, rank % per),
        }

    # ---------------------------------------------------------------- reporting
    def table(self) -> list[tuple[str, str, str, str]]:
        """``(actor, node, bundle, resources)`` rows of every bundle."""
        rows = []
        for group in self.plan.groups:
            for i, (actor, bundle) in enumerate(zip(group.actors, group.bundles, strict=True)):
                node = self.bundle_nodes.get((group.name, i), "?")
                rows.append(
                    (
                        actor,
                        self.node_labels.get(node, node[:8]),
                        f"{group.name}[{i}] {group.strategy}",
                        _describe(bundle),
                    )
                )
        return rows

    def log_table(self) -> None:
        """The table into the run's log (not the console), a one-line summary on both."""
        rows = self.table()
        head = ("actor", "node", "bundle", "resources")
        widths = [max(len(str(r[c])) for r in [head, *rows]) for c in range(4)]
        lines = [
            "  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True))
            for r in [head, *rows]
        ]
        logger.info("Placement:\n%s", "\n".join(lines), extra={"console": False})
        per_node: dict[str, list[str]] = {}
        for actor, node, _, _ in rows:
            per_node.setdefault(node, []).append(actor)
        logger.info(
            "Placement: %d bundle(s) on %d node(s): %s (table in the run's log)",
            len(rows),
            len(per_node),
            "; ".join(f"{node}: {_short(actors)}" for node, actors in per_node.items()),
        )

    def lost_nodes(self, wait: float = 0.0) -> Optional[str]:
        """Which of the run's nodes are dead and what they held, or ``None``; waits up to
        ``wait`` seconds for Ray to declare one dead (an actor of a dead node fails before
        Ray's health check has given up on the node)."""
        deadline = time.monotonic() + wait
        while True:
            found = self._lost_now()
            if found is not None or time.monotonic() >= deadline:
                return found
            time.sleep(0.5)

    def _lost_now(self) -> Optional[str]:
        import ray

        alive = {str(n.get("NodeID")) for n in ray.nodes() if n.get("Alive")}
        lost: dict[str, list[str]] = {}
        for group in self.plan.groups:
            for i, actor in enumerate(group.actors):
                node = self.bundle_nodes.get((group.name, i))
                if node is not None and node not in alive:
                    lost.setdefault(node, []).append(actor)
        if not lost:
            return None
        return "; ".join(
            f"node {self.node_labels.get(node, node)} was lost (it held {_short(actors)})"
            for node, actors in lost.items()
        )


def _short(actors: list[str]) -> str:
    """``rollout engine 0, 1, trainer rank 0, 1`` from the full names."""
    out: list[str] = []
    last = None
    for actor in actors:
        kind, _, index = actor.rpartition(" ")
        if kind == last:
            out[-1] += f", {index}"
        else:
            out.append(actor)
            last = kind
    return ", ".join(out)


def _cluster_summary(nodes: Sequence[Mapping[str, Any]]) -> str:
    if not nodes:
        return "no alive node"
    parts = []
    for node in nodes:
        res = node.get("Resources") or {}
        show = {k: v for k, v in res.items() if k in ("CPU", "GPU")}
        show.setdefault("GPU", 0.0)
        custom = [
            k
            for k in res
            if k not in ("CPU", "GPU", "memory", "object_store_memory")
            and not k.startswith(("node:", "accelerator_type"))
        ]
        parts.append(
            f"{node.get('NodeManagerAddress', '?')}: {_describe(show)}"
            + (f", {', '.join(custom)}" if custom else "")
        )
    return f"{len(nodes)} node(s): " + "; ".join(parts)


# ------------------------------------------------------------------------------ a run's


def cluster_has_gpus() -> bool:
    import ray

    return bool(ray.cluster_resources().get("GPU", 0))


@contextlib.contextmanager
def placement_session(
    config: Any,
    *,
    trainer_ranks: int = 0,
    trainer_device: str = "cpu",
    ranks_per_node: Optional[int] = None,
) -> Iterator[Placement]:
    """The run's placement groups, inside ``ray_session``: planned, checked, reserved and
    logged; removed when the run ends. Engines take GPUs where ``cluster.gpu_per_node`` is
    set or the cluster has GPUs; the trainer's Ray worker ranks as given (see
    :func:`trinity.launcher.trainer.workers.trainer_layout`)."""
    gpus = bool(config.cluster.gpu_per_node) or cluster_has_gpus()
    plan = plan_placement(
        config,
        gpus=gpus,
        trainer_ranks=trainer_ranks,
        trainer_device=trainer_device,
        ranks_per_node=ranks_per_node,
    )
    placement = Placement.create(plan, float(config.cluster.placement_timeout))
    try:
        placement.log_table()
        yield placement
    finally:
        placement.remove()
