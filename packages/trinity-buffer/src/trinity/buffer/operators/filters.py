"""Built-in filters: drop or mask experiences that would hurt (or not help) training.

* ``reward_filter`` – drop experiences whose reward is below a threshold.
* ``reward_std_filter`` – drop task groups whose rewards barely vary (no group-relative signal).
* ``dapo_dynamic_sampling`` – DAPO dynamic sampling: drop groups whose outcomes are all equal,
  and optionally hold kept groups back until a full training batch is collected.
* ``invalid_reward_filter`` – drop experiences whose reward is missing, NaN or infinite.
* ``mask_response_truncated`` – DAPO overlong filtering: zero the action mask of responses cut
  off by the length limit, so they add no gradient.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from trinity.buffer.operators.experience_operator import EXPERIENCE_OPERATORS, ExperienceOperator
from trinity.common.experience import Experience, group_by

__all__ = [
    "RewardFilter",
    "RewardSTDFilter",
    "DAPODynamicSamplingFilter",
    "InvalidRewardFilter",
    "MaskResponseTruncatedOperator",
]


def _finite(value: Any) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def _pstd(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


@EXPERIENCE_OPERATORS.register_module("reward_filter")
class RewardFilter(ExperienceOperator):
    """Keep experiences whose reward is ``>= threshold``.

    Unlike the guide's minimal example, a missing or NaN reward is dropped instead of raising
    ``TypeError`` / passing silently: neither compares meaningfully with a threshold.
    """

    def __init__(self, threshold: float = 0.0) -> None:
        self.threshold = float(threshold)

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict]:
        kept = [e for e in exps if e.reward is not None and e.reward >= self.threshold]
        return kept, {"filtered_count": len(exps) - len(kept)}


@EXPERIENCE_OPERATORS.register_module("reward_std_filter")
class RewardSTDFilter(ExperienceOperator):
    """Drop task groups (same ``eid.tid``) whose reward standard deviation is ``<= threshold``.

    Group-relative advantages (GRPO & co.) are zero for a group whose rewards are all the
    same, so such groups only cost compute. Singletons have no spread and are dropped, and so
    are groups holding a missing or non-finite reward (their spread is undefined).
    """

    def __init__(self, threshold: float = 0.0) -> None:
        self.threshold = float(threshold)

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict]:
        kept: list[Experience] = []
        dropped_groups = 0
        for group in group_by(exps, "task").values():
            rewards = [e.reward for e in group]
            if len(group) < 2 or not all(_finite(r) for r in rewards):
                dropped_groups += 1
                continue
            if _pstd(rewards) <= self.threshold:  # type: ignore[arg-type]
                dropped_groups += 1
                continue
            kept.extend(group)
        return kept, {
            "filtered_count": len(exps) - len(kept),
            "dropped_group_count": dropped_groups,
        }


@EXPERIENCE_OPERATORS.register_module("dapo_dynamic_sampling")
class DAPODynamicSamplingFilter(ExperienceOperator):
    """DAPO dynamic sampling (arXiv:2503.14476, Sec. 3.2).

    A task group (same ``eid.tid``) whose outcomes are all equal (all correct or all wrong)
    gives zero group-relative advantage, so it is dropped. DAPO then *keeps sampling* until
    the training batch is full of informative groups: with ``batch_size`` set, kept groups are
    held back across calls (explore steps) and released only once at least ``batch_size``
    experiences are collected; the call returns whole groups, in arrival order, and keeps the
    remainder for the next batch. Without ``batch_size`` the operator only filters, as
    Trinity-RFT's does, and the trainer's reader waits for a full batch.

    Args:
        metric_key: compare ``exp.metrics[metric_key]`` (e.g. ``"accuracy"``, so a
            length-shaped reward does not make a uniform group look mixed) instead of the
            reward; experiences lacking the metric fall back to their reward.
        batch_size: experiences per released batch (``buffer.train_batch_size``); ``None`` or
            0 releases every kept group immediately.
        max_num_gen_batches: with ``batch_size``, give up (``RuntimeError``) after this many
            calls without filling a batch, as verl's DAPO does: the data are then too easy or
            too hard for the model. 0 waits forever.
        tolerance: outcomes closer than this count as equal.
    """

    def __init__(
        self,
        metric_key: Optional[str] = None,
        batch_size: Optional[int] = None,
        max_num_gen_batches: int = 0,
        tolerance: float = 1e-6,
    ) -> None:
        if batch_size is not None and batch_size < 0:
            raise ValueError(f"batch_size must be >= 0 or None, got {batch_size}")
        if max_num_gen_batches < 0:
            raise ValueError(f"max_num_gen_batches must be >= 0, got {max_num_gen_batches}")
        self.metric_key = metric_key
        self.batch_size = batch_size or 0
        self.max_num_gen_batches = max_num_gen_batches
        self.tolerance = float(tolerance)
        self._pending: list[list[Experience]] = []
        self._num_gen_batches = 0

    @property
    def pending_count(self) -> int:
        """Experiences kept but not released yet (waiting for a full batch)."""
        return sum(len(g) for g in self._pending)

    def _outcome(self, exp: Experience) -> float:
        if self.metric_key is not None and exp.metrics and self.metric_key in exp.metrics:
            return float(exp.metrics[self.metric_key])
        if exp.reward is None:
            what = f"metric {self.metric_key!r} or a reward" if self.metric_key else "a reward"
            raise ValueError(
                f"dapo_dynamic_sampling: experience {exp.eid} has no {what}; put "
                "invalid_reward_filter before it to drop such experiences"
            )
        return float(exp.reward)

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict]:
        kept_groups: list[list[Experience]] = []
        dropped_groups = 0
        for group in group_by(exps, "task").values():
            outcomes = [self._outcome(e) for e in group]
            if not all(math.isfinite(o) for o in outcomes):
                dropped_groups += 1  # undefined spread: no usable signal
            elif max(outcomes) - min(outcomes) <= self.tolerance:
                dropped_groups += 1
            else:
                kept_groups.append(group)
        kept_count = sum(len(g) for g in kept_groups)
        metrics: dict[str, float] = {
            "filtered_count": len(exps) - kept_count,
            "dropped_group_count": dropped_groups,
            "kept_group_count": len(kept_groups),
        }
        if not self.batch_size:
            return [e for g in kept_groups for e in g], metrics

        self._pending.extend(kept_groups)
        self._num_gen_batches += 1
        metrics["num_gen_batches"] = self._num_gen_batches
        if self.pending_count < self.batch_size:
            metrics["pending_count"] = self.pending_count
            metrics["batch_full"] = 0
            if self.max_num_gen_batches and self._num_gen_batches >= self.max_num_gen_batches:
                raise RuntimeError(
                    f"dapo_dynamic_sampling: {self._num_gen_batches} explore steps kept only "
                    f"{self.pending_count} of the {self.batch_size} experiences a batch needs "
                    f"(max_num_gen_batches={self.max_num_gen_batches}); the tasks are too easy "
                    "or too hard for the model, or raise max_num_gen_batches (0 = no limit)"
                )
            return [], metrics

        released: list[Experience] = []
        while self._pending and len(released) < self.batch_size:
            released.extend(self._pending.pop(0))
        self._num_gen_batches = 0
        metrics["pending_count"] = self.pending_count
        metrics["batch_full"] = 1
        return released, metrics

    def close(self) -> None:
        # Held-back groups belong to no batch any more (training is over): drop them.
        self._pending.clear()
        self._num_gen_batches = 0


@EXPERIENCE_OPERATORS.register_module("invalid_reward_filter")
class InvalidRewardFilter(ExperienceOperator):
    """Drop experiences whose reward is ``None``, NaN or ±inf, counting each kind.

    A single NaN reward turns a whole group's normalized advantages (and then the loss) into
    NaN, so such experiences must not reach the trainer; the counts show which reward function
    misbehaves.
    """

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict]:
        kept: list[Experience] = []
        none_count = nan_count = inf_count = 0
        for exp in exps:
            reward = exp.reward
            if reward is None:
                none_count += 1
            elif math.isnan(reward):
                nan_count += 1
            elif math.isinf(reward):
                inf_count += 1
            else:
                kept.append(exp)
        return kept, {
            "filtered_count": len(exps) - len(kept),
            "none_reward_count": none_count,
            "nan_reward_count": nan_count,
            "inf_reward_count": inf_count,
        }


@EXPERIENCE_OPERATORS.register_module("mask_response_truncated")
class MaskResponseTruncatedOperator(ExperienceOperator):
    """DAPO overlong filtering (Sec. 3.4): zero ``action_mask`` of truncated responses.

    A response cut off by ``max_response_tokens`` is neither right nor wrong; masking it keeps
    it out of the policy gradient without shrinking the batch. The experience and its reward
    stay (as in Trinity-RFT), so group statistics computed later still see the whole group.
    """

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict]:
        masked = 0
        for exp in exps:
            if exp.truncate_status == "response_truncated" and exp.action_mask is not None:
                exp.action_mask = torch.zeros_like(exp.action_mask, dtype=torch.bool)
                masked += 1
        return exps, {"masked_truncated_count": masked}
