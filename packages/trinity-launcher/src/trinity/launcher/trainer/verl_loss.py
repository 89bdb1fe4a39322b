"""Trinity's losses as verl's per-micro-batch loss callback.

This module owns :class:`TrinityLoss` (which policy / KL / entropy loss functions of
``trinity-algorithms`` make up the objective, and which batch fields they read) and
:class:`_MicroBatchLoss`, the callback verl's engine calls on every micro-batch: it unpacks
verl's packed log-probs back to ``[b, R]`` and scales each micro-batch's term by its share of
the whole batch's aggregation denominator (:func:`_share`), so micro-batching does not change
the gradient (see :mod:`trinity.launcher.trainer.verl_engine`). What such a callback does
besides its loss is :class:`_MicroBatchCallback`, which the critic's value loss
(:mod:`trinity.launcher.trainer.critic`) shares.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

from torch import Tensor

if TYPE_CHECKING:
    from trinity.algorithm.entropy_loss_fn import EntropyLossFn
    from trinity.algorithm.kl_fn import KLFn
    from trinity.algorithm.policy_loss_fn import PolicyLossFn
    from trinity.algorithm.resolve import ResolvedAlgorithm
    from trinity.common.config.rollout_correction import RolloutCorrectionConfig

# Non-tensor keys of the TensorDict that carry the batch-wide loss denominators.
_NUM_TOKENS = "trinity_num_tokens"
_NUM_SEQS = "trinity_num_seqs"

# --------------------------------------------------------------------------------- loss spec


@dataclass
class TrinityLoss:
    """The actor loss of one algorithm, built from ``trinity-algorithms`` components.

    ``loss = policy_loss + kl_loss - entropy_bonus`` (Trinity-RFT's and verl's convention):

    * ``policy_loss_fn``: a :class:`~trinity.algorithm.policy_loss_fn.PolicyLossFn`; it is
      called with exactly the batch fields its ``select_keys`` names (``old_logprob``,
      ``action_mask``, ``advantages``, ...), all ``[b, R]`` (``expert_mask``: ``[b]``);
    * ``kl_loss_fn``: a :class:`~trinity.algorithm.kl_fn.KLFn` or ``None``; ``none`` (and
      ``None``) disables the term; otherwise the batch needs ``ref_logprob``;
    * ``entropy_loss_fn``: an :class:`~trinity.algorithm.entropy_loss_fn.EntropyLossFn` or
      ``None``;
    * ``loss_agg_mode``: aggregation of the KL and entropy terms (the policy loss uses its own
      ``loss_agg_mode``);
    * ``compute_entropy``: compute the per-token entropy (needed by the entropy term, otherwise
      only a metric). ``None``: when the entropy term is active (a non-``none`` function with a
      non-zero coefficient).
    * ``rollout_correction``: ``algorithm.rollout_correction`` (``None``: off). Decoupled mode
      (``bypass_mode: false``): the trainer has already recomputed ``old_logprob``, masked the
      rejected tokens out of ``action_mask`` and, with ``rollout_is``, passes the IS weights as
      the batch field ``rollout_is_weights``, which the policy loss multiplies in per token.
      Bypass mode: ``old_logprob`` is the rollout's, and each micro-batch computes the weights
      and rejections from the current log-probs (:meth:`_MicroBatchLoss.bypass_policy_loss`).
    """

    policy_loss_fn: PolicyLossFn
    kl_loss_fn: Optional[KLFn] = None
    entropy_loss_fn: Optional[EntropyLossFn] = None
    loss_agg_mode: str = "token-mean"
    compute_entropy: Optional[bool] = None
    rollout_correction: Optional[RolloutCorrectionConfig] = None

    def __post_init__(self) -> None:
        from trinity.algorithm.utils import LOSS_AGG_MODES

        if self.rollout_correction is not None:
            self.rollout_correction = _check_rollout_correction(
                self.rollout_correction, self.policy_loss_fn
            )

        for owner, mode in (
            ("loss_agg_mode", self.loss_agg_mode),
            (
                f"{type(self.policy_loss_fn).__name__}.loss_agg_mode",
                self.policy_loss_agg_mode,
            ),
        ):
            if mode not in LOSS_AGG_MODES:
                raise ValueError(
                    f"{owner}={mode!r} is invalid; allowed: {', '.join(LOSS_AGG_MODES)}"
                )

    @classmethod
    def from_algorithm(
        cls,
        algorithm: Union[ResolvedAlgorithm, Mapping[str, Any], Any],
        compute_entropy: Optional[bool] = None,
        rollout_correction: Union[RolloutCorrectionConfig, Mapping[str, Any], None] = None,
    ) -> TrinityLoss:
        """Build the components of a :class:`~trinity.algorithm.resolve.ResolvedAlgorithm` (or
        of anything :func:`~trinity.algorithm.resolve.resolve_algorithm` accepts: an
        ``AlgorithmConfig``, a ``Config``, a mapping such as ``{"algorithm_type": "grpo"}``);
        ``rollout_correction``: the ``algorithm.rollout_correction`` section, if set."""
        from trinity.algorithm.resolve import ResolvedAlgorithm, resolve_algorithm

        resolved = (
            algorithm if isinstance(algorithm, ResolvedAlgorithm) else resolve_algorithm(algorithm)
        )
        return cls(
            policy_loss_fn=resolved.build_policy_loss_fn(),
            kl_loss_fn=resolved.build_kl_loss_fn(),
            entropy_loss_fn=resolved.build_entropy_loss_fn(),
            loss_agg_mode=resolved.loss_agg_mode,
            compute_entropy=compute_entropy,
            rollout_correction=rollout_correction,  # type: ignore[arg-type]
        )

    @property
    def policy_loss_agg_mode(self) -> str:
        return str(getattr(self.policy_loss_fn, "loss_agg_mode", "token-mean"))

    @property
    def uses_kl(self) -> bool:
        from trinity.algorithm.kl_fn import DummyKLFn

        return self.kl_loss_fn is not None and not isinstance(self.kl_loss_fn, DummyKLFn)

    @property
    def uses_entropy(self) -> bool:
        from trinity.algorithm.entropy_loss_fn import DummyEntropyLossFn

        return (
            self.entropy_loss_fn is not None
            and not isinstance(self.entropy_loss_fn, DummyEntropyLossFn)
            and float(getattr(self.entropy_loss_fn, "entropy_coef", 1.0)) != 0.0
        )

    @property
    def needs_entropy(self) -> bool:
        return self.uses_entropy if self.compute_entropy is None else bool(self.compute_entropy)

    @property
    def uses_rollout_is_weights(self) -> bool:
        """Whether the trainer passes ``rollout_is_weights`` (decoupled mode with ``rollout_is``;
        in bypass mode the micro-batches compute their own)."""
        rc = self.rollout_correction
        return rc is not None and not rc.bypass_mode and rc.rollout_is is not None

    def required_fields(self) -> list[str]:
        """Batch fields the loss reads (``action_mask`` always: it weights micro-batches)."""
        keys = list(self.policy_loss_fn.select_keys)
        extra = ["action_mask"]
        if self.uses_kl:
            extra.append("ref_logprob")
        if self.uses_rollout_is_weights:
            extra.append("rollout_is_weights")
        if self.rollout_correction is not None and self.rollout_correction.bypass_mode:
            extra.append("old_logprob")  # the rollout's log-probs, against the current ones
            if self.rollout_correction.loss_type == "reinforce":
                extra.append("advantages")
        return keys + [k for k in extra if k not in keys]


def _check_rollout_correction(
    config: Union[RolloutCorrectionConfig, Mapping[str, Any]], policy_loss_fn: PolicyLossFn
) -> RolloutCorrectionConfig:
    """``algorithm.rollout_correction`` as a checked config, refused for a policy loss that
    cannot honour it (the weights go into the per-token loss; mix's expert rows have no
    rollout log-probs to correct)."""
    from trinity.common.config.rollout_correction import RolloutCorrectionConfig

    rc = (
        config
        if isinstance(config, RolloutCorrectionConfig)
        else RolloutCorrectionConfig.model_validate(dict(config))
    )
    name = type(policy_loss_fn).__name__
    if "expert_mask" in policy_loss_fn.select_keys:
        raise ValueError(
            f"algorithm.rollout_correction cannot be used with the policy loss {name}: its "
            "expert rows carry no rollout log-probs to correct; set rollout_correction: null"
        )
    # bypass mode applies weights only with loss_type reinforce, which replaces the loss
    if rc.rollout_is is not None and not rc.bypass_mode:
        if not policy_loss_fn.accepts_rollout_is_weights:
            raise ValueError(
                f"algorithm.rollout_correction.rollout_is={rc.rollout_is!r} weights the policy "
                f"loss per token, which {name} cannot take; the ratio losses (ppo, gspo, cispo, "
                "sapo, topr, importance_sampling) can. Use rejection sampling only "
                "(rollout_is: null) or bypass_mode with loss_type: reinforce"
            )
    return rc


def _share(mask: Tensor, mode: str, num_tokens: float, num_seqs: float) -> float:
    """The part of the whole batch's ``mode`` denominator that this micro-batch holds."""
    if mode == "token-sum":  # a sum over micro-batches is the batch's sum: no rescaling
        return 1.0
    if mode == "token-mean":
        return float(mask.sum().item()) / max(num_tokens, 1.0)
    return float((mask.sum(dim=-1) > 0).sum().item()) / max(num_seqs, 1.0)


class _MicroBatchCallback(ABC):
    """What every ``loss_function`` verl's engine calls per micro-batch shares (the actor's
    :class:`_MicroBatchLoss` and the critic's ``_MicroBatchValueLoss``).

    ``__call__(model_output, data, dp_group)``: ``model_output`` holds nested ``[b, j]`` tensors
    over the packed sequences (:meth:`padded` turns one into ``[b, R]``); ``data`` is the
    micro-batch TensorDict, carrying the whole batch's denominators. It counts the call, hands
    :meth:`micro_batch_loss` a ``share(mask, loss_agg_mode)`` function (:func:`_share` with the
    batch's denominators), and scales the loss it returns by the data-parallel size: FSDP
    averages gradients over ranks while the shares are already global.
    """

    def __init__(self, dp_size: int) -> None:
        self.dp_size = dp_size
        #: micro-batches this callback has seen (the step's ``*/micro_batches`` metric)
        self.calls = 0

    def __call__(
        self, model_output: Mapping[str, Tensor], data: Any, dp_group: Any = None
    ) -> tuple[Tensor, dict[str, float]]:
        from verl.utils import tensordict_utils as tu

        self.calls += 1
        share = functools.partial(
            _share,
            num_tokens=float(tu.get_non_tensor_data(data, _NUM_TOKENS, 0.0)),
            num_seqs=float(tu.get_non_tensor_data(data, _NUM_SEQS, 0.0)),
        )
        loss, metrics = self.micro_batch_loss(model_output, data, share)
        # FSDP averages gradients over data-parallel ranks; the shares are global, so undo it
        return loss * self.dp_size, metrics

    @abstractmethod
    def micro_batch_loss(
        self, model_output: Mapping[str, Tensor], data: Any, share: Callable[[Tensor, str], float]
    ) -> tuple[Tensor, dict[str, float]]:
        """This micro-batch's loss, already weighted by its share of the batch, and metrics
        weighted by theirs (so sums over micro-batches and ranks are the whole batch's)."""

    @staticmethod
    def padded(model_output: Mapping[str, Tensor], key: str, data: Any) -> Tensor:
        """``model_output[key]`` (nested ``[b, j]`` over the packed sequences) as ``[b, R]``."""
        from verl.workers.utils.padding import no_padding_2_padding

        return no_padding_2_padding(model_output[key], data)


class _MicroBatchLoss(_MicroBatchCallback):
    """The actor's ``loss_function`` (see the module docstring and :class:`_MicroBatchCallback`).

    Reads ``model_output["log_probs"]`` (and ``["entropy"]``) and the batch fields ``fields``;
    the policy term is weighted by its share under the policy loss's aggregation, the KL and
    entropy terms under ``TrinityLoss.loss_agg_mode``.
    """

    def __init__(self, loss: TrinityLoss, fields: list[str], dp_size: int) -> None:
        super().__init__(dp_size)
        self.loss = loss
        self.fields = fields

    def micro_batch_loss(
        self, model_output: Mapping[str, Tensor], data: Any, share: Callable[[Tensor, str], float]
    ) -> tuple[Tensor, dict[str, float]]:
        spec = self.loss
        logprob = self.padded(model_output, "log_probs", data)  # [b, R]
        batch = {k: data[k] for k in self.fields}
        mask = batch["action_mask"]

        metrics: dict[str, float] = {}

        def add(values: Mapping[str, float], weight: float) -> None:
            for key, value in values.items():
                metrics[f"actor/{key}"] = metrics.get(f"actor/{key}", 0.0) + float(value) * weight

        rc = spec.rollout_correction
        if rc is not None and rc.bypass_mode:
            pg_loss, pg_metrics, pg_mask, corr_metrics = self.bypass_policy_loss(logprob, batch)
            w_corr = share(mask, "token-mean")  # token-weighted means over micro-batches
            for key, value in corr_metrics.items():
                metrics[key] = metrics.get(key, 0.0) + value * w_corr
        else:
            pg_mask = mask
            weights = batch.get("rollout_is_weights")
            # only with weights: a loss that overrides compute() (mix, plugins) keeps its
            # signature, and an unset rollout_correction changes nothing
            extra = {} if weights is None else {"rollout_is_weights": weights}
            pg_loss, pg_metrics = spec.policy_loss_fn.compute(logprob, batch, **extra)
        w_pg = share(pg_mask, spec.policy_loss_agg_mode)
        add({**pg_metrics, "pg_loss": float(pg_loss.detach().item())}, w_pg)
        total = pg_loss * w_pg
        reported = float(pg_loss.detach().item()) * w_pg

        w_aux = share(mask, spec.loss_agg_mode)
        if spec.uses_kl:
            kl_loss, kl_metrics = spec.kl_loss_fn.calculate_kl_loss(  # type: ignore[union-attr]
                logprob=logprob,
                ref_logprob=batch["ref_logprob"],
                response_mask=mask,
                loss_agg_mode=spec.loss_agg_mode,
                old_logprob=batch.get("old_logprob"),
            )
            total = total + kl_loss * w_aux
            reported += float(kl_loss.detach().item()) * w_aux
            add(kl_metrics, w_aux)

        if spec.needs_entropy:
            entropy = self.padded(model_output, "entropy", data)  # [b, R]
            extra = {k: batch[k] for k in ("expert_mask", "is_expert_mask") if k in batch}
            if spec.entropy_loss_fn is not None:
                bonus, ent_metrics = spec.entropy_loss_fn(
                    entropy, mask, loss_agg_mode=spec.loss_agg_mode, **extra
                )
                add(ent_metrics, w_aux)
                if spec.uses_entropy:
                    total = total - bonus * w_aux
                    reported -= float(bonus.detach().item()) * w_aux
            from trinity.algorithm.utils import masked_mean

            add({"entropy": float(masked_mean(entropy.detach(), mask).item())}, w_aux)

        metrics["actor/loss"] = reported
        return total, metrics

    def bypass_policy_loss(
        self, logprob: Tensor, batch: Mapping[str, Tensor]
    ) -> tuple[Tensor, dict[str, float], Tensor, dict[str, float]]:
        """The policy term in rollout correction's bypass mode (verl's ``bypass_mode`` loss).

        ``old_logprob`` is the rollout's, so the weights and rejections compare the *current*
        log-probs ``logprob [b, R]`` (detached) with it, per micro-batch. The rejected tokens
        leave the policy term's mask (not the KL's or entropy's); the batch's denominators stay
        those of the unrejected mask, as in verl. ``loss_type: ppo_clip``: the configured policy
        loss, whose ratio to the rollout policy already is the correction (no extra weights);
        ``reinforce``: REINFORCE with the IS weights instead of the configured loss.

        Returns ``(loss, metrics, policy_mask [b, R], rollout_corr/* metrics)``.
        """
        from trinity.algorithm.policy_loss_fn.functional import metrics_to_floats
        from trinity.algorithm.rollout_correction import (
            compute_rollout_correction,
            reinforce_loss,
        )

        spec = self.loss
        rc = spec.rollout_correction
        rollout = batch["old_logprob"]
        corr = compute_rollout_correction(logprob.detach(), rollout, batch["action_mask"], rc)
        if rc.loss_type == "reinforce":  # type: ignore[union-attr]
            loss, raw = reinforce_loss(
                logprob,
                rollout,
                batch["advantages"],
                corr.response_mask,
                corr.is_weights,
                loss_agg_mode=spec.policy_loss_agg_mode,
            )
            pg_metrics = metrics_to_floats(raw)
        else:
            loss, pg_metrics = spec.policy_loss_fn.compute(
                logprob, {**batch, "action_mask": corr.response_mask}
            )
        return loss, pg_metrics, corr.response_mask, corr.metrics
