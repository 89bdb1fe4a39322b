"""MIX policy loss (``mix``): SFT on expert rows plus PPO on the others, in one batch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from torch import Tensor

from trinity.algorithm.args import ClipRangeArgs, Field, LossAggMode, PosInt, Probability
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn
from trinity.algorithm.policy_loss_fn.ppo import PPOPolicyLossFn
from trinity.algorithm.policy_loss_fn.sft import SFTLossFn
from trinity.algorithm.utils import expert_row_mask

__all__ = ["MIXPolicyLossFn"]


@POLICY_LOSS_FN.register_module("mix")
class MIXPolicyLossFn(PolicyLossFn):
    """``(1 - mu) * PPO(usual rows) + mu * SFT(expert rows)``.

    The ``mix`` sample strategy puts rollouts ("usual") and expert demonstrations in one
    batch and marks the expert rows with the bool ``[batch]`` field ``expert_mask`` (a batch
    that only has Trinity-RFT's older name ``is_expert_mask`` works too, see :meth:`compute`).
    Each part is aggregated over its own rows only, so padding in one part does not dilute
    the other; a part with no rows contributes 0.

    Micro-batch weighting (Trinity-RFT's arguments): when a mini-batch is split into
    micro-batches whose losses the trainer averages (divides by ``gradient_accumulation``),
    each part is rescaled by ``n_part_rows * weight`` so that the mini-batch total is the mean
    over *all* that part's rows of the mini-batch, however the rows fell into micro-batches:

    * ``use_dynamic_bsz``: ``weight = (ppo_mini_batch_size // ngpus_trainer)
      / (batch * train_batch_size_part // ngpus_trainer)``
    * otherwise: ``weight = (ppo_mini_batch_size // ppo_micro_batch_size_per_gpu)
      / (train_batch_size_part // ngpus_trainer)``

    Leaving ``train_batch_size_usual``/``train_batch_size_expert`` unset (``None``, our
    default) means "this batch is the whole mini-batch": each part is just its own mean.
    Trinity-RFT defaults them to 1 (its ``mix`` algorithm always fills them from the config),
    so its loss called bare multiplies each part's mean by the part's row count; pass 1 for
    both to get its numbers (docs/compat.md). Metrics are scaled the same way and prefixed
    ``usual/`` and ``expert/``; ``loss`` is the total.

    Args:
        mu: weight of the SFT part.
        clip_range / clip_range_low / clip_range_high / clip_ratio_c: the PPO part's.
        loss_agg_mode: both parts' aggregation unless ``sft_loss_agg_mode`` /
            ``grpo_loss_agg_mode`` override it.
        use_token_level_loss_in_sft: Trinity-RFT's older switch of the SFT part's aggregation
            (see :class:`~trinity.algorithm.policy_loss_fn.sft.SFTLossFn`).
    """

    class Args(ClipRangeArgs):
        """``policy_loss_fn_args`` of ``mix``."""

        mu: Probability = Field(0.1, description="Weight of the SFT part.")
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
        use_token_level_loss_in_sft: Optional[bool] = Field(
            None, description="Trinity-RFT's older switch of the SFT part's aggregation."
        )

    #: the registered name, for messages
    loss_name = "mix"

    def __init__(
        self,
        backend: str = "verl",
        mu: float = 0.1,
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
        use_token_level_loss_in_sft: Optional[bool] = None,
        loss_agg_mode: str = "token-mean",
        sft_loss_agg_mode: Optional[str] = None,
        grpo_loss_agg_mode: Optional[str] = None,
    ) -> None:
        super().__init__(backend=backend)
        if not 0.0 <= mu <= 1.0:
            raise ValueError(f"mu must be in [0, 1], got {mu}")
        self.mu = mu
        self.use_dynamic_bsz = use_dynamic_bsz
        self.experience_per_gpu = ppo_mini_batch_size // ngpus_trainer
        self.gradient_accumulation = ppo_mini_batch_size // ppo_micro_batch_size_per_gpu
        self.train_batch_size_usual = (
            None if train_batch_size_usual is None else train_batch_size_usual // ngpus_trainer
        )
        self.train_batch_size_expert = (
            None if train_batch_size_expert is None else train_batch_size_expert // ngpus_trainer
        )
        self.loss_agg_mode = loss_agg_mode
        self.grpo_loss_fn = PPOPolicyLossFn(
            backend=backend,
            clip_range=clip_range,
            clip_range_low=clip_range_low,
            clip_range_high=clip_range_high,
            clip_ratio_c=clip_ratio_c,
            loss_agg_mode=grpo_loss_agg_mode or loss_agg_mode,
        )
        self.sft_loss_fn = SFTLossFn(
            backend=backend,
            loss_agg_mode=sft_loss_agg_mode or loss_agg_mode,
            use_token_level_loss=use_token_level_loss_in_sft,
        )

    def _part_weight(self, n_rows: int, batch_rows: int, part_batch_size: Optional[int]) -> float:
        """Factor turning a part's mean loss into its share of the mini-batch objective."""
        if part_batch_size is None:
            return 1.0
        if self.use_dynamic_bsz:
            per_row = self.experience_per_gpu / (batch_rows * part_batch_size)
        else:
            per_row = self.gradient_accumulation / part_batch_size
        return n_rows * per_row

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        old_logprob: Tensor,
        action_mask: Tensor,
        advantages: Tensor,
        expert_mask: Optional[Tensor] = None,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, float]]:
        """``[batch, response_len]`` inputs and ``expert_mask`` bool ``[batch]``
        (``is_expert_mask``, Trinity-RFT's older name, is accepted too).

        Returns the scalar loss and float metrics.
        """
        return self.mixed_loss(
            self.mu,
            logprob,
            old_logprob,
            action_mask,
            advantages,
            expert_mask,
            is_expert_mask=kwargs.get("is_expert_mask"),
        )

    def mixed_loss(
        self,
        mu: float,
        logprob: Tensor,
        old_logprob: Tensor,
        action_mask: Tensor,
        advantages: Tensor,
        expert_mask: Optional[Tensor],
        is_expert_mask: Optional[Tensor] = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """``(1 - mu) * PPO(usual rows) + mu * SFT part(expert rows)``, each part weighted as
        the class docstring says; the SFT part is ``self.sft_loss_fn``."""
        expert = expert_row_mask(
            expert_mask,
            logprob.shape[0],
            logprob.device,
            f"The {self.loss_name} policy loss",
            is_expert_mask=is_expert_mask,
        )
        usual = ~expert
        n_usual, n_expert = int(usual.sum()), int(expert.sum())
        batch_rows = logprob.shape[0]
        zero = logprob.new_zeros(())

        metrics: dict[str, float] = {}
        grpo_loss = zero
        if n_usual > 0:
            grpo_loss, grpo_metrics = self.grpo_loss_fn(
                logprob[usual], old_logprob[usual], action_mask[usual], advantages[usual]
            )
            w = self._part_weight(n_usual, batch_rows, self.train_batch_size_usual)
            grpo_loss = grpo_loss * w
            metrics.update({f"usual/{k}": v * w for k, v in grpo_metrics.items()})
        sft_loss = zero
        if n_expert > 0:
            sft_loss, sft_metrics = self.sft_loss_fn(logprob[expert], action_mask[expert])
            w = self._part_weight(n_expert, batch_rows, self.train_batch_size_expert)
            sft_loss = sft_loss * w
            metrics.update({f"expert/{k}": v * w for k, v in sft_metrics.items()})

        loss = (1.0 - mu) * grpo_loss + mu * sft_loss
        metrics["loss"] = float(loss.detach().item())
        return loss, metrics

    def compute(self, logprob: Tensor, batch: Mapping[str, Any]) -> tuple[Tensor, dict]:
        """As :meth:`PolicyLossFn.compute`; ``is_expert_mask`` is accepted for ``expert_mask``."""
        if "expert_mask" not in batch and "is_expert_mask" in batch:
            batch = {**batch, "expert_mask": batch["is_expert_mask"]}
        return super().compute(logprob, batch)

    @classmethod
    def default_args(cls) -> dict:
        return {"mu": 0.1, "clip_range": 0.2, "loss_agg_mode": "token-mean"}
