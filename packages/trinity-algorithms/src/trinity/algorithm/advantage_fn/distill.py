"""Distillation advantages from a teacher's log-probs: ``on_policy_distill`` and ``jsd``.

The student samples, a teacher scores the sampled tokens (the workflow stores its log-probs in
``Experience.teacher_logprobs``, collated into ``Experiences.teacher_logprobs [B, R]``), and the
per-token advantage says how much more the teacher likes each token than the student does. Any
policy loss then trains on it (Trinity-RFT pairs them with ``ppo``; ``importance_sampling`` when
no clipping is wanted). Both run in the trainer on the collated batch.

The student's log-probs are the batch's ``logprobs`` (those of the rollout policy that sampled
the tokens), or the ``old_logprob`` keyword (e.g. recomputed by the trainer, which is what
Trinity-RFT's verl trainer hands them).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from trinity.algorithm.advantage_fn._trainer import require_token_field
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN, AdvantageFn
from trinity.algorithm.advantage_fn.functional_logprob import (
    distill_advantages,
    jsd_advantages,
    jsd_per_token,
    jsd_per_token_unweighted,
    row_sum_stats,
)
from trinity.algorithm.args import ComponentArgs, Field, NonNegFloat, PosFloat, PosInt, Probability
from trinity.common.experience import Experiences

__all__ = ["JSDAdvantage", "OnPolicyDistillAdvantage"]

_TEACHER_MISSING = (
    "needs the teacher's log-probs of the sampled tokens [B, R]: set Experience."
    "teacher_logprobs in the workflow (collated as batch.teacher_logprobs), or pass "
    "teacher_logprobs=..."
)
_STUDENT_MISSING = (
    "needs the student's log-probs of the sampled tokens [B, R]: experiences with logprobs "
    "(batch.logprobs), or pass old_logprob=..."
)


def _logprob_pair(
    name: str, batch: Experiences, teacher: Optional[Tensor], student: Optional[Tensor]
) -> tuple[Tensor, Tensor]:
    """``(student [B, R], teacher [B, R])`` log-probs of ``batch``, checked on trained tokens."""
    teacher = require_token_field(
        batch,
        ("teacher_logprobs", "teacher_logprob"),
        teacher,
        what="teacher log-prob",
        missing=f"the {name!r} advantage {_TEACHER_MISSING}",
    )
    student = require_token_field(
        batch,
        ("logprobs",),
        student,
        what="student log-prob",
        missing=f"the {name!r} advantage {_STUDENT_MISSING}",
    )
    return student, teacher


def _set(batch: Experiences, advantages: Tensor) -> None:
    batch.advantages = advantages
    batch.returns = advantages.clone()


@ADVANTAGE_FN.register_module("on_policy_distill")
class OnPolicyDistillAdvantage(AdvantageFn):
    """``A_t = kl_coef * (log p_teacher - log p_student)`` per trained token.

    See :func:`~trinity.algorithm.advantage_fn.functional_logprob.distill_advantages`.

    Args:
        kl_coef: scale of the advantages (the weight of the reverse-KL objective).

    ``__call__(batch, teacher_logprobs=None, old_logprob=None)``. Metrics: ``kl/mean`` /
    ``kl/std`` (over rows, of each row's summed ``log p_student - log p_teacher``) and
    ``advantages/mean`` (mean over rows of each row's summed advantage).
    """

    class Args(ComponentArgs):
        """``advantage_fn_args`` of ``on_policy_distill``."""

        kl_coef: NonNegFloat = Field(1.0, description="Scale of teacher - student log-probs.")

    def __init__(self, kl_coef: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not kl_coef >= 0:
            raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
        self.kl_coef = float(kl_coef)

    def __call__(  # type: ignore[override]
        self,
        exps: Experiences,
        teacher_logprobs: Optional[Tensor] = None,
        old_logprob: Optional[Tensor] = None,
        **kwargs: Any,
    ) -> tuple[Experiences, dict]:
        student, teacher = _logprob_pair("on_policy_distill", exps, teacher_logprobs, old_logprob)
        mask = exps.action_mask
        with torch.no_grad():
            advantages = distill_advantages(student, teacher, mask, self.kl_coef)
            kl_mean, kl_std = row_sum_stats(student - teacher, mask)
            adv_mean, _ = row_sum_stats(advantages, mask)
        _set(exps, advantages)
        return exps, {"kl/mean": kl_mean, "kl/std": kl_std, "advantages/mean": adv_mean}

    @classmethod
    def default_args(cls) -> dict:
        return {"kl_coef": 1.0}


@ADVANTAGE_FN.register_module("jsd")
class JSDAdvantage(AdvantageFn):
    """Distillation by the generalised Jensen-Shannon divergence ``JSD_beta(student, teacher)``
    (``beta = lambda_coef`` weighs the teacher in the mixture; 0 and 1 are the two pure KLs).

    ``A_t = kl_coef * jsd_advantages(s_t, t_t)`` per trained token: the advantage whose policy
    gradient on the student's samples is ``-grad JSD_beta``, ``-(1 - beta) * (s - log m)``
    (see :func:`~trinity.algorithm.advantage_fn.functional_logprob.jsd_advantages`): positive
    where the teacher likes the sampled token more than the student, negative where less.
    Trinity-RFT 0.6 uses ``-kl_coef`` times its per-token JSD estimate instead, which is never
    negative for ``0 < beta < 1`` and does not learn (the docstring there says why);
    ``trinity_rft_estimate: true`` computes that.

    Args:
        lambda_coef: the mixture weight ``beta`` in ``[0, 1]`` (0.5: symmetric JSD).
        kl_coef: scale of the advantages.
        temperature: both log-probs are divided by it first (1: unchanged).
        chunk_size: compute the JSD this many rows at a time (bounds the temporaries of the
            mixture's log-sum-exp, as in Trinity-RFT); ``None``: the whole batch at once. The
            result does not depend on it.

    ``__call__(batch, teacher_logprobs=None, old_logprob=None)``. Metrics: ``jsd/mean`` /
    ``jsd/std`` (over rows, of each row's summed JSD estimate,
    :func:`~trinity.algorithm.advantage_fn.functional_logprob.jsd_per_token`) and
    ``advantages/mean``.
    """

    class Args(ComponentArgs):
        """``advantage_fn_args`` of ``jsd``."""

        lambda_coef: Probability = Field(0.5, description="Mixture weight of the teacher.")
        kl_coef: NonNegFloat = Field(1.0, description="Scale of the advantages.")
        temperature: PosFloat = Field(1.0, description="Divides both log-probs.")
        chunk_size: Optional[PosInt] = Field(
            None, description="Rows per JSD computation (memory bound); null: all at once."
        )
        trinity_rft_estimate: bool = Field(
            False,
            description="Trinity-RFT 0.6's advantage: -kl_coef times the per-token JSD "
            "estimate (compat.md; it does not learn in the learning matrix).",
        )

    def __init__(
        self,
        lambda_coef: float = 0.5,
        kl_coef: float = 1.0,
        temperature: float = 1.0,
        chunk_size: Optional[int] = None,
        trinity_rft_estimate: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= lambda_coef <= 1.0:
            raise ValueError(f"lambda_coef must be in [0, 1], got {lambda_coef}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if not kl_coef >= 0:
            raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1 or None, got {chunk_size}")
        self.lambda_coef = float(lambda_coef)
        self.kl_coef = float(kl_coef)
        self.temperature = float(temperature)
        self.chunk_size = chunk_size
        self.trinity_rft_estimate = bool(trinity_rft_estimate)

    def __call__(  # type: ignore[override]
        self,
        exps: Experiences,
        teacher_logprobs: Optional[Tensor] = None,
        old_logprob: Optional[Tensor] = None,
        **kwargs: Any,
    ) -> tuple[Experiences, dict]:
        student, teacher = _logprob_pair("jsd", exps, teacher_logprobs, old_logprob)
        mask = exps.action_mask.to(torch.bool)
        with torch.no_grad():
            rows = self.chunk_size or max(student.shape[0], 1)
            # masked tokens (padding) may hold any value: 0 there, before any exp
            zero = torch.zeros((), dtype=teacher.dtype)
            student = torch.where(mask, student.to(teacher.dtype) / self.temperature, zero)
            teacher = torch.where(mask, teacher / self.temperature, zero)
            parts = [
                (jsd_per_token(s, t, self.lambda_coef), jsd_advantages(s, t, self.lambda_coef))
                for s, t in zip(student.split(rows), teacher.split(rows), strict=True)
            ]
            jsd = torch.where(mask, torch.cat([j for j, _ in parts]), zero)
            if self.trinity_rft_estimate:  # 0.6's: minus its unweighted estimate (compat.md)
                old = jsd_per_token_unweighted(student, teacher, self.lambda_coef)
                advantages = torch.where(mask, -self.kl_coef * old, zero)
            else:
                advantages = torch.where(
                    mask, self.kl_coef * torch.cat([a for _, a in parts]), zero
                )
            jsd_mean, jsd_std = row_sum_stats(jsd, mask)
            adv_mean, _ = row_sum_stats(advantages, mask)
        _set(exps, advantages)
        return exps, {"jsd/mean": jsd_mean, "jsd/std": jsd_std, "advantages/mean": adv_mean}

    @classmethod
    def default_args(cls) -> dict:
        return {"lambda_coef": 0.5, "kl_coef": 1.0, "temperature": 1.0, "chunk_size": None}
