"""The trainer's engines as Ray workers: one actor per data-parallel rank (SPMD).

verl runs its FSDP workers as Ray actors that all execute the same call on their shard of the
batch; Trinity does the same with its own engines. :class:`TrainerWorkerGroup` starts
``world_size`` :class:`TrainerWorker` actors (one GPU each on CUDA, no CPU reservation on the
CPU), gives them a torch process group (``MASTER_ADDR`` is rank 0's node, ``env://``), and
builds in each the engines of the run -- the policy (``actor``), a reference policy (``ref``)
and a critic (``critic``) as the algorithm needs them -- so the three share a process and its
process group as in verl's colocated ``ActorRolloutRefWorker``.

:class:`RemoteEngine` is the driver's handle on one role: it implements the
:class:`~trinity.launcher.trainer.trainer.TrainEngine` / ``CriticEngine`` protocols the
:class:`~trinity.launcher.trainer.trainer.Trainer` loop talks to, so the loop, the losses and
the synchronizer do not know whether the engine is in the driver (one rank) or spread over
workers. Each call splits the collated batch by rows (:func:`partition_rows`: by token count
with ``trainer.balance_batch``, else contiguous shards whose sizes differ by at most one row; a
DPO pair never split), runs the method on every rank at once and joins the per-row results
back in the batch's order. The engines' metrics are already
reduced over ranks (global loss denominators, all-reduced sums), so rank 0's are the batch's.

The actors stay thin: no math here; the engines do the collective work.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor

from trinity.common.config.modes import run_mode_spec
from trinity.common.experience import Experiences
from trinity.utils.gc_heap import freeze_startup_heap
from trinity.utils.log import get_logger

logger = get_logger(__name__)

#: a warning names the trainer ranks still running a call every this many seconds
WAIT_LOG_S = 300.0
#: the environment variable that sets :data:`CALL_TIMEOUT_S`
CALL_TIMEOUT_ENV = "TRINITY_TRAINER_CALL_TIMEOUT"
#: seconds one call on the trainer's ranks (a train step, a checkpoint, a weight export) may
#: take before the run stops with ``TimeoutError``, unless :data:`CALL_TIMEOUT_ENV` says
#: otherwise (a stuck collective ends sooner, at the process group's own timeout)
CALL_TIMEOUT_S = 4 * 3600.0


def call_timeout_s() -> float:
    """The bound on one trainer call (:data:`CALL_TIMEOUT_S`, or :data:`CALL_TIMEOUT_ENV`)."""
    return float(os.environ.get(CALL_TIMEOUT_ENV) or CALL_TIMEOUT_S)


#: seconds rank 0 may take to start and report its address
_START_TIMEOUT_S = 600.0
_POLL_S = 5.0

__all__ = [
    "RemoteEngine",
    "TrainerWorker",
    "TrainerRanksError",
    "TrainerWorkerGroup",
    "partition_rows",
    "split_rows",
    "take_rows",
    "trainer_world_size",
]


class TrainerRanksError(ValueError):
    """A bad trainer-ranks setting; ``field`` is its dotted config path, ``value`` the value."""

    def __init__(self, field: str, value: Any, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


def trainer_world_size(config: Any, device: str) -> int:
    """How many trainer ranks a run uses.

    * ``trainer.trainer_config.trainer.n_gpus_per_node`` (times ``nnodes``, default 1) -- verl's
      own names, as in a verl config -- when set; on the CPU these are CPU ranks (gloo);
    * else, on CUDA, ``cluster.trainer_gpu_num`` (the cluster's GPUs left after the rollout
      engines, computed from ``cluster.node_num`` and ``cluster.gpu_per_node``) when known;
    * else 1: the engine runs in the driver process, no worker actors.
    """
    verl = (getattr(config.trainer, "trainer_config", None) or {}).get("trainer") or {}
    where = "trainer.trainer_config.trainer"
    if verl.get("n_gpus_per_node") is not None:
        ranks = verl.get("n_gpus_per_node")
        nodes = verl.get("nnodes", 1)
        for name, value in (("n_gpus_per_node", ranks), ("nnodes", nodes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TrainerRanksError(
                    f"{where}.{name}",
                    value,
                    f"{where}.{name}={value!r} is invalid; allowed: an integer >= 1 (trainer "
                    "ranks per node and nodes; CPU ranks on a machine without CUDA)",
                )
        return int(ranks) * int(nodes)
    if device == "cuda" and int(config.cluster.trainer_gpu_num or 0) > 0:
        return int(config.cluster.trainer_gpu_num)
    return 1


def trainer_layout(config: Any) -> dict[str, Any]:
    """``trainer_ranks`` (Ray worker ranks), ``trainer_device``, ``ranks_per_node`` of the run's
    trainer, as :func:`~trinity.launcher.placement.placement_session` takes them: no worker ranks
    (0) where its one rank runs in the driver process or the mode has no trainer."""
    spec = run_mode_spec(config.mode)
    if not spec.trains or spec.colocated:
        return {"trainer_ranks": 0}
    from trinity.launcher.trainer.verl_compat import default_device

    device = default_device()
    ranks = trainer_world_size(config, device)
    if ranks <= 1:
        return {"trainer_ranks": 0, "trainer_device": device}
    per_node = trainer_ranks_per_node(config, ranks)
    return {"trainer_ranks": ranks, "trainer_device": device, "ranks_per_node": per_node}


def trainer_ranks_per_node(config: Any, world_size: int) -> int:
    """Trainer ranks placed on one node: verl's ``trainer.trainer_config.trainer.
    n_gpus_per_node`` where set, else ``cluster.trainer_gpu_num_per_node``, else all
    ``world_size`` ranks on one node (how the placement packs them)."""
    verl = (getattr(config.trainer, "trainer_config", None) or {}).get("trainer") or {}
    return int(verl.get("n_gpus_per_node") or config.cluster.trainer_gpu_num_per_node or world_size)


# ------------------------------------------------------------------------------ sharding


def _shard_bounds(rows: int, parts: int, unit: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ``[start, end)`` ranges covering ``rows`` rows in whole ``unit``s,
    sizes differing by at most one unit."""
    units = rows // unit
    base, extra = divmod(units, parts)
    bounds, start = [], 0
    for part in range(parts):
        size = (base + (1 if part < extra else 0)) * unit
        bounds.append((start, start + size))
        start += size
    return bounds


def _check_split(rows: int, parts: int, unit: int) -> None:
    if rows % unit:
        raise ValueError(f"a batch of {rows} rows cannot be split into groups of {unit} rows")
    if rows // unit < parts:
        what = "rows" if unit == 1 else f"groups of {unit} rows"
        raise ValueError(
            f"a batch of {rows // unit} {what} cannot be spread over {parts} trainer ranks "
            f"(each rank needs at least one); allowed: a train batch of at least {parts * unit} "
            "rows, or fewer trainer ranks"
        )


def partition_rows(
    batch: Experiences, parts: int, unit: int = 1, balance: bool = False, equal: bool = True
) -> list[list[int]]:
    """Which rows of ``batch`` each of ``parts`` ranks takes.

    Contiguous shards (sizes differing by at most one ``unit``) by default; with ``balance``
    (``trainer.balance_batch``, rows not grouped), verl's Karmarkar-Karp partition by sequence
    length (``get_seqlen_balanced_partitions``), so each rank gets about the same number of
    tokens -- with ``equal`` (fixed micro-batch size: every rank must run as many micro-batches)
    also the same number of rows, when the rows divide evenly. Each rank's rows are ascending.
    """
    rows = batch.batch_size
    _check_split(rows, parts, unit)
    if balance and unit == 1 and parts > 1 and (not equal or rows % parts == 0):
        from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions

        lengths = batch.attention_mask.sum(dim=-1).tolist()
        found = get_seqlen_balanced_partitions(lengths, k_partitions=parts, equal_size=equal)
        return [sorted(int(i) for i in part) for part in found]
    return [list(range(a, b)) for a, b in _shard_bounds(rows, parts, unit)]


def _take(value: Any, rows: list[int]) -> Any:
    if isinstance(value, Tensor):
        return value[torch.as_tensor(rows, dtype=torch.long)]
    if isinstance(value, list):
        return [value[i] for i in rows]
    if isinstance(value, dict):
        return {k: _take(v, rows) for k, v in value.items()}
    return value  # prompt_length, response_length: the padded widths stay the batch's


def take_rows(batch: Experiences, rows: list[int]) -> Experiences:
    """The rows ``rows`` of ``batch`` (padded widths ``P``/``R`` unchanged, so ``[b, R]``
    results of the shards line up with the batch's ``[B, R]``)."""
    return Experiences(
        **{f.name: _take(getattr(batch, f.name), rows) for f in dataclasses.fields(batch)}
    )


def split_rows(batch: Experiences, parts: int, unit: int = 1) -> list[Experiences]:
    """``batch`` as ``parts`` contiguous row shards (see :func:`partition_rows`).

    Args:
        batch: a collated batch of ``B`` rows.
        parts: the number of shards (data-parallel ranks).
        unit: rows that must stay together (2 for DPO's ``[chosen_i, rejected_i]`` pairs).

    Raises:
        ValueError: ``B`` is not a multiple of ``unit``, or there are fewer units than
            ``parts`` (a rank would get no rows; every rank must take part in each step).
    """
    return [take_rows(batch, rows) for rows in partition_rows(batch, parts, unit)]


def _join(parts: Sequence[Tensor], partition: Sequence[list[int]]) -> Tensor:
    """Per-rank row results back into the batch's row order."""
    joined = torch.cat(list(parts))
    order = torch.as_tensor([i for rows in partition for i in rows], dtype=torch.long)
    out = torch.empty_like(joined)
    out[order] = joined
    return out


# ------------------------------------------------------------------------------ the actor


class TrainerWorker:
    """One trainer rank (a Ray actor): holds the engines of its rank by role."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.engines: dict[str, Any] = {}

    def address(self) -> tuple[str, int]:
        """This node's IP and a port free on it: rank 0's is the process group's master."""
        import ray

        from trinity.launcher.trainer.ranks import free_port

        return ray.util.get_node_ip_address(), free_port()

    def setup(
        self,
        master_addr: str,
        master_port: int,
        builders: Mapping[str, Callable[[], Any]],
        threads: Optional[int] = None,
    ) -> None:
        """Join the process group and build the engines (collective: all ranks at once)."""
        os.environ.update(
            RANK=str(self.rank),
            WORLD_SIZE=str(self.world_size),
            # one GPU per actor on CUDA (Ray sets CUDA_VISIBLE_DEVICES), so the local device
            # is always 0; unused on the CPU
            LOCAL_RANK="0",
            LOCAL_WORLD_SIZE="1",
            MASTER_ADDR=master_addr,
            MASTER_PORT=str(master_port),
        )
        if threads:
            torch.set_num_threads(threads)
        for role, build in builders.items():
            self.engines[role] = build()
        freeze_startup_heap()  # set up: later collections skip the imports' objects

    def call(self, role: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``engines[role].method(*args, **kwargs)``."""
        return getattr(self.engines[role], method)(*args, **kwargs)

    def call_rank0(self, role: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """Like :meth:`call` (collective), but only rank 0 returns the result (``None``
        elsewhere): for full state dicts, which every rank gathers."""
        result = self.call(role, method, *args, **kwargs)
        return result if self.rank == 0 else None


class TrainerWorkerGroup:
    """``world_size`` :class:`TrainerWorker` actors sharing one torch process group.

    Args:
        world_size: trainer ranks.
        builders: ``role -> zero-argument factory`` of that role's engine, run in every worker
            (cloudpickled: closures over settings and configs are fine).
        device: ``"cuda"`` reserves one GPU per worker; ``"cpu"`` reserves nothing (the
            trainer's ranks then share the machine's cores with the explorer).
        threads: torch intra-op threads per worker on the CPU (default: cores / world size).
        rank_options: ``rank -> Ray actor options`` overriding the device's defaults (the
            rank's placement-group bundle, :meth:`~trinity.launcher.placement.Placement.
            trainer_options`).
        gpus_per_rank: the GPU share each worker reserves (half in mode colocate, where a
            rollout engine holds the other half: :func:`trinity.launcher.colocate.ray_resources`).
    """

    def __init__(
        self,
        world_size: int,
        builders: Mapping[str, Callable[[], Any]],
        device: str,
        threads: Optional[int] = None,
        env_vars: Optional[Mapping[str, str]] = None,
        rank_options: Optional[Callable[[int], dict[str, Any]]] = None,
        gpus_per_rank: float = 1.0,
    ) -> None:
        import ray

        if world_size < 1:
            raise ValueError(f"world_size={world_size} is invalid; allowed: an integer >= 1")
        self.world_size = world_size
        self.device = device
        options: dict[str, Any] = (
            {"num_gpus": gpus_per_rank, "num_cpus": 0} if device == "cuda" else {"num_cpus": 0}
        )
        # no GCS record of every per-step call (see WorkflowRunner's options, runner.py)
        options["enable_task_events"] = False
        if env_vars:
            options["runtime_env"] = {"env_vars": dict(env_vars)}
        actor_cls = ray.remote(TrainerWorker)
        self.workers = [
            actor_cls.options(**{**options, **(rank_options(rank) if rank_options else {})}).remote(
                rank, world_size
            )
            for rank in range(world_size)
        ]
        if device == "cpu" and threads is None:
            threads = max(1, (os.cpu_count() or 1) // world_size)
        try:
            addr, port = ray.get(self.workers[0].address.remote(), timeout=_START_TIMEOUT_S)
            setups = [w.setup.remote(addr, port, dict(builders), threads) for w in self.workers]
            self._gather(setups, "setup")
        except BaseException:
            self.shutdown()
            raise
        logger.info(
            "Trainer: %d Ray worker rank(s) on %s with engines %s",
            world_size,
            device,
            ", ".join(builders),
        )

    def run(self, role: str, method: str, per_rank_args: Sequence[tuple], **kwargs: Any) -> list:
        """``method`` on every rank with that rank's positional arguments; the results."""
        import ray

        refs = [
            w.call.remote(role, method, *args, **kwargs)
            for w, args in zip(self.workers, per_rank_args, strict=True)
        ]
        return ray.get(self._gather(refs, f"{role}.{method}"))

    def run_all(self, role: str, method: str, *args: Any, **kwargs: Any) -> list:
        """``method`` on every rank with the same arguments; the results."""
        return self.run(role, method, [args] * self.world_size, **kwargs)

    def rank0_ref(self, role: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``method`` on every rank and return rank 0's result as a Ray object reference
        (after every rank has finished), e.g. a full state dict handed on to rollout engines
        without passing through the driver."""

        refs = [w.call_rank0.remote(role, method, *args, **kwargs) for w in self.workers]
        self._gather(refs, f"{role}.{method}")
        return refs[0]

    def _gather(self, refs: list, what: str) -> list:
        """Wait for every rank's ``refs``; returns them, all finished.

        A rank that fails (its error, or ``ActorDiedError`` for a rank whose process died) is
        raised as soon as it is known: the other ranks may be blocked in a collective with it,
        which only the process group's own timeout (gloo 30 min, NCCL 10 min) would end.
        While ranks are still running, a warning names them every :data:`WAIT_LOG_S` seconds;
        a rank alive but stuck outside a collective is ended by :func:`call_timeout_s`
        (``TimeoutError`` naming the call and the ranks).
        """
        import ray

        limit = call_timeout_s()
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        pending, began = list(refs), time.monotonic()
        next_log = began + WAIT_LOG_S
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=_POLL_S)
            for ref in done:
                ray.get(ref)  # a rank's error, at once
            waited = time.monotonic() - began
            if pending and waited >= limit:
                raise TimeoutError(
                    f"trainer call {what}: rank(s) {sorted(rank_of[r] for r in pending)} did not "
                    f"finish within {limit:.0f} s ({CALL_TIMEOUT_ENV} sets the limit)"
                )
            if pending and time.monotonic() >= next_log:
                logger.warning(
                    "trainer call %s: rank(s) %s still running after %.0f s",
                    what,
                    sorted(rank_of[r] for r in pending),
                    waited,
                )
                next_log += WAIT_LOG_S
        return refs

    def shutdown(self) -> None:
        import ray

        for worker in getattr(self, "workers", []):
            try:
                ray.kill(worker)
            except Exception:  # already gone
                pass
        self.workers = []


class RemoteEngine:
    """The driver's handle on the ``role`` engine of a :class:`TrainerWorkerGroup`.

    Implements what :class:`~trinity.launcher.trainer.trainer.Trainer` needs of a policy,
    reference or critic engine; batches are split over the ranks by rows (``row_unit`` rows
    stay together: 2 for DPO) and per-row results joined back in order.
    """

    def __init__(
        self,
        group: TrainerWorkerGroup,
        role: str,
        tokenizer: Any = None,
        row_unit: int = 1,
        balance: bool = False,
        equal_rows: bool = True,
    ) -> None:
        self.group = group
        self.role = role
        self.tokenizer = tokenizer
        self.row_unit = row_unit
        self.balance = balance
        self.equal_rows = equal_rows
        self.global_step = 0

    @property
    def dp_size(self) -> int:
        return self.group.world_size

    def _partition(self, batch: Experiences) -> list[list[int]]:
        return partition_rows(
            batch, self.dp_size, self.row_unit, balance=self.balance, equal=self.equal_rows
        )

    # ------------------------------------------------------------------ policy / reference
    def compute_logprobs(
        self,
        batch: Experiences,
        temperature: float = 1.0,
        return_entropy: bool = False,
        disable_adapter: bool = False,
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """Per-row log-probs from every rank; ``disable_adapter``: the LoRA policy's base (the
        reference of a LoRA run, :class:`~trinity.launcher.trainer.verl_lora.
        AdapterDisabledReference`)."""
        partition = self._partition(batch)
        results = self.group.run(
            self.role,
            "compute_logprobs",
            [(take_rows(batch, rows), temperature, return_entropy) for rows in partition],
            **({"disable_adapter": True} if disable_adapter else {}),
        )
        if return_entropy:
            return (
                _join([r[0] for r in results], partition),
                _join([r[1] for r in results], partition),
            )
        return _join(results, partition)

    def train_step(
        self,
        batch: Experiences,
        loss: Any,
        temperature: float = 1.0,
        extra: Optional[Mapping[str, Tensor]] = None,
    ) -> dict[str, float]:
        partition = self._partition(batch)
        args = [
            (
                take_rows(batch, rows),
                loss,
                temperature,
                None if extra is None else {k: _take(v, rows) for k, v in extra.items()},
            )
            for rows in partition
        ]
        results = self.group.run(self.role, "train_step", args)
        self.global_step += 1
        return results[0]

    # ------------------------------------------------------------------ critic
    def compute_values(self, batch: Experiences) -> Tensor:
        partition = self._partition(batch)
        args = [(take_rows(batch, rows),) for rows in partition]
        return _join(self.group.run(self.role, "compute_values", args), partition)

    def update(
        self, batch: Experiences, values: Tensor, returns: Optional[Tensor] = None
    ) -> dict[str, float]:
        partition = self._partition(batch)
        args = [
            (
                take_rows(batch, rows),
                _take(values, rows),
                None if returns is None else _take(returns, rows),
            )
            for rows in partition
        ]
        results = self.group.run(self.role, "update", args)
        self.global_step += 1
        return results[0]

    # ------------------------------------------------------------------ weights, checkpoints
    def state_dict(self) -> dict[str, Tensor]:
        import ray

        return ray.get(self.state_dict_ref())

    def state_dict_ref(self) -> Any:
        """Rank 0's full state dict as a Ray object reference (see
        :meth:`TrainerWorkerGroup.rank0_ref`): the synchronizer hands it to the rollout
        engines directly."""
        return self.group.rank0_ref(self.role, "state_dict")

    def adapter_state_dict_ref(self) -> Any:
        """Rank 0's LoRA adapter (PEFT format) as a Ray object reference, as
        :meth:`state_dict_ref` hands on the full weights."""
        return self.group.rank0_ref(self.role, "adapter_state_dict")

    def adapter_state_dict(self) -> dict[str, Tensor]:
        import ray

        return ray.get(self.adapter_state_dict_ref())

    def save_lora_adapter(self, directory: Any) -> Any:
        return self.group.run_all(self.role, "save_lora_adapter", str(directory))[0]

    def weight_sync_bytes(self, adapter_only: bool = False) -> int:
        return int(self.group.run_all(self.role, "weight_sync_bytes", adapter_only)[0])

    def weight_sync_address(self) -> tuple[str, int]:
        """Rank 0's node and a free port there (rank 0 hosts the weight-sync group)."""
        import ray

        return tuple(ray.get(self.group.workers[0].address.remote()))  # type: ignore[return-value]

    def gpu_placement(self) -> tuple[str, list[str]]:
        """Rank 0's node and GPU ids."""
        import ray

        node, gpus = ray.get(self.group.workers[0].call.remote(self.role, "gpu_placement"))
        return node, list(gpus)

    def broadcast_weights(self, spec: Any) -> int:
        """Rank 0 broadcasts the weights to the rollout engines (see
        :meth:`VerlTrainEngine.broadcast_weights`); every rank gathers."""
        return int(self.group.run_all(self.role, "broadcast_weights", spec)[0])

    def save_hf(self, directory: Any, dtype: Optional[torch.dtype] = None) -> Any:
        return self.group.run_all(self.role, "save_hf", str(directory), dtype)[0]

    def save_checkpoint(self, directory: Any, step: Optional[int] = None) -> Any:
        return self.group.run_all(self.role, "save_checkpoint", str(directory), step)[0]

    def load_checkpoint(self, directory: Any) -> int:
        steps = self.group.run_all(self.role, "load_checkpoint", str(directory))
        self.global_step = int(steps[0])
        return self.global_step

    def close(self) -> None:
        """Stop the workers (every role's: they share them)."""
        self.group.shutdown()
