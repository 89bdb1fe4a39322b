"""The training loop above the engine: sample, collate, score, step, checkpoint, resume.

:class:`Trainer` is engine-agnostic (it talks to :class:`TrainEngine`, which
:class:`~trinity.launcher.trainer.verl_engine.VerlTrainEngine` implements) and holds no math:
losses, KL and advantages come from trinity-algorithms (resolved from the config exactly as
the launcher resolves them), batches from core's ``collate_experiences``.

Its part of a step checkpoint (verl's layout, written and read by the run's one
checkpointer, :class:`trinity.launcher.checkpoint.RunCheckpointer`)::

    <checkpoint_job_dir>/global_step_N/actor/        engine shards + huggingface/ (config)
    <checkpoint_job_dir>/global_step_N/critic/       the value model's shards (PPO only)
    <checkpoint_job_dir>/global_step_N/trainer_state.json   :meth:`Trainer.state_dict`
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from pathlib import Path
from typing import Any, Optional, Protocol

import torch

from trinity.common.config import Config
from trinity.common.experience import Experience, Experiences, collate_experiences
from trinity.launcher.checkpoint import (  # noqa: F401 - the names this module had
    LATEST_FILE,
    CheckpointSettings,
    RunCheckpointer,
    latest_checkpoint,
)
from trinity.utils.log import get_logger

logger = get_logger(__name__)


class TrainEngine(Protocol):
    """What the loop needs of a training engine (shapes: ``[B, R]`` over response tokens)."""

    global_step: int

    def compute_logprobs(self, batch: Experiences, temperature: float = 1.0) -> torch.Tensor: ...

    def train_step(
        self,
        batch: Experiences,
        loss: Any,
        temperature: float = 1.0,
        extra: Optional[dict[str, torch.Tensor]] = None,
    ) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, torch.Tensor]: ...

    def save_checkpoint(self, directory: str, step: Optional[int] = None) -> Path: ...

    def load_checkpoint(self, directory: str) -> int: ...

    def save_hf(self, directory: str, dtype: Optional[torch.dtype] = None) -> Path: ...


class CriticEngine(Protocol):
    """What the loop needs of a critic (PPO's value model; shapes ``[B, R]``)."""

    global_step: int

    def compute_values(self, batch: Experiences) -> torch.Tensor: ...

    def update(
        self, batch: Experiences, values: torch.Tensor, returns: Optional[torch.Tensor] = None
    ) -> dict[str, float]: ...

    def save_checkpoint(self, directory: str, step: Optional[int] = None) -> Path: ...

    def load_checkpoint(self, directory: str) -> int: ...


class Trainer:
    """Trains ``engine`` on batches the config's sample strategy draws from ``readers``.

    Args:
        config: a checked config (``check_and_update`` done; algorithm defaults applied).
        engine: the policy's training engine.
        readers: the trainer's readers by buffer name (see
            :func:`~trinity.launcher.trainer.data.build_trainer_readers`).
        ref_engine: an engine holding the reference policy, when the loss needs
            ``ref_logprob`` (a KL loss); built by :func:`build_trainer` from the same model.
        pad_token_id: for collation.
        critic: the value model, required when the algorithm type uses a critic (PPO); built
            by :func:`build_trainer` from ``model.critic_model_path``. Each step it scores the
            batch (values), the advantage function turns values and rewards into advantages
            and returns (GAE), the critic takes a step on the value loss, then the actor
            (after ``trainer.critic_warmup`` critic-only steps). Its checkpoint is
            ``global_step_N/critic``.
    """

    def __init__(
        self,
        config: Config,
        engine: TrainEngine,
        readers: dict[str, Any],
        ref_engine: Optional[TrainEngine] = None,
        pad_token_id: int = 0,
        critic: Optional[CriticEngine] = None,
    ) -> None:
        from trinity.algorithm.resolve import resolve_algorithm
        from trinity.algorithm.sample_strategy import build_sample_strategy
        from trinity.launcher.trainer.verl_engine import TrinityLoss

        self.config = config
        self.engine = engine
        self.ref_engine = ref_engine
        self.pad_token_id = pad_token_id
        self.algorithm = resolve_algorithm(config)
        #: ``algorithm.rollout_correction`` (None: off, and nothing below costs anything)
        self.rollout_correction = config.algorithm.rollout_correction
        self.loss = TrinityLoss.from_algorithm(
            self.algorithm, rollout_correction=self.rollout_correction
        )
        self.rollout_correction = self.loss.rollout_correction  # checked (a mapping is parsed)
        if "ref_logprob" in self.loss.required_fields() and ref_engine is None:
            raise ValueError(
                f"algorithm {self.algorithm.algorithm_type!r} uses a KL loss "
                f"({self.algorithm.kl_loss_fn}), which needs a reference model; none was given"
            )
        self.algorithm_class = self.algorithm.algorithm
        self.critic = critic
        self.use_critic = bool(getattr(self.algorithm_class, "use_critic", False))
        if self.use_critic and critic is None:
            raise ValueError(
                f"algorithm {self.algorithm.algorithm_type!r} trains a critic (value model); "
                "none was given (build_trainer builds one from model.critic_model_path)"
            )
        self.kl_penalty_fn = _build_kl_penalty(self.algorithm)
        if self.kl_penalty_fn is not None and ref_engine is None:
            raise ValueError(
                f"algorithm.kl_penalty_fn {self.algorithm.kl_penalty_fn!r} penalises rewards by "
                "the KL to a reference model; none was given"
            )
        self.advantage_fn = None
        if getattr(self.algorithm_class, "compute_advantage_in_trainer", False):
            from trinity.algorithm.advantage_fn import ADVANTAGE_FN
            from trinity.algorithm.utils import build_component

            self.advantage_fn = build_component(
                ADVANTAGE_FN[self.algorithm.advantage_fn],
                self.algorithm.args("advantage_fn"),
            )
        self.readers = readers
        self.sample_strategy = build_sample_strategy(
            self.algorithm.sample_strategy,
            readers,
            self.algorithm.args("sample_strategy"),
            buffer_config=config.buffer,
            train_batch_size=config.buffer.train_batch_size or None,
        )
        self.temperature = float(
            config.explorer.rollout_model.temperature
            if config.explorer.rollout_model.temperature is not None
            else config.model.temperature
        )
        self.job_dir = config.checkpoint_job_dir
        self.global_step = 0

    # ------------------------------------------------------------------ one step
    def sample(self) -> tuple[list[Experience], dict[str, float]]:
        """The next batch (raises the reader's end-of-data exception when it is exhausted).

        A strategy written for Trinity-RFT returns a third value (samples to log) and may not
        take ``current_model_version``; both shapes are accepted.
        """
        sample = self.sample_strategy.sample
        step = self.global_step + 1
        if "current_model_version" in inspect.signature(sample).parameters:
            result = asyncio.run(sample(step, current_model_version=self.global_step))
        else:
            result = asyncio.run(sample(step))
        return result[0], result[1]

    def train_step(self, exps: list[Experience]) -> dict[str, float]:
        """One optimizer step on ``exps``; returns the step's metrics.

        With a critic (PPO): values ``[B, R]`` of the batch, advantages and returns from the
        algorithm's advantage function (GAE), one critic step on the value loss, then the
        actor's step unless the run is still in ``trainer.critic_warmup``.
        """
        start = time.perf_counter()
        metrics: dict[str, float] = {}
        batch = collate_experiences(exps, pad_token_id=self.pad_token_id)
        metrics["time/train/collate"] = time.perf_counter() - start
        batch_stats = batch_metrics(exps, batch)  # before rollout correction rejects tokens
        values: Optional[torch.Tensor] = None
        if self.critic is not None:
            t = time.perf_counter()
            values = self.critic.compute_values(batch)
            metrics["time/values"] = time.perf_counter() - t
            metrics.update(_masked_summary(values, batch.action_mask, "critic/values"))
        extra: dict[str, torch.Tensor] = {}
        if self.kl_penalty_fn is not None:
            # token-level rewards = scores - kl_coef * KL(rollout policy || reference), before
            # the advantages (verl's apply_kl_penalty; adaptive coefficient updated in place)
            from trinity.algorithm.advantage_fn._trainer import batch_token_level_rewards

            t = time.perf_counter()
            extra["ref_logprob"] = self.ref_engine.compute_logprobs(batch, self.temperature)
            metrics["time/ref_logprob"] = time.perf_counter() - t
            rollout = batch.logprobs
            if rollout is None:
                rollout = self.engine.compute_logprobs(batch, self.temperature)
            rewards, kl_metrics = self.kl_penalty_fn.compute_kl_penalty(
                batch_token_level_rewards(batch), rollout, extra["ref_logprob"], batch.action_mask
            )
            batch.token_level_rewards = rewards
            metrics["actor/reward_kl_penalty"] = float(kl_metrics.get("kl", 0.0))
            metrics["actor/reward_kl_penalty_coeff"] = float(kl_metrics.get("kl_coef", 0.0))
        if self.rollout_correction is not None and not self.rollout_correction.bypass_mode:
            self._correct_rollout(batch, extra, metrics)  # before advantages, as verl
        if self.advantage_fn is not None:
            # trainer-side advantages (GAE, REINFORCE++, ReMax) work on the collated batch
            kwargs = {"values": values} if values is not None else {}
            batch, adv_metrics = self.advantage_fn(batch, **kwargs)
            metrics.update({f"advantage/{k}": float(v) for k, v in adv_metrics.items()})
        if self.critic is not None:
            t = time.perf_counter()
            metrics.update(self.critic.update(batch, values, batch.returns))
            metrics["time/update_critic"] = time.perf_counter() - t
        if self.use_critic and self.global_step < self.config.trainer.critic_warmup:
            self.global_step += 1  # critic warm-up: the actor waits
            metrics.update(batch_stats)
            metrics["time/train_step"] = time.perf_counter() - start
            return metrics
        if (
            self.ref_engine is not None
            and "ref_logprob" in self.loss.required_fields()
            and "ref_logprob" not in extra
        ):
            t = time.perf_counter()
            extra["ref_logprob"] = self.ref_engine.compute_logprobs(batch, self.temperature)
            metrics["time/ref_logprob"] = time.perf_counter() - t
        if self._recompute_old_logprob(batch, extra):
            t = time.perf_counter()
            extra["old_logprob"] = self.engine.compute_logprobs(batch, self.temperature)
            metrics["time/old_logprob"] = time.perf_counter() - t
        metrics.update(self.engine.train_step(batch, self.loss, self.temperature, extra))
        self.global_step += 1
        metrics.update(batch_stats)
        metrics["time/train_step"] = time.perf_counter() - start
        return metrics

    def _recompute_old_logprob(self, batch: Experiences, extra: dict[str, torch.Tensor]) -> bool:
        """Whether the loss's ``old_logprob`` must be recomputed now: it needs them, they are
        not in ``extra`` yet, and the rollout's are absent or not to be used
        (``bypass_old_logprobs: false``). With rollout correction its ``bypass_mode`` decides
        instead: decoupled mode recomputed them already, bypass mode uses the rollout's."""
        if "old_logprob" not in self.loss.required_fields() or "old_logprob" in extra:
            return False
        rc = self.rollout_correction
        if rc is not None and rc.bypass_mode:
            if batch.logprobs is None:
                raise ValueError(
                    "algorithm.rollout_correction.bypass_mode uses the rollout's log-probs as "
                    "the old ones, and this batch's experiences carry none (logprobs)"
                )
            return False
        return batch.logprobs is None or not self.config.algorithm.bypass_old_logprobs

    def _correct_rollout(
        self, batch: Experiences, extra: dict[str, torch.Tensor], metrics: dict[str, float]
    ) -> None:
        """Rollout correction in decoupled mode (verl's, before the advantages): recompute the
        old log-probs with the current weights, compare them with the rollout's, mask the
        rejected tokens out of ``batch.action_mask`` (advantages, critic and every loss term see
        the rejection), pass the IS weights to the policy loss, log ``rollout_corr/*``."""
        from trinity.algorithm.rollout_correction import compute_rollout_correction

        if batch.logprobs is None:
            raise ValueError(
                "algorithm.rollout_correction compares the rollout's log-probs with the "
                "trainer's, and this batch's experiences carry none (logprobs)"
            )
        t = time.perf_counter()
        extra["old_logprob"] = self.engine.compute_logprobs(batch, self.temperature)
        metrics["time/old_logprob"] = time.perf_counter() - t
        result = compute_rollout_correction(
            extra["old_logprob"],
            batch.logprobs.to(extra["old_logprob"]),
            batch.action_mask,
            self.rollout_correction,  # type: ignore[arg-type]
        )
        batch.action_mask = result.response_mask
        if result.is_weights is not None:
            extra["rollout_is_weights"] = result.is_weights
        metrics.update(result.metrics)

    def close(self) -> None:
        """Release the engines' processes (Ray trainer workers; nothing for in-process ones)."""
        for engine in (self.engine, self.ref_engine, self.critic):
            close = getattr(engine, "close", None)
            if close is not None:
                close()

    # ------------------------------------------------------------------ checkpoints
    def step_dir(self, step: int) -> str:
        return os.path.join(self.job_dir, f"global_step_{step}")

    def state_dict(self) -> dict[str, Any]:
        """The loop's own state (``trainer_state.json``): the step and the sample strategy's
        reader positions. The engines' shards are :meth:`save_checkpoint_files`'."""
        return {
            "global_step": self.global_step,
            "sample_strategy": self.sample_strategy.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sample_strategy.load_state_dict(state.get("sample_strategy") or {})
        self.global_step = int(state["global_step"])

    def save_checkpoint_files(self, directory: str) -> None:
        """The engines' part of step checkpoint ``directory``: the actor's (and critic's)
        shards, and Hugging Face weights per ``trainer.save_hf_checkpoint: always``."""
        step = self.global_step
        actor = os.path.join(directory, "actor")
        self.engine.save_checkpoint(actor, step=step)
        if self.critic is not None:
            self.critic.save_checkpoint(os.path.join(directory, "critic"), step=step)
        if self.config.trainer.save_hf_checkpoint == "always":
            self.engine.save_hf(os.path.join(actor, "huggingface"))

    def load_checkpoint(self, directory: str) -> None:
        """Load the engines' shards of step checkpoint ``directory``."""
        self.engine.load_checkpoint(os.path.join(directory, "actor"))
        if self.critic is not None:
            self.critic.load_checkpoint(os.path.join(directory, "critic"))

    def _checkpointer(self) -> RunCheckpointer:
        return RunCheckpointer(CheckpointSettings.from_config(self.config))

    def save_checkpoint(self) -> str:
        """A complete step checkpoint of this trainer alone (the run's checkpointer writes the
        files, the "latest" marker last); returns its directory."""
        return self._checkpointer().save(self)

    def resume(self) -> Optional[int]:
        """Continue from the last complete checkpoint of the run directory, if any."""
        if not self.job_dir:
            return None
        return self._checkpointer().restore_trainer(self)

    def save_final_hf(self) -> Optional[str]:
        """The last step's HF weights (``trainer.save_hf_checkpoint``: last / always)."""
        if self.config.trainer.save_hf_checkpoint == "never" or self.global_step == 0:
            return None
        target = os.path.join(self.step_dir(self.global_step), "actor", "huggingface")
        has_weights = os.path.isdir(target) and any(
            f.endswith(".safetensors") for f in os.listdir(target)
        )
        if not has_weights:
            self.engine.save_hf(target)
        return target


def uses_kl_penalty(algorithm: Any) -> bool:
    """Whether the trainer applies ``algorithm.kl_penalty_fn`` (and so needs a reference)."""
    name = algorithm.kl_penalty_fn
    return bool(name) and name != "none" and bool(algorithm.compute_advantage_in_trainer)


def _build_kl_penalty(algorithm: Any) -> Any:
    """The reward KL penalty (``algorithm.kl_penalty_fn``), or ``None`` where there is none.

    It shapes the token-level rewards the trainer's advantage function reads, so it applies
    only to algorithm types that compute advantages in the trainer (PPO, REINFORCE++, ReMax);
    for the others (GRPO: advantages in the explorer) it would change nothing, and a warning
    says so (use ``kl_loss_fn`` there).
    """
    name = algorithm.kl_penalty_fn
    if not name or name == "none":
        return None
    if not uses_kl_penalty(algorithm):
        logger.warning(
            "algorithm.kl_penalty_fn %r is ignored: it penalises rewards before the trainer "
            "computes advantages, and algorithm_type %r computes them in the explorer; use "
            "kl_loss_fn to keep the policy near the reference model",
            name,
            algorithm.algorithm_type,
        )
        return None
    return algorithm.build_kl_penalty_fn()


def batch_metrics(exps: list[Experience], batch: Experiences) -> dict[str, float]:
    """Reward and length statistics of a training batch."""
    out: dict[str, float] = {"batch/size": float(len(exps))}
    rewards = [float(e.reward) for e in exps if e.reward is not None]
    if rewards:
        mean = sum(rewards) / len(rewards)
        out["batch/reward/mean"] = mean
        out["batch/reward/std"] = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
    mask = batch.action_mask
    if mask is not None:
        lengths = mask.sum(dim=-1).float()
        out["batch/response_length/mean"] = float(lengths.mean())
        out["batch/response_length/max"] = float(lengths.max())
    return out


def _masked_summary(values: torch.Tensor, mask: torch.Tensor, prefix: str) -> dict[str, float]:
    """``<prefix>/mean|max|min`` of ``values [B, R]`` over ``mask`` (nothing if it is empty)."""
    selected = values[mask.to(torch.bool)]
    if selected.numel() == 0:
        return {}
    return {
        f"{prefix}/mean": float(selected.mean()),
        f"{prefix}/max": float(selected.max()),
        f"{prefix}/min": float(selected.min()),
    }
