"""CHORD's losses: ``sft_is``, ``sft_phi`` and ``mix_chord``.

CHORD (arXiv:2508.11408) trains on expert demonstrations and the policy's own rollouts at once,
as ``mix`` does, but (1) weighs each expert token by how compatible it is with the current
policy (``phi(p) = p * (1 - p)``, or ``p`` for the importance-sampling variant), so imitation
does not overwrite what RL has learnt, and (2) moves the global weight ``mu`` of the SFT part on
a schedule over training steps (warm-up, cosine decay, floor). The token weightings are also
registered as plain SFT losses.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from trinity.algorithm.args import (
    ClipRangeArgs,
    Field,
    LossAggMode,
    NonNegInt,
    PolicyLossArgs,
    PosInt,
    Probability,
)
from trinity.algorithm.policy_loss_fn.functional import (
    chord_mu,
    metrics_to_floats,
    sft_is_loss,
    sft_phi_loss,
)
from trinity.algorithm.policy_loss_fn.mix import MIXPolicyLossFn
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn
from trinity.algorithm.policy_loss_fn.sft import SFTLossFn

__all__ = ["MIXCHORDPolicyLossFn", "SFTISLossFn", "SFTPhiLossFn"]


@POLICY_LOSS_FN.register_module("sft_is")
class SFTISLossFn(PolicyLossFn):
    """SFT weighted by the token's probability; see
    :func:`~trinity.algorithm.policy_loss_fn.functional.sft_is_loss`.

    Args:
        loss_agg_mode: see :func:`trinity.algorithm.utils.aggregate_loss`.
    """

    class Args(PolicyLossArgs):
        """``policy_loss_fn_args`` of ``sft_is``: only the aggregation."""

    def __init__(self, backend: str = "verl", loss_agg_mode: str = "token-mean") -> None:
        super().__init__(backend=backend)
        self.loss_agg_mode = loss_agg_mode

    def __call__(  # type: ignore[override]
        self, logprob: Tensor, action_mask: Tensor, **kwargs: Any
    ) -> tuple[Tensor, dict[str, float]]:
        """``logprob``/``action_mask`` ``[batch, response_len]``; returns loss, float metrics."""
        loss, metrics = sft_is_loss(logprob, action_mask, loss_agg_mode=self.loss_agg_mode)
        return loss, metrics_to_floats(metrics)

    @classmethod
    def default_args(cls) -> dict:
        return {"loss_agg_mode": "token-mean"}


@POLICY_LOSS_FN.register_module("sft_phi")
class SFTPhiLossFn(PolicyLossFn):
    """SFT weighted by ``p * (1 - p)``; see
    :func:`~trinity.algorithm.policy_loss_fn.functional.sft_phi_loss`.

    Args:
        loss_agg_mode: see :func:`trinity.algorithm.utils.aggregate_loss`.
        cutoff_prob: in ``(0, 1]``; tokens more likely than it get no gradient (1: none cut).
    """

    class Args(PolicyLossArgs):
        """``policy_loss_fn_args`` of ``sft_phi``."""

        cutoff_prob: float = Field(
            1.0, gt=0.0, le=1.0, description="Tokens above this probability get no gradient."
        )

    def __init__(
        self, backend: str = "verl", loss_agg_mode: str = "token-mean", cutoff_prob: float = 1.0
    ) -> None:
        super().__init__(backend=backend)
        if not 0.0 < cutoff_prob <= 1.0:
            raise ValueError(f"cutoff_prob must be in (0, 1], got {cutoff_prob}")
        self.loss_agg_mode = loss_agg_mode
        self.cutoff_prob = float(cutoff_prob)

    def __call__(  # type: ignore[override]
        self, logprob: Tensor, action_mask: Tensor, **kwargs: Any
    ) -> tuple[Tensor, dict[str, float]]:
        """``logprob``/``action_mask`` ``[batch, response_len]``; returns loss, float metrics."""
        loss, metrics = sft_phi_loss(
            logprob, action_mask, loss_agg_mode=self.loss_agg_mode, cutoff_prob=self.cutoff_prob
        )
        return loss, metrics_to_floats(metrics)

    @classmethod
    def default_args(cls) -> dict:
        return {"loss_agg_mode": "token-mean", "cutoff_prob": 1.0}


@POLICY_LOSS_FN.register_module("mix_chord")
class MIXCHORDPolicyLossFn(MIXPolicyLossFn):
    """``(1 - mu(step)) * PPO(usual rows) + mu(step) * SFT_phi(expert rows)``.

    As :class:`~trinity.algorithm.policy_loss_fn.mix.MIXPolicyLossFn` (same rows, part
    weighting and metrics, plus ``mu``), with the SFT part ``sft_phi`` (``sft`` when
    ``enable_phi_function`` is off) and ``mu`` from
    :func:`~trinity.algorithm.policy_loss_fn.functional.chord_mu` at the batch's train step:
    the ``step`` field ``[batch]`` (the ``mix`` sample strategy adds it; every row holds the
    same step).

    Args:
        mu_warmup_steps / mu_decay_steps: lengths of the linear warm-up and cosine decay.
        mu_peak / mu_valley: ``mu`` at the end of the warm-up and after the decay.
        enable_phi_function: weigh expert tokens by ``p * (1 - p)`` (else plain SFT).
        clip_range / clip_range_low / clip_range_high / clip_ratio_c: the PPO part's.
        use_dynamic_bsz, ppo_mini_batch_size, ppo_micro_batch_size_per_gpu, ngpus_trainer,
        train_batch_size_usual, train_batch_size_expert: the parts' micro-batch weighting
            (see ``mix``; unset batch sizes mean "this batch is the whole mini-batch", where
            Trinity-RFT defaults them to 1).
        loss_agg_mode / sft_loss_agg_mode / grpo_loss_agg_mode: the parts' aggregation.
    """

    class Args(ClipRangeArgs):
        """``policy_loss_fn_args`` of ``mix_chord``."""

        mu_warmup_steps: NonNegInt = Field(0, description="Steps of mu's linear warm-up.")
        mu_decay_steps: NonNegInt = Field(0, description="Steps of mu's cosine decay.")
        mu_peak: Probability = Field(0.1, description="mu after the warm-up.")
        mu_valley: Probability = Field(0.1, description="mu after the decay.")
        enable_phi_function: bool = Field(True, description="SFT part weighted by p * (1 - p).")
        clip_ratio_c: Optional[float] = Field(
            3.0, gt=1.0, description="The PPO part's dual-clip bound (null: none)."
        )
        use_dynamic_bsz: Optional[bool] = Field(None, description="Micro-batch weighting mode.")
        ppo_mini_batch_size: PosInt = Field(1, description="Mini-batch size (weighting).")
        ppo_micro_batch_size_per_gpu: PosInt = Field(1, description="Micro-batch size.")
        ngpus_trainer: PosInt = Field(1, description="Trainer GPUs (weighting).")
        train_batch_size_usual: Optional[PosInt] = Field(None, description="Rollout rows.")
        train_batch_size_expert: Optional[PosInt] = Field(None, description="Expert rows.")
        sft_loss_agg_mode: Optional[LossAggMode] = Field(None, description="SFT part's mode.")
        grpo_loss_agg_mode: Optional[LossAggMode] = Field(None, description="PPO part's mode.")

    loss_name = "mix_chord"

    def __init__(
        self,
        backend: str = "verl",
        mu_warmup_steps: int = 0,
        mu_decay_steps: int = 0,
        mu_peak: float = 0.1,
        mu_valley: float = 0.1,
        enable_phi_function: bool = True,
        clip_range: Optional[float] = None,
        clip_range_low: Optional[float] = None,
        clip_range_high: Optional[float] = None,
        clip_ratio_c: Optional[float] = 3.0,
        use_dynamic_bsz: Optional[bool] = None,
        ppo_mini_batch_size: int = 1,
        ppo_micro_batch_size_per_gpu: int = 1,
        ngpus_trainer: int = 1,
        train_batch_size_usual: Optional[int] = None,
        train_batch_size_expert: Optional[int] = None,
        loss_agg_mode: str = "token-mean",
        sft_loss_agg_mode: Optional[str] = None,
        grpo_loss_agg_mode: Optional[str] = None,
    ) -> None:
        for name, value in (
            ("mu_warmup_steps", mu_warmup_steps),
            ("mu_decay_steps", mu_decay_steps),
        ):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        for name, value in (("mu_peak", mu_peak), ("mu_valley", mu_valley)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        super().__init__(
            backend=backend,
            mu=mu_valley,
            clip_range=clip_range,
            clip_range_low=clip_range_low,
            clip_range_high=clip_range_high,
            clip_ratio_c=clip_ratio_c,
            use_dynamic_bsz=use_dynamic_bsz,
            ppo_mini_batch_size=ppo_mini_batch_size,
            ppo_micro_batch_size_per_gpu=ppo_micro_batch_size_per_gpu,
            ngpus_trainer=ngpus_trainer,
            train_batch_size_usual=train_batch_size_usual,
            train_batch_size_expert=train_batch_size_expert,
            loss_agg_mode=loss_agg_mode,
            sft_loss_agg_mode=sft_loss_agg_mode,
            grpo_loss_agg_mode=grpo_loss_agg_mode,
        )
        self.mu_warmup_steps = int(mu_warmup_steps)
        self.mu_decay_steps = int(mu_decay_steps)
        self.mu_peak = float(mu_peak)
        self.mu_valley = float(mu_valley)
        self.enable_phi_function = enable_phi_function
        sft_mode = sft_loss_agg_mode or loss_agg_mode
        self.sft_loss_fn: PolicyLossFn = (
            SFTPhiLossFn(backend=backend, loss_agg_mode=sft_mode)
            if enable_phi_function
            else SFTLossFn(backend=backend, loss_agg_mode=sft_mode)
        )

    def mu_at(self, step: int) -> float:
        """The SFT part's weight at train step ``step``."""
        return chord_mu(
            step, self.mu_warmup_steps, self.mu_decay_steps, self.mu_peak, self.mu_valley
        )

    def _current_step(self, step: Optional[Tensor], rows: int) -> int:
        constant = self.mu_warmup_steps == 0 and self.mu_decay_steps == 0
        if step is None:
            if constant:
                return 0
            raise ValueError(
                "the mix_chord policy loss needs the batch field step [batch] (the train step, "
                "added by the 'mix' sample strategy) to schedule mu"
            )
        flat = torch.as_tensor(step).reshape(-1)
        if flat.shape[0] != rows:
            raise ValueError(f"step has {flat.shape[0]} rows but the batch has {rows}")
        if rows and bool((flat != flat[0]).any()):
            raise ValueError(
                f"every row of a mix_chord batch must hold the same step, got "
                f"{sorted(set(flat.tolist()))}"
            )
        return int(flat[0]) if rows else 0

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        old_logprob: Tensor,
        action_mask: Tensor,
        advantages: Tensor,
        expert_mask: Optional[Tensor] = None,
        step: Optional[Tensor] = None,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, float]]:
        """As ``mix``, plus ``step`` ``[batch]`` (the same train step on every row)."""
        mu = self.mu_at(self._current_step(step, logprob.shape[0]))
        loss, metrics = self.mixed_loss(
            mu,
            logprob,
            old_logprob,
            action_mask,
            advantages,
            expert_mask,
            is_expert_mask=kwargs.get("is_expert_mask"),
        )
        metrics["mu"] = float(mu)
        return loss, metrics

    @classmethod
    def default_args(cls) -> dict:
        return {
            "mu_warmup_steps": 0,
            "mu_decay_steps": 0,
            "mu_peak": 0.1,
            "mu_valley": 0.1,
            "clip_range": 0.2,
            "enable_phi_function": True,
            "loss_agg_mode": "token-mean",
        }
