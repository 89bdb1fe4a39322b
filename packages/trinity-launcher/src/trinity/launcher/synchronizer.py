"""The synchroniser of runs that explore and train: the trainer's weights into every rollout
engine as model version ``N``, by memory, checkpoint or a collective broadcast. One concern:
*how* weights move; *when* is the run's sync policy (:mod:`trinity.launcher.run.policies`)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Optional

from trinity.common.config import SynchronizerConfig
from trinity.utils.log import get_logger

logger = get_logger(__name__)


class Synchronizer:
    """Moves the trainer's weights into every rollout engine as model version ``N``.

    ``memory``: the full state dict through Ray's object store (from the trainer's rank-0
    worker straight to the engines when the trainer has Ray workers); ``checkpoint``: HF
    weights written by the trainer, read by the engines; ``nccl``: a broadcast over a
    collective group of the trainer's rank 0 and the engines (:mod:`trinity.launcher.weight_sync`;
    NCCL on CUDA, gloo where ``backend`` says so -- the tests).

    With ``adapter_only`` (a LoRA run whose engines serve base + adapter) ``memory`` and
    ``checkpoint`` move the adapter alone, in PEFT's format (:mod:`trinity.launcher.
    lora_adapter`; ``checkpoint`` writes it to ``global_step_N/actor/lora_adapter``); ``nccl``
    broadcasts the merged weights, which the engines then serve without an adapter.

    Args:
        settings: the config's ``synchronizer`` section (``sync_method``, ``sync_timeout``).
        explorer: where the weights go: its ``rollout_engines``, ``supervisor`` (records each
            version, so a replaced engine loads it too) and ``load_weights``.
        engine: the trainer's policy engine (state dict, HF export, broadcast address).
        job_dir: the run directory (``checkpoint``: weights go to ``global_step_N/actor/huggingface``).
        backend: the broadcast's collective backend (default: NCCL where CUDA is, else gloo).
        adapter_only: send the LoRA adapter instead of the full (merged) weights (``memory``
            and ``checkpoint``; the trainer's engine must train an adapter).
    """

    def __init__(
        self,
        settings: SynchronizerConfig,
        explorer: Any,
        engine: Any,
        *,
        job_dir: str = "",
        backend: Optional[str] = None,
        adapter_only: bool = False,
    ) -> None:
        self.explorer = explorer
        self.engine = engine
        self.job_dir = job_dir
        self.method = settings.sync_method
        self.timeout = float(settings.sync_timeout)
        if backend is None:
            import torch

            backend = "nccl" if torch.cuda.is_available() else "gloo"
        self.backend = backend
        self._group: Any = None
        #: seconds the last push spent exporting the trainer's weights (state dict into Ray's
        #: object store, HF files, or the broadcast's send); the rest of ``push`` is loading
        self.last_export_s = 0.0
        #: a LoRA run's engines serve base + adapter: memory/checkpoint send the adapter alone
        #: (decided once: a switch from nccl to memory keeps sending merged weights, which is
        #: what those engines hold)
        self.adapter_only = bool(adapter_only) and self.method in ("memory", "checkpoint")
        self._bytes: Optional[int] = None

    def weight_bytes(self) -> int:
        """Bytes one push moves (the adapter's tensors, or the full model's): the
        ``sync/weight_bytes`` metric. Read from the trainer's parameter shapes once."""
        if self._bytes is None:
            self._bytes = int(self.engine.weight_sync_bytes(self.adapter_only))
        return self._bytes

    async def push(self, version: int) -> float:
        """Synchronise version ``version``; returns the seconds it took."""
        start = time.perf_counter()
        handles = list(self.explorer.rollout_engines or [])
        supervisor = getattr(self.explorer, "supervisor", None)
        if self.method == "nccl" and supervisor is not None and supervisor.total_restarts:
            # a replaced engine is not a member of the collective group: memory from now on
            logger.warning(
                "synchronizer.sync_method 'nccl': a rollout engine was restarted and is not in "
                "the weight broadcast group; weights go through Ray's object store from now on"
            )
            self.method = "memory"
        if self.method == "checkpoint":
            actor = os.path.join(self.job_dir, f"global_step_{version}", "actor")
            if self.adapter_only:
                from trinity.launcher.lora_adapter import ADAPTER_DIR

                path = os.path.join(actor, ADAPTER_DIR)
                await asyncio.to_thread(self.engine.save_lora_adapter, path)
            else:
                path = os.path.join(actor, "huggingface")
                await asyncio.to_thread(self.engine.save_hf, path)
            self.last_export_s = time.perf_counter() - start
            await asyncio.wait_for(self.explorer.load_weights(path, version), self.timeout)
        elif self.method == "nccl" and not await self._nccl_possible(handles):
            self.method = "memory"
            return await self.push(version)
        elif self.method == "nccl":
            from trinity.launcher.weight_sync import WeightGroupSpec, broadcast_to_engines

            if self._group is None:
                host, port = await asyncio.to_thread(self.engine.weight_sync_address)
                self._group = WeightGroupSpec(
                    host, port, 1 + len(handles), self.backend, timeout_s=self.timeout
                )
                logger.info(
                    "Weight sync: %s group of the trainer and %d rollout engine(s) at %s:%d",
                    self.backend,
                    len(handles),
                    host,
                    port,
                )
            await broadcast_to_engines(self.engine, handles, self._group, version, self.timeout)
            if supervisor is not None:  # a replaced engine gets the weights as a state dict
                supervisor.record(version, provider=self._state_ref)
        else:
            state = await self._state_ref()
            self.last_export_s = time.perf_counter() - start
            if supervisor is not None:  # records the ref: a replaced engine loads it too
                await asyncio.wait_for(
                    self.explorer.load_weights(None, version, state_dict=state), self.timeout
                )
            else:
                await asyncio.wait_for(
                    asyncio.gather(
                        *(
                            h.update_weights.remote(state_dict=state, version=version)
                            for h in handles
                        )
                    ),
                    timeout=self.timeout,
                )
        return time.perf_counter() - start

    async def _state_ref(self) -> Any:
        """The trainer's state dict (or, ``adapter_only``, its adapter) in Ray's object store."""
        import ray

        name = "adapter_state_dict" if self.adapter_only else "state_dict"
        if hasattr(self.engine, f"{name}_ref"):  # trainer ranks are Ray workers
            return await asyncio.to_thread(getattr(self.engine, f"{name}_ref"))
        return ray.put(await asyncio.to_thread(getattr(self.engine, name)))

    async def _nccl_possible(self, handles: list[Any]) -> bool:
        """NCCL needs the trainer's rank 0 and every engine on different GPUs; where one shares
        a GPU (one GPU for everything), fall back to ``memory`` with a warning."""
        if self.backend != "nccl" or self._group is not None:
            return True
        from trinity.launcher.weight_sync import shared_gpus

        trainer = await asyncio.to_thread(self.engine.gpu_placement)
        engines = await asyncio.gather(*(h.gpu_placement.remote() for h in handles))
        shared = shared_gpus(trainer, list(engines))
        if shared:
            logger.warning(
                "synchronizer.sync_method 'nccl': rollout engine(s) %s share GPU %s with the "
                "trainer, and NCCL cannot connect two ranks on one GPU; weights go through "
                "Ray's object store ('memory') instead",
                shared,
                ", ".join(trainer[1]),
            )
            return False
        return True
