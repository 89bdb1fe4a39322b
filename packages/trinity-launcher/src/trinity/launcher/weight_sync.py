"""``synchronizer.sync_method: nccl``: the trainer broadcasts its weights to the rollout engines
over a collective group of their own, tensor by tensor, with no copy through Ray's object store.

The group is separate from the trainer's own process group: rank 0 is the trainer's rank 0
(in the driver, or the first Ray trainer worker), ranks ``1..n`` the rollout engine actors.
It is built from a ``TCPStore`` that rank 0 hosts (``host:port`` chosen on rank 0's node) and
torch's process-group classes directly -- ``ProcessGroupNCCL`` on CUDA, ``ProcessGroupGloo``
on the CPU -- so neither side's default process group is touched (the trainer's FSDP group and
vLLM's own groups stay as they are). verl and Trinity-RFT do the same with their "weight
update group"; vLLM's RLHF example builds it from a ``StatelessProcessGroup``.

Protocol of one synchronisation (:func:`broadcast_to_engines`):

1. the first time, rank 0 opens the group (every engine joins it in the same call) and puts
   the list ``(name, shape, dtype)`` of the tensors it will send in the store (``meta``);
2. every engine allocates a buffer per tensor and takes part in one broadcast per tensor,
   in the list's order; rank 0 streams the tensors as it gathers them from its shards
   (collective over the trainer's ranks: after the first sync, which stages the full state
   once to publish the list, only one full tensor at a time is materialised);
3. each engine loads the received weights and sets the model version.

The group and the metadata are opened once per run and reused. On a machine without CUDA the
config check turns ``nccl`` into ``checkpoint`` (a collective there would be gloo over TCP, no
faster than the object store); the tests run this module with gloo.
"""

from __future__ import annotations

import asyncio
import datetime
import pickle
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from trinity.utils.log import get_logger

logger = get_logger(__name__)

__all__ = [
    "WeightGroupSpec",
    "WeightReceiver",
    "WeightSender",
    "broadcast_to_engines",
    "local_gpus",
    "shared_gpus",
]

_PREFIX = "trinity-weight-sync"
_META_KEY = "meta"


@dataclass(frozen=True)
class WeightGroupSpec:
    """Where and how the weight group meets (picklable: it travels to every member)."""

    host: str
    port: int
    world_size: int
    backend: str  # "nccl" | "gloo"
    timeout_s: float = 1800.0

    def __post_init__(self) -> None:
        if self.backend not in ("nccl", "gloo"):
            raise ValueError(f"backend={self.backend!r} is invalid; allowed: 'nccl', 'gloo'")
        if self.world_size < 2:
            raise ValueError(
                f"world_size={self.world_size} is invalid; allowed: >= 2 (the trainer and at "
                "least one rollout engine)"
            )

    @property
    def device(self) -> str:
        return "cuda" if self.backend == "nccl" else "cpu"


class _Group:
    """A process group of the spec at one rank, with the store that keeps it alive."""

    def __init__(self, spec: WeightGroupSpec, rank: int) -> None:
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=spec.timeout_s)
        self.spec = spec
        self.rank = rank
        self.store = dist.TCPStore(
            spec.host, spec.port, spec.world_size, is_master=rank == 0, timeout=timeout
        )
        prefixed = dist.PrefixStore(_PREFIX, self.store)
        if spec.backend == "gloo":
            self.pg = dist.ProcessGroupGloo(prefixed, rank, spec.world_size, timeout)
        else:
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            self.pg = dist.ProcessGroupNCCL(prefixed, rank, spec.world_size, options)

    def broadcast(self, tensor: Tensor) -> None:
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        self.pg.broadcast([tensor], opts).wait()


class WeightSender:
    """Rank 0 of the weight group: opens it once, then streams every synchronisation."""

    def __init__(self) -> None:
        self._group: _Group | None = None

    def send(self, spec: WeightGroupSpec, tensors: Iterable[tuple[str, Tensor]]) -> int:
        """Broadcast ``(name, tensor)`` in order; returns the number of tensors.

        The first call opens the group (blocking until every engine has joined) and publishes
        the tensors' names, shapes and dtypes, which every later call must repeat exactly.
        """
        if self._group is None or self._group.spec != spec:
            self._group = _Group(spec, 0)
            self._meta: list[tuple[str, tuple[int, ...], str]] | None = None
        sent: list[tuple[str, tuple[int, ...], str]] = []
        items: Iterator[tuple[str, Tensor]] = iter(tensors)
        if self._meta is None:  # first sync: the receivers need the list before the data
            staged = [(name, t.detach()) for name, t in items]
            self._meta = [
                (n, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for n, t in staged
            ]
            self._group.store.set(_META_KEY, pickle.dumps(self._meta))
            items = iter(staged)
        for name, tensor in items:
            index = len(sent)
            expected = self._meta[index] if index < len(self._meta) else None
            got = (name, tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."))
            if got != expected:
                raise RuntimeError(
                    f"weight sync: tensor {index} is {got}, the group was opened for {expected}"
                )
            self._group.broadcast(tensor.detach().to(self._group.spec.device).contiguous())
            sent.append(got)
        if len(sent) != len(self._meta):
            raise RuntimeError(
                f"weight sync: sent {len(sent)} tensors, the group expects {len(self._meta)}"
            )
        return len(sent)


class WeightReceiver:
    """An engine's side of the weight group (rank ``rank``)."""

    def __init__(self) -> None:
        self._group: _Group | None = None
        self._meta: list[tuple[str, tuple[int, ...], str]] = []

    def receive(self, spec: WeightGroupSpec, rank: int) -> dict[str, Tensor]:
        """Join (the first time) and receive one synchronisation's tensors by name."""
        if self._group is None or self._group.spec != spec or self._group.rank != rank:
            self._group = _Group(spec, rank)
            self._meta = pickle.loads(self._group.store.get(_META_KEY))
        out: dict[str, Tensor] = {}
        for name, shape, dtype in self._meta:
            buffer = torch.empty(shape, dtype=getattr(torch, dtype), device=spec.device)
            self._group.broadcast(buffer)
            out[name] = buffer
        return out


def local_gpus() -> tuple[str, list[str]]:
    """``(node id, physical GPU ids)`` of this process: Ray's assignment for an actor with GPUs,
    else the CUDA device torch uses (through ``CUDA_VISIBLE_DEVICES``); no GPUs on the CPU."""
    import os

    node = ""
    try:
        import ray

        if ray.is_initialized():
            node = ray.get_runtime_context().get_node_id()
            assigned = [str(g) for g in ray.get_gpu_ids()]
            if assigned:
                return node, assigned
    except ImportError:
        pass
    if not torch.cuda.is_available():
        return node, []
    current = torch.cuda.current_device()
    visible = [
        v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()
    ]
    return node, [visible[current] if current < len(visible) else str(current)]


def shared_gpus(trainer: tuple[str, list[str]], engines: list[tuple[str, list[str]]]) -> list[int]:
    """Indices of the engines on a GPU of the trainer's rank 0 (same node, a common GPU id):
    NCCL refuses two ranks of one group on one device."""
    node, gpus = trainer
    return [
        i
        for i, (engine_node, engine_gpus) in enumerate(engines)
        if engine_node == node and set(engine_gpus) & set(gpus)
    ]


async def broadcast_to_engines(
    engine: Any, handles: list[Any], spec: WeightGroupSpec, version: int, timeout: float
) -> None:
    """One synchronisation: ``engine.broadcast_weights(spec)`` (the trainer side, rank 0) and
    ``handle.receive_weights(spec, rank, version)`` on every rollout engine, concurrently."""
    receivers = [
        h.receive_weights.remote(spec=spec, rank=i + 1, version=version)
        for i, h in enumerate(handles)
    ]
    sender = asyncio.create_task(asyncio.to_thread(engine.broadcast_weights, spec))
    try:
        await asyncio.wait_for(asyncio.gather(sender, *receivers), timeout=timeout)
    except BaseException:
        sender.cancel()
        raise
