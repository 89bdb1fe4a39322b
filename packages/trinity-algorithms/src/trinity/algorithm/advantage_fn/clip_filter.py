"""GRPO advantages with entropy-based token filters: ``clipb`` (Clip_B) and ``clipv`` (Clip_V).

Both compute GRPO advantages in the trainer (each row's outcome score standardized within its
task's group, a one-member group scored against mean 0 and std 1, as verl) and then remove some
*negative-advantage* tokens from the batch's ``action_mask``, so the policy loss, the KL and the
entropy terms all skip them. The removed tokens are those where pushing the sampled token down
would collapse entropy the most (see the filters in
:mod:`~trinity.algorithm.advantage_fn.functional_logprob`). Their advantage is set to 0 as well.

They need the policy's per-token entropy ``[B, R]``, which the collated batch does not carry:
pass ``entropy=...`` or provide a batch attribute / custom field ``entropy`` (or Trinity-RFT's
``entropys``). ``clipv`` also needs ``necs [B, R]`` the same way.

Metrics: ``frac_clipped`` (share of trained tokens removed), ``frac_clipped_pos`` /
``frac_clipped_neg`` (among positive / negative-advantage tokens; 0 where there are none,
Trinity-RFT reports 1 there), plus the filter signal's statistics.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from trinity.algorithm.advantage_fn._trainer import require_token_field
from trinity.algorithm.advantage_fn._vectorized import ADV_DTYPE, batch_outcome_scores
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN, AdvantageFn
from trinity.algorithm.advantage_fn.functional import (
    as_group_index,
    broadcast_to_tokens,
    grpo_advantages,
)
from trinity.algorithm.advantage_fn.functional_logprob import (
    TokenFilter,
    clip_b_keep,
    clip_v_keep,
)
from trinity.algorithm.args import ComponentArgs, Field, NonNegFloat, PosFloat, Probability
from trinity.common.experience import Experiences

__all__ = ["ClipBAdvantageFn", "ClipVAdvantageFn"]


def grpo_token_advantages(batch: Experiences, epsilon: float) -> Tensor:
    """``[B, R]`` GRPO advantages of a collated batch, grouped by task (verl's ``uid``)."""
    scores = batch_outcome_scores(batch).to(torch.float64)
    group_index, _ = as_group_index([e.tid for e in batch.eids], device=scores.device)
    adv = grpo_advantages(scores, group_index, epsilon)
    return broadcast_to_tokens(adv.to(ADV_DTYPE), batch.action_mask)


def clip_fractions(mask: Tensor, kept: Tensor, advantages: Tensor) -> dict[str, float]:
    """Share of the trained tokens removed: overall, among ``A > 0`` and among ``A < 0``."""

    def removed(selected: Tensor) -> float:
        total = int(selected.sum())
        return 0.0 if total == 0 else 1.0 - int((selected & kept).sum()) / total

    m = mask.to(torch.bool)
    return {
        "frac_clipped": removed(m),
        "frac_clipped_pos": removed(m & (advantages > 0)),
        "frac_clipped_neg": removed(m & (advantages < 0)),
    }


class _FilteredGRPO(AdvantageFn):
    """GRPO advantages, then a token filter on the action mask (subclasses: :meth:`filter`)."""

    name = ""
    epsilon: float = 1e-6

    def filter(
        self, batch: Experiences, advantages: Tensor, logprob: Tensor, entropy: Tensor, **kw: Any
    ) -> tuple[TokenFilter, dict[str, float]]:
        raise NotImplementedError

    def _entropy_and_logprob(
        self, batch: Experiences, entropy: Optional[Tensor], logprob: Optional[Tensor]
    ) -> tuple[Tensor, Tensor]:
        entropy = require_token_field(
            batch,
            ("entropy", "entropys"),
            entropy,
            what="entropy",
            missing=f"the {self.name!r} advantage needs the policy's per-token entropy [B, R]: "
            "pass entropy=..., or set batch.custom_fields['entropy'] (the trainer does not "
            "compute entropies before the advantages)",
        )
        logprob = require_token_field(
            batch,
            ("logprobs",),
            logprob,
            what="log-prob",
            missing=f"the {self.name!r} advantage needs the sampled tokens' log-probs [B, R]: "
            "experiences with logprobs, or pass old_logprob=...",
        )
        return entropy, logprob

    def run(
        self,
        batch: Experiences,
        entropy: Optional[Tensor],
        logprob: Optional[Tensor],
        **fields: Any,
    ) -> tuple[Experiences, dict]:
        entropy, logprob = self._entropy_and_logprob(batch, entropy, logprob)
        mask = batch.action_mask
        with torch.no_grad():
            advantages = grpo_token_advantages(batch, self.epsilon)
            kept_filter, signal_metrics = self.filter(batch, advantages, logprob, entropy, **fields)
            new_mask = mask.to(torch.bool) & kept_filter.keep
            metrics = clip_fractions(mask, new_mask, advantages)
            advantages = advantages * new_mask.to(advantages.dtype)
        batch.action_mask = new_mask.to(mask.dtype)
        batch.advantages = advantages
        batch.returns = advantages.clone()
        metrics.update(signal_metrics)
        return batch, metrics


@ADVANTAGE_FN.register_module("clipb")
class ClipBAdvantageFn(_FilteredGRPO):
    """GRPO + Clip_B; see :func:`~trinity.algorithm.advantage_fn.functional_logprob.clip_b_keep`.

    Args:
        epsilon: added to the GRPO std.
        mu: a negative-advantage token is removed when its signal is more than ``mu`` batch
            standard deviations below the batch mean.

    ``__call__(batch, entropy=None, old_logprob=None)``; metrics besides the fractions: ``ES``
    and ``varS`` (mean and population variance of the signal over the trained tokens).
    """

    class Args(ComponentArgs):
        """``advantage_fn_args`` of ``clipb``."""

        epsilon: PosFloat = Field(1e-6, description="Added to the GRPO std.")
        mu: NonNegFloat = Field(2.5, description="Lower cut, in batch stds of the signal.")

    name = "clipb"

    def __init__(self, epsilon: float = 1e-6, mu: float = 2.5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}")
        if not mu >= 0:
            raise ValueError(f"mu must be >= 0, got {mu}")
        self.epsilon = float(epsilon)
        self.mu = float(mu)

    def filter(
        self, batch: Experiences, advantages: Tensor, logprob: Tensor, entropy: Tensor, **kw: Any
    ) -> tuple[TokenFilter, dict[str, float]]:
        kept = clip_b_keep(advantages, logprob, entropy, batch.action_mask, self.mu)
        return kept, {"ES": float(kept.mean), "varS": float(kept.std) ** 2}

    def __call__(  # type: ignore[override]
        self,
        exps: Experiences,
        entropy: Optional[Tensor] = None,
        old_logprob: Optional[Tensor] = None,
        **kwargs: Any,
    ) -> tuple[Experiences, dict]:
        return self.run(exps, entropy, old_logprob)

    @classmethod
    def default_args(cls) -> dict:
        return {"epsilon": 1e-6, "mu": 2.5}


@ADVANTAGE_FN.register_module("clipv")
class ClipVAdvantageFn(_FilteredGRPO):
    """GRPO + Clip_V; see :func:`~trinity.algorithm.advantage_fn.functional_logprob.clip_v_keep`.

    Args:
        epsilon: added to the GRPO std.
        mu: a negative-advantage token is a candidate when its signal exceeds ``mu`` batch
            standard deviations (Trinity-RFT's configured default 8.5).
        max_frac: at most this share of the trained tokens (and at least one) is removed.

    ``__call__(batch, entropy=None, necs=None, old_logprob=None)``; ``necs [B, R]`` comes from
    the keyword, a batch attribute or a custom field. Metric besides the fractions: ``stdD``.
    """

    class Args(ComponentArgs):
        """``advantage_fn_args`` of ``clipv``."""

        epsilon: PosFloat = Field(1e-6, description="Added to the GRPO std.")
        mu: NonNegFloat = Field(8.5, description="Upper cut, in batch stds of the signal.")
        max_frac: Probability = Field(1e-4, description="Most tokens removed, as a share.")

    name = "clipv"

    def __init__(
        self, epsilon: float = 1e-6, mu: float = 8.5, max_frac: float = 1e-4, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if not epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}")
        if not mu >= 0:
            raise ValueError(f"mu must be >= 0, got {mu}")
        if not 0.0 <= max_frac <= 1.0:
            raise ValueError(f"max_frac must be in [0, 1], got {max_frac}")
        self.epsilon = float(epsilon)
        self.mu = float(mu)
        self.max_frac = float(max_frac)

    def filter(
        self, batch: Experiences, advantages: Tensor, logprob: Tensor, entropy: Tensor, **kw: Any
    ) -> tuple[TokenFilter, dict[str, float]]:
        kept = clip_v_keep(
            advantages, logprob, entropy, kw["necs"], batch.action_mask, self.mu, self.max_frac
        )
        return kept, {"stdD": float(kept.std)}

    def __call__(  # type: ignore[override]
        self,
        exps: Experiences,
        entropy: Optional[Tensor] = None,
        necs: Optional[Tensor] = None,
        old_logprob: Optional[Tensor] = None,
        **kwargs: Any,
    ) -> tuple[Experiences, dict]:
        necs = require_token_field(
            exps,
            ("necs",),
            necs,
            what="necs",
            missing="the 'clipv' advantage needs the per-token field necs [B, R]: pass "
            "necs=..., or set batch.custom_fields['necs']",
        )
        return self.run(exps, entropy, old_logprob, necs=necs)

    @classmethod
    def default_args(cls) -> dict:
        return {"epsilon": 1e-6, "mu": 8.5, "max_frac": 1e-4}
