"""``mode: colocate``: the rollout engine and the trainer share one GPU (or one CPU box).

Mode ``both`` gives the explorer's engines and the trainer devices of their own. On one GPU
there is no such split, so mode ``colocate`` (Trinity-RFT's name; verl's hybrid engine and
TRL's ``vllm_mode="colocate"`` do the same) has them take turns on the same device(s). Each
step:

1. **generate** -- the explorer runs the step's tasks on the awake engines (model version
   ``N``, the trainer's latest);
2. **sleep** -- the engines release their device memory (:meth:`BaseRolloutEngine.sleep
   <trinity.launcher.engines.base.BaseRolloutEngine.sleep>`: vLLM's sleep mode level 1 on CUDA
   frees the KV cache and offloads the weights; the ``transformers`` engine moves its model to
   host memory; vLLM's CPU backend has no sleep mode, so there it is recorded and frees nothing);
3. **train** -- the trainer's step ``N + 1`` on the freed device;
4. **sync** -- the new weights go to the engines in memory (Ray's object store);
5. **wake** -- the engines take their memory back and serve version ``N + 1``.

Nothing generates between 2 and 5 (the turn holds the explorer's generation lock, and an
asleep engine refuses generation), so every generation uses the trainer's latest weights: the
schedule is mode ``both``'s with ``sync_offset: 0`` and cannot be anything else (the config
refuses ``sync_offset > 0`` and the dynamic sync styles). Everything else -- the explorer's
step, the trainer's step, metrics, checkpoints and resume, engine restarts -- *is* mode
``both``'s (the run layer's coordinator runs this mode, with a :class:`Colocation`
taking the turns through :class:`~trinity.launcher.run.policies.TakingTurns`), so a colocate run killed mid-way resumes as mode ``both`` does.

Engines log their calls (``generate``/``score``/``sleep``/``update_weights``/``wake_up`` with
the model version); each step's record gets them, in order and with the train step between,
as ``colocate/calls`` (e.g. ``"generate@0 x16, sleep@0, train@1, update_weights@1,
wake_up@1"``), and ``colocate/stale_generations`` counts generations at another version than
the last synchronised one (always 0 unless something is wrong; it is also logged as an error).

Ray resources (:func:`ray_resources`): each engine actor asks for ``GPU_SHARE`` of a GPU and
each trainer rank that runs as a Ray worker for the rest, so one GPU suffices; on a CPU
machine engines and ranks ask for no CPU (the driver holds the one-rank trainer), so a 2-core
box does not wait for a second bundle.

This module imports nothing else of the launcher: the engines and the trainer call
:func:`colocated_engine` / :func:`trainer_rank_gpus` when the mode is ``colocate``, and
:class:`Colocation` works on the explorer's :class:`~trinity.launcher.engines.supervisor.EngineSupervisor`
by duck typing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any, Optional

from trinity.common.config.modes import run_mode_spec
from trinity.utils.log import get_logger

__all__ = [
    "GPU_SHARE",
    "SLEEP_LEVEL",
    "Colocation",
    "colocated_engine",
    "format_calls",
    "ray_resources",
    "trainer_rank_gpus",
]

logger = get_logger(__name__)

#: the fraction of a GPU each engine actor (per tensor-parallel rank) and each trainer Ray
#: rank reserves in mode colocate: two halves make one GPU, so neither waits for the other
GPU_SHARE = 0.5
#: vLLM sleep level between generations: 1 keeps the weights in host memory (level 2 would
#: drop them, and a restarted engine could not be put back to sleep with them)
SLEEP_LEVEL = 1
#: the record of a step's engine calls (``colocate/calls``) and its staleness count
CALLS_KEY = "colocate/calls"
STALE_KEY = "colocate/stale_generations"
#: engine calls that use the weights (the ones that must be at the synchronised version)
_GENERATING = ("generate", "score")


def colocated_engine(settings: Any) -> Any:
    """``settings`` (an :class:`~trinity.launcher.engines.base.EngineSettings`) for mode
    colocate: vLLM's sleep mode on, half a GPU per tensor-parallel rank."""
    return dataclasses.replace(settings, enable_sleep_mode=True, gpu_share=GPU_SHARE)


def trainer_rank_gpus(config: Any) -> float:
    """GPUs each trainer rank that runs as a Ray worker asks for (1, half in colocate)."""
    return GPU_SHARE if run_mode_spec(config.mode).colocated else 1.0


def ray_resources(config: Any, gpus: Optional[bool] = None) -> dict[str, dict[str, float]]:
    """The Ray resources mode colocate requests, per actor kind.

    ``{"rollout_engine": {...}, "trainer_rank": {...}, "total": {...}}``: ``num_cpus`` and
    ``num_gpus`` of one engine actor and of one trainer rank run as a Ray worker (a one-rank
    trainer runs in the driver and asks Ray for nothing), and what the whole run asks for. With
    ``gpus`` (default: ``cluster.gpu_per_node > 0``) one engine and one rank fit on one GPU; on
    CPU nothing asks for a CPU, so the run needs no second bundle on a 2-core machine.
    """
    if gpus is None:
        gpus = bool(config.cluster.gpu_per_node)
    rollout = config.explorer.rollout_model
    tp = max(1, int(rollout.tensor_parallel_size or 1))
    engine = {"num_cpus": 0.0, "num_gpus": GPU_SHARE * tp if gpus else 0.0}
    rank = {"num_cpus": 0.0, "num_gpus": GPU_SHARE if gpus else 0.0}
    ranks = int(config.cluster.trainer_gpu_num or 1) if gpus else 1
    worker_ranks = ranks if ranks > 1 else 0  # one rank: the driver
    total_gpus = engine["num_gpus"] * rollout.engine_num + rank["num_gpus"] * worker_ranks
    return {
        "rollout_engine": engine,
        "trainer_rank": rank,
        "total": {"num_cpus": 0.0, "num_gpus": total_gpus},
    }


def format_calls(calls: list[tuple[str, int]]) -> list[str]:
    """``[("generate", 0)] * 3 + [("sleep", 0)]`` -> ``["generate@0 x3", "sleep@0"]``."""
    out: list[str] = []
    last: Optional[tuple[str, int]] = None
    count = 0
    for call in [*calls, None]:
        if call is not None and tuple(call) == last:
            count += 1
            continue
        if last is not None:
            out.append(f"{last[0]}@{last[1]}" + (f" x{count}" if count > 1 else ""))
        last, count = (tuple(call), 1) if call is not None else (None, 0)  # type: ignore[assignment]
    return out


class Colocation:
    """Takes the turns of mode colocate around each train step of mode ``both``'s loop.

    Args:
        supervisor: the explorer's engine supervisor (sleeps, wakes and reads the call logs
            of every rollout engine, replacing one that died -- the replacement gets the
            latest weights and the current sleep state).
        version: the model version the engines serve at the start (the trainer's step).
    """

    def __init__(self, supervisor: Any, version: int = 0) -> None:
        self.supervisor = supervisor
        self.version = int(version)
        #: every event of the run, in order: ``(event, step or version)``; for tests and logs
        self.events: list[tuple[str, int]] = []

    @contextlib.asynccontextmanager
    async def turn(self, generation: Any, step: int) -> AsyncIterator[dict[str, Any]]:
        """The trainer's turn for train step ``step``: holds ``generation`` (the explorer's
        generation lock: no step or evaluation is generating), puts the engines to sleep,
        yields the dict that gets the turn's metrics, and wakes the engines when the train
        step and its weight push are done (also when they failed)."""
        metrics: dict[str, Any] = {}
        served = self.version  # what every generation since the last turn must have used
        async with generation:
            began = time.perf_counter()
            await self.supervisor.sleep(SLEEP_LEVEL)
            before = await self.supervisor.take_call_logs()
            self.events.append(("sleep", self.version))
            metrics["time/colocate_sleep"] = time.perf_counter() - began
            try:
                yield metrics
            finally:
                self.events.append(("train", step))
                began = time.perf_counter()
                await self.supervisor.wake_up()
                metrics["time/colocate_wake"] = time.perf_counter() - began
                self.events.append(("wake_up", step))
                after = await self.supervisor.take_call_logs()
                metrics.update(self._report(before, after, step, served))

    def synced(self, version: int) -> None:
        """The engines now hold ``version`` (the trainer pushed it during the turn)."""
        self.events.append(("sync", int(version)))
        self.version = int(version)

    def _report(
        self,
        before: list[list[tuple[str, int]]],
        after: list[list[tuple[str, int]]],
        step: int,
        served: int,
    ) -> dict[str, Any]:
        calls: list[str] = []
        stale = 0
        many = len(before) > 1
        for i, (pre, post) in enumerate(zip(before, after, strict=True)):
            prefix = f"engine {i}: " if many else ""
            calls += [prefix + c for c in format_calls(pre)]
            calls.append(prefix + f"train@{step}")
            calls += [prefix + c for c in format_calls(post)]
            # every generation since the last turn: at the version synchronised in that turn
            # (a replacement engine loaded it before serving, see EngineSupervisor.restart)
            stale += sum(1 for name, v in pre if name in _GENERATING and v != served)
        if stale:
            logger.error(
                "mode colocate: %d generation(s) before train step %d used other weights than "
                "the last synchronised ones (calls: %s)",
                stale,
                step,
                calls,
            )
        # one string: metrics.jsonl keeps scalars and strings
        return {CALLS_KEY: ", ".join(calls), STALE_KEY: float(stale)}
