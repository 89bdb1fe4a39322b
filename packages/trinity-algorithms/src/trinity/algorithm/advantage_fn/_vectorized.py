"""Glue between :class:`Experience` lists / :class:`Experiences` batches and the tensor math.

Private to ``advantage_fn``: reading and validating rewards, numbering groups, writing the
per-sequence advantage back onto each experience, and the bases of the built-in group-relative
advantages. Each group's advantage is computed in one place: :meth:`BatchedGroupAdvantage.
score_experiences` scores every group of an explore step with one sequence of tensor ops
(``functional``); ``__call__`` (the step) and
:meth:`~trinity.algorithm.advantage_fn.GroupAdvantage.calculate_group_advantage` (one group,
the API user subclasses know) both run it. The readable per-group loops are the tests' oracle
(``tests/test_advantage_oracle.py``), which the vectorized numbers are checked against.
"""

from __future__ import annotations

import copy
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor

from trinity.algorithm.advantage_fn.advantage_fn import GROUP_METRICS_PREFIX, GroupAdvantage
from trinity.algorithm.advantage_fn.functional import (
    GroupStats,
    as_group_index,
    broadcast_to_tokens,
    check_finite,
)
from trinity.common.experience import Experience, Experiences, group_by

__all__ = [
    "BatchedGroupAdvantage",
    "VectorizedGroupAdvantage",
    "batch_outcome_scores",
    "duplicate_experience",
    "experience_rewards",
    "group_keys",
    "write_outcome_advantages",
]

#: dtype of the reward vectors built from ``Experience.reward`` (Python floats): float64 keeps
#: the per-group and the vectorized paths bit-compatible; advantages are written as float32.
REWARD_DTYPE = torch.float64
ADV_DTYPE = torch.float32


def experience_rewards(exps: Sequence[Experience], algorithm: str) -> Tensor:
    """``[B]`` float64 tensor of ``exp.reward``; a ``None``, NaN or inf reward raises.

    The error names the experience id, so the user can find the workflow / reward function
    that produced it.
    """
    values = [e.reward for e in exps]
    try:
        rewards = torch.tensor(values, dtype=REWARD_DTYPE)
    except (TypeError, RuntimeError):
        row = next(i for i, v in enumerate(values) if v is None)
        raise ValueError(
            f"experience {exps[row].eid} has reward None; the {algorithm!r} advantage needs a "
            "scalar reward on every experience (set Experience.reward in the workflow or "
            "reward function)"
        ) from None
    check_finite(rewards, [e.eid for e in exps])
    return rewards


def group_keys(exps: Sequence[Experience], id_type: str = "task") -> list[str]:
    """The :func:`~trinity.common.experience.group_by` key of each experience."""
    if id_type == "task":
        return [e.eid.tid for e in exps]
    if id_type == "run":
        return [e.eid.rid for e in exps]
    if id_type == "step":
        return [e.eid.sid for e in exps]
    if id_type == "batch":
        return [str(e.eid.batch) for e in exps]
    raise ValueError(f"unknown group id type {id_type!r}")


def _action_mask(exp: Experience) -> Tensor:
    if exp.action_mask is None:
        raise ValueError(
            f"experience {exp.eid} has no action_mask; outcome advantages are written as "
            "score * action_mask"
        )
    return exp.action_mask


def write_outcome_advantages(exps: Sequence[Experience], scalars: Tensor) -> None:
    """Set ``exp.advantages = scalar * exp.action_mask`` and ``exp.returns`` (a copy) on each.

    One multiply over the concatenated masks instead of one small tensor op per experience; the
    per-experience tensors are disjoint views of two flat buffers (serialization copies views,
    see ``Experience.serialize``).

    Args:
        exps: ``B`` experiences.
        scalars: ``[B]`` advantage per experience.
    """
    if not exps:
        return
    masks = [_action_mask(e) for e in exps]
    lengths = [m.shape[0] for m in masks]
    flat_mask = torch.cat(masks).to(ADV_DTYPE)
    reps = torch.repeat_interleave(
        scalars.to(ADV_DTYPE), torch.tensor(lengths, dtype=torch.long), output_size=len(flat_mask)
    )
    adv = reps * flat_mask
    ret = adv.clone()
    for exp, a, r in zip(exps, adv.split(lengths), ret.split(lengths), strict=True):
        exp.advantages = a
        exp.returns = r


def group_baselines(
    rewards: Tensor, advantages: Tensor, group_index: Tensor, count: Tensor
) -> Tensor:
    """Per-group mean of ``reward - advantage``: the baseline a group-relative estimator
    subtracted (every member of a group has the same one). ``rewards``/``advantages``/
    ``group_index`` ``[B]``, ``count`` ``[G]`` members per group; returns ``[G]``."""
    return torch.zeros(count.shape[0], dtype=REWARD_DTYPE).index_add_(
        0, group_index, rewards - advantages
    ) / count.clamp_min(1)


def duplicate_experience(exp: Experience) -> Experience:
    """Deep copy of ``exp`` whose advantages / returns own their memory (they are views of a
    step-wide buffer, which a plain deepcopy would copy whole)."""
    memo: dict[int, Any] = {}
    for name in ("advantages", "returns"):
        t = getattr(exp, name)
        if t is not None:
            memo[id(t)] = t.clone()
    return copy.deepcopy(exp, memo)


def batch_outcome_scores(batch: Experiences) -> Tensor:
    """``[B]`` outcome score of each row of a collated batch.

    ``token_level_rewards.sum(-1)`` when the trainer set token-level rewards (verl's input,
    KL penalty included), else ``rewards``. Non-finite values raise, naming the row's eid.
    """
    if batch.token_level_rewards is not None:
        tlr = batch.token_level_rewards
        check_finite(tlr, batch.eids, what="token-level reward")
        return tlr.sum(dim=-1)
    if batch.rewards is None:
        raise ValueError("the batch has neither token_level_rewards nor rewards")
    check_finite(batch.rewards, batch.eids)
    return batch.rewards


class BatchedGroupAdvantage(GroupAdvantage):
    """A :class:`GroupAdvantage` that scores every group of a step at once.

    Subclasses implement :meth:`score_experiences`; both entry points run it, so each group's
    advantage has one implementation:

    * ``__call__(exps)`` (the experience pipeline): the whole step, metrics reported as
      ``group_advantages/<key>/mean|max|min`` over the groups plus the step's totals;
    * :meth:`calculate_group_advantage` (the :class:`GroupAdvantage` API): one group, its
      per-group metrics as floats (what the per-group ``GroupAdvantage.__call__`` averages).

    ``zero_singletons`` (class attribute, settable through the config's
    ``advantage_fn_args``): a task with a single experience keeps Trinity-RFT / verl's value
    (baseline 0; default ``False``), or gets advantage 0 with ``True``.
    """

    group_id_type: str = "task"
    zero_singletons: bool = False
    algorithm_name: str = "group"
    #: prefix of the per-group metrics (``<prefix>/<key>/mean|max|min``)
    metrics_prefix: str = GROUP_METRICS_PREFIX

    def group_experiences(self, exps: list[Experience]) -> dict[str, list[Experience]]:
        return group_by(exps, id_type=self.group_id_type)  # type: ignore[arg-type]

    @abstractmethod
    def score_experiences(
        self, exps: list[Experience], **options: Any
    ) -> tuple[list[Experience], dict[str, Tensor], dict[str, float]]:
        """Set ``advantages`` / ``returns`` on every experience of ``exps`` (not empty).

        Returns the kept experiences in :func:`~trinity.common.experience.group_by` order
        (without those of skipped groups), the per-group metrics as ``[G]`` tensors and the
        step's totals as floats. ``options`` are the keywords of
        :meth:`calculate_group_advantage` (e.g. GRPO's ``precomputed_std``).
        """

    def __call__(  # type: ignore[override]
        self, exps: list[Experience], **kwargs: Any
    ) -> tuple[list[Experience], dict]:
        exps = list(exps)
        if not exps:
            return [], {}
        out, per_group, per_step = self.score_experiences(exps)
        reported = self.report_metrics(per_group, self.metrics_prefix)
        reported.update(per_step)
        return out, reported

    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience], **options: Any
    ) -> tuple[list[Experience], dict]:
        """One group through :meth:`score_experiences`: the same numbers as ``__call__``.

        Returns the group's experiences (empty if the group is skipped) and its per-group
        metrics as floats (the step's totals, meaningless for one group, are left out).
        """
        exps = list(exps)
        if not exps:
            return [], {}
        out, per_group, _ = self.score_experiences(exps, **options)
        return out, {key: float(value.reshape(-1)[0]) for key, value in per_group.items()}

    @staticmethod
    def report_metrics(
        metrics: dict[str, Any], prefix: str = GROUP_METRICS_PREFIX
    ) -> dict[str, float]:
        """Floats as they are; ``[G]`` tensors as ``<prefix>/<key>/mean|max|min`` (prefix
        ``group_advantages``) over the groups, from float32 values (what
        :func:`gather_group_metrics` gives for the per-group path)."""
        out: dict[str, float] = {}
        for key, value in metrics.items():
            if not isinstance(value, Tensor):
                out[key] = float(value)
                continue
            if value.numel() == 0:
                continue
            v = value.detach().to(torch.float32).to(torch.float64)
            out[f"{prefix}/{key}/mean"] = float(v.mean())
            out[f"{prefix}/{key}/max"] = float(v.max())
            out[f"{prefix}/{key}/min"] = float(v.min())
        return out


class VectorizedGroupAdvantage(BatchedGroupAdvantage):
    """A :class:`BatchedGroupAdvantage` of one score per experience (its reward).

    Subclasses implement :meth:`vector_advantages` on tensors (``rewards [B]``,
    ``group_index [B]``). ``__call__`` accepts:

    * a list of :class:`Experience` (the experience pipeline): validates rewards, computes the
      advantages, writes ``advantages`` / ``returns`` on each experience and returns them
      grouped in :func:`~trinity.common.experience.group_by` order, without the experiences
      of skipped groups (``filtered_count``: how many);
    * a collated :class:`Experiences` batch (when an algorithm computes advantages in the
      trainer): sets ``batch.advantages`` / ``batch.returns`` ``[B, R]``; skipped groups get
      advantage 0 since rows cannot be dropped there.
    """

    @abstractmethod
    def vector_advantages(
        self, rewards: Tensor, group_index: Tensor, num_groups: int, exps: Optional[list]
    ) -> tuple[Tensor, Optional[Tensor], dict[str, Any]]:
        """Advantages of all groups at once.

        Args:
            rewards: ``[B]`` float64 rewards.
            group_index: ``[B]`` long group ids ``0 .. G-1`` in first-appearance order.
            num_groups: ``G``.
            exps: the experiences (for fields besides the reward, e.g. logprobs), or None in
                the batch path.

        Keywords given to :meth:`calculate_group_advantage` (e.g. GRPO's ``precomputed_std``)
        arrive here; a subclass that takes none refuses them, as a per-group method would.

        Returns:
            ``(advantages [B], keep [B] bool or None, metrics)``; a metric given as a ``[G]``
            tensor is per group and reported as ``group_advantages/<key>/mean|max|min``
            (see :meth:`report_metrics`), a float as it is.
        """

    def __call__(  # type: ignore[override]
        self, exps: Union[list[Experience], Experiences], **kwargs: Any
    ) -> tuple[Union[list[Experience], Experiences], dict]:
        if isinstance(exps, Experiences):
            return self._call_batch(exps)
        return super().__call__(exps, **kwargs)

    def score_experiences(
        self, exps: list[Experience], **options: Any
    ) -> tuple[list[Experience], dict[str, Tensor], dict[str, float]]:
        rewards = experience_rewards(exps, self.algorithm_name)
        group_index, num_groups = as_group_index(group_keys(exps, self.group_id_type))
        with torch.no_grad():
            adv, keep, metrics = self.vector_advantages(
                rewards, group_index, num_groups, exps, **options
            )
        write_outcome_advantages(exps, adv)
        order = torch.argsort(group_index, stable=True)
        if keep is not None:
            order = order[keep[order]]
        out = [exps[i] for i in order.tolist()]
        out = self._post_filter(out, group_index, keep, exps)
        per_group = {k: v for k, v in metrics.items() if isinstance(v, Tensor)}
        per_step = {k: float(v) for k, v in metrics.items() if not isinstance(v, Tensor)}
        if keep is not None:  # the total the experience pipeline adds up over its stages
            per_step["filtered_count"] = float((~keep).sum())
        return out, per_group, per_step

    def _post_filter(
        self,
        out: list[Experience],
        group_index: Tensor,
        keep: Optional[Tensor],
        exps: list[Experience],
    ) -> list[Experience]:
        """Hook to adjust the output list (e.g. duplicate groups to refill skipped ones)."""
        return out

    def _call_batch(self, batch: Experiences) -> tuple[Experiences, dict]:
        scores = batch_outcome_scores(batch).to(REWARD_DTYPE)
        keys = [e.tid if self.group_id_type == "task" else e.rid for e in batch.eids]
        group_index, num_groups = as_group_index(keys, device=scores.device)
        with torch.no_grad():
            adv, keep, metrics = self.vector_advantages(scores, group_index, num_groups, None)
            if keep is not None:
                adv = torch.where(keep, adv, torch.zeros_like(adv))
            tokens = broadcast_to_tokens(adv.to(ADV_DTYPE), batch.action_mask)
        batch.advantages = tokens
        batch.returns = tokens.clone()
        return batch, self.report_metrics(metrics, self.metrics_prefix)

    @staticmethod
    def group_metric_means(stats: GroupStats, singleton_unit: bool = False) -> dict[str, Tensor]:
        """Each group's reward mean and std as ``[G]`` tensors (reported as
        ``group_advantages/reward_mean/mean`` ...). With ``singleton_unit`` a one-member
        group reports mean 0 and std 1: the baseline and scale GRPO uses for it
        (Trinity-RFT's metric)."""
        if not singleton_unit:
            return {"reward_mean": stats.mean, "reward_std": stats.std}
        single = stats.count == 1
        return {
            "reward_mean": torch.where(single, torch.zeros_like(stats.mean), stats.mean),
            "reward_std": torch.where(single, torch.ones_like(stats.std), stats.std),
        }
