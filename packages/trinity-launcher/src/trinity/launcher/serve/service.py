"""Mode ``serve``'s state: the engines it forwards to, the versions they serve, what was
recorded and committed (the HTTP side is :mod:`.app`).

The service picks up a trainer's new weights from the job's checkpoint directory: a trainer
(mode ``train`` reading the buffer this service writes, ``trainer.save_hf_checkpoint: always``)
marks each complete checkpoint in ``latest_checkpointed_iteration.txt``; every
``explorer.service_status_check_interval`` seconds the service reads it and loads a newer
step's ``actor/huggingface`` into every engine (in place: requests in flight finish on the new
weights), then serves that step as the model version.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

from trinity.common.experience import Experience
from trinity.launcher.serve.recorder import SessionRecorder

logger = logging.getLogger(__name__)

LATEST_FILE = "latest_checkpointed_iteration.txt"


def latest_trained_step(job_dir: str) -> Optional[int]:
    """The last complete checkpoint's step in ``job_dir`` that holds Hugging Face weights
    (``global_step_N/actor/huggingface``), or ``None``."""
    try:
        step = int(Path(job_dir, LATEST_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    weights = Path(job_dir, f"global_step_{step}", "actor", "huggingface")
    return step if (weights / "config.json").is_file() else None


class ServeService:
    """Engines, versions, recorder and commits of one ``serve`` run.

    Args:
        engines: rollout engine handles (Ray actors with ``get_api_address``,
            ``update_weights``); the list may be replaced in place by a supervisor.
        commit: writes experiences to the run's buffer; returns its metrics (awaitable).
        job_dir: where the trainer's checkpoints appear (``checkpoint_job_dir``).
        commit_every: commit automatically once this many rewarded experiences wait (``None``:
            only on ``/commit``).
        log_metrics: ``(metrics, step)`` sink for each commit's record.
    """

    def __init__(
        self,
        engines: list[Any],
        commit: Callable[[list[Experience]], Any],
        *,
        job_dir: str,
        commit_every: Optional[int] = None,
        log_metrics: Optional[Callable[[dict[str, float], int], None]] = None,
        recorder: Optional[SessionRecorder] = None,
    ) -> None:
        self.engines = engines
        self._commit = commit
        self.job_dir = job_dir
        self.commit_every = commit_every
        self.log_metrics = log_metrics
        self.recorder = recorder or SessionRecorder()
        self.model_version = 0
        self.commits = 0  # commit steps logged
        self.committed = 0  # experiences written to the buffer
        self.requests = 0
        self.failed_requests = 0
        self.weight_loads = 0
        self._addresses: dict[int, tuple[Any, str]] = {}  # engine index -> (handle, address)
        self._turn = itertools.count()
        self._commit_lock = asyncio.Lock()
        self._version_lock = asyncio.Lock()

    # ------------------------------------------------------------------ engines
    async def allocate(self) -> tuple[str, int]:
        """``(OpenAI base address, model version)`` of the next engine, round robin."""
        index = next(self._turn) % len(self.engines)
        handle = self.engines[index]
        known = self._addresses.get(index)
        if known is not None and known[0] is handle:
            return known[1], self.model_version
        # first use, or a supervisor replaced the engine (a new actor, a new port)
        address = await handle.get_api_address.remote()
        if not address:
            raise RuntimeError(f"rollout engine {index} serves no OpenAI API")
        self._addresses[index] = (handle, address)
        return address, self.model_version

    def reset_addresses(self) -> None:
        """Forget the engines' addresses (the rotation changed)."""
        self._addresses.clear()

    async def load_new_weights(self) -> Optional[int]:
        """Load the trainer's newest checkpoint into every engine when it is newer than what
        they serve; returns the new version (``None``: nothing newer)."""
        async with self._version_lock:
            step = latest_trained_step(self.job_dir)
            if step is None or step <= self.model_version:
                return None
            path = os.path.join(self.job_dir, f"global_step_{step}", "actor", "huggingface")
            began = time.perf_counter()
            await asyncio.gather(
                *(h.update_weights.remote(path=path, version=step) for h in self.engines)
            )
            self.model_version = step
            self.weight_loads += 1
            logger.info(
                "serve: now serving model version %d (%s, loaded in %.1f s)",
                step,
                path,
                time.perf_counter() - began,
            )
            return step

    async def watch_weights(
        self, interval: float, heartbeat: Optional[Callable[[], None]] = None
    ) -> None:
        """Poll for new trainer checkpoints every ``interval`` seconds until cancelled (and
        call ``heartbeat``: the buffer's live-writer mark); a load that fails is logged and
        tried again at the next poll."""
        while True:
            try:
                if heartbeat is not None:
                    await asyncio.to_thread(heartbeat)
                await self.load_new_weights()
            except asyncio.CancelledError:
                raise
            except Exception:  # an engine mid-restart, a checkpoint being replaced: next poll
                logger.exception("serve: loading the trainer's new weights failed")
            await asyncio.sleep(interval)

    # ------------------------------------------------------------------ experiences
    def record(self, msg_id: str, experiences: list[Experience]) -> None:
        self.recorder.record(msg_id, experiences)

    async def feedback(
        self, msg_ids: list[str], reward: float, task_id: Optional[str], run_id: int
    ) -> dict[str, Any]:
        result = self.recorder.feedback(msg_ids, reward, task_id, run_id)
        committed = None
        if self.commit_every is not None and self.recorder.ready >= self.commit_every:
            committed = await self.commit()
        return {
            "status": "success",
            "rewarded": result.rewarded,
            "unknown": result.unknown,
            **({"committed": committed["committed"]} if committed else {}),
        }

    async def commit(self) -> dict[str, Any]:
        """Write every rewarded experience to the buffer (one logged step); a failed write
        keeps them for the next commit."""
        async with self._commit_lock:
            exps = self.recorder.take_ready()
            if not exps:
                return {"status": "success", "committed": 0, "step": self.commits}
            try:
                metrics = await self._commit(exps)
            except BaseException:
                self.recorder.give_back(exps)
                raise
            self.commits += 1
            self.committed += len(exps)
            record = {k: float(v) for k, v in (metrics or {}).items() if _number(v)}
            record.update(self.metrics())
            rewards = [e.reward for e in exps if e.reward is not None]
            if rewards:
                record["serve/committed_reward/mean"] = sum(rewards) / len(rewards)
            if self.log_metrics is not None:
                self.log_metrics(record, self.commits)
            return {"status": "success", "committed": len(exps), "step": self.commits}

    def metrics(self) -> dict[str, float]:
        """The service's counters (``/metrics`` and each commit's record)."""
        return {
            "serve/model_version": float(self.model_version),
            "serve/requests": float(self.requests),
            "serve/failed_requests": float(self.failed_requests),
            "serve/recorded_experiences": float(self.recorder.recorded),
            "serve/waiting_experiences": float(self.recorder.waiting),
            "serve/ready_experiences": float(self.recorder.ready),
            "serve/committed_experiences": float(self.committed),
            "serve/dropped_experiences": float(self.recorder.dropped),
            "serve/weight_loads": float(self.weight_loads),
            "serve/engines": float(len(self.engines)),
        }

    def shutdown_report(self) -> str:
        """What stays uncommitted when the service stops (logged at shutdown)."""
        waiting, ready = self.recorder.waiting, self.recorder.ready
        return (
            f"serve stopped: {self.committed} experiences committed in {self.commits} commits; "
            f"not committed: {ready} rewarded (no /commit after their feedback), {waiting} "
            f"without feedback"
        )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
