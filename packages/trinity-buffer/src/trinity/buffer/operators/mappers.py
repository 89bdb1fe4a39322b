"""Built-in mappers: rewrite experiences in place without dropping any.

* ``reward_shaping_mapper`` – fold per-experience statistics (``exp.info[...]``, e.g. a
  quality score or Data-Juicer stats) into the reward.
* ``pass_rate_calculator`` – report each task's pass rate for the task-set scheduler.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Optional

from trinity.buffer.operators.experience_operator import EXPERIENCE_OPERATORS, ExperienceOperator
from trinity.common.config import RewardShapingConfig
from trinity.common.constants import SELECTOR_METRIC, OpType
from trinity.common.experience import Experience

__all__ = ["RewardShapingMapper", "PassRateCalculator", "TASKSET_SCHEDULE_METRIC"]

#: Metric key under which ``pass_rate_calculator`` reports ``{task key: pass rate}``; the
#: pipeline passes it through unprefixed for the task-set scheduler (Trinity-RFT's name).
TASKSET_SCHEDULE_METRIC = "taskset_schedule"

_OPS: dict[str, Callable[[float, float], float]] = {
    "ADD": operator.add,
    "SUB": operator.sub,
    "MUL": operator.mul,
    "DIV": operator.truediv,
}


@EXPERIENCE_OPERATORS.register_module("reward_shaping_mapper")
class RewardShapingMapper(ExperienceOperator):
    """Reshape rewards with statistics stored in ``exp.info``.

    Args:
        reward_shaping_configs: applied in order; each a
            :class:`~trinity.common.config.RewardShapingConfig` or a dict with

            - ``stats_key``: key of ``exp.info`` holding the statistic;
            - ``op_type``: ``ADD``, ``SUB``, ``MUL`` or ``DIV`` (an
              :class:`~trinity.common.constants.OpType` or its name, case-insensitive, default
              ``ADD``): ``reward = reward <op> weight * info[stats_key]``;
            - ``weight``: factor on the statistic (default 1.0).
        report_reward_diff: report ``reward_diff/mean|min|max`` (new minus old reward; 0 for
            an experience without a reward, and all 0 for an empty step), as Trinity-RFT 0.6's
            mapper does; ``False`` reports no metrics (its earlier versions).

    Returns shaped *copies* (shallow: tensors are shared): the input experiences keep their
    rewards, as in Trinity-RFT. An experience without the statistic (or without a reward)
    keeps its reward unchanged; a division by zero is skipped. Unlike Trinity-RFT,
    experiences without a reward are kept rather than dropped: a mapper should not filter
    (use ``invalid_reward_filter``). Unknown ``op_type`` values are rejected when the
    pipeline is built, not mid-training.
    """

    def __init__(
        self,
        reward_shaping_configs: Optional[list[Any]] = None,
        report_reward_diff: bool = True,
    ) -> None:
        self.report_reward_diff = report_reward_diff
        self.reward_shaping_configs: list[dict[str, Any]] = []
        for i, cfg in enumerate(reward_shaping_configs or []):
            if isinstance(cfg, RewardShapingConfig):
                cfg = {"stats_key": cfg.stats_key, "op_type": cfg.op_type, "weight": cfg.weight}
            if not isinstance(cfg, Mapping):
                raise TypeError(
                    f"reward_shaping_configs[{i}] must be a RewardShapingConfig or a mapping, "
                    f"got {cfg!r}"
                )
            op = cfg.get("op_type", "ADD")
            op_type = (op.value if isinstance(op, OpType) else str(op)).upper()
            if op_type not in _OPS:
                raise ValueError(
                    f"reward_shaping_configs[{i}].op_type is {cfg.get('op_type')!r}; "
                    f"expected one of {sorted(_OPS)}"
                )
            self.reward_shaping_configs.append(
                {
                    "stats_key": cfg.get("stats_key"),
                    "op_type": op_type,
                    "weight": float(cfg.get("weight", 1.0)),
                }
            )

    def _shape(self, reward: float, info: Mapping[str, Any], cfg: dict[str, Any]) -> float:
        key = cfg["stats_key"]
        if key is None or key not in info or info[key] is None:
            return reward
        value = cfg["weight"] * float(info[key])
        if cfg["op_type"] == "DIV" and value == 0:
            return reward
        return _OPS[cfg["op_type"]](reward, value)

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict]:
        diffs: list[float] = []
        out: list[Experience] = []
        for exp in exps:
            if exp.reward is None:
                out.append(exp)
                diffs.append(0.0)
                continue
            before = exp.reward
            reward = before
            for cfg in self.reward_shaping_configs:
                reward = self._shape(reward, exp.info or {}, cfg)
            shaped = copy.copy(exp)
            shaped.reward = float(reward)
            out.append(shaped)
            diffs.append(shaped.reward - before)
        metrics: dict[str, float] = {}
        if self.report_reward_diff:
            diffs = diffs or [0.0]
            metrics = {
                "reward_diff/mean": sum(diffs) / len(diffs),
                "reward_diff/min": min(diffs),
                "reward_diff/max": max(diffs),
            }
        return out, metrics


def _task_key(exp: Experience) -> Hashable:
    """The task an experience belongs to, as the task-set scheduler names it.

    Trinity-RFT's runner records the task's position as ``info["task_index"]`` (an int, or
    ``{"taskset_id": ..., "index": ...}``); without it the explore-step task id stands in.
    """
    index = (exp.info or {}).get("task_index")
    if index is None:
        return exp.eid.task
    if isinstance(index, Mapping):
        return (index.get("taskset_id"), index.get("index"))
    if isinstance(index, list):
        return tuple(index)
    return index


@EXPERIENCE_OPERATORS.register_module("pass_rate_calculator")
class PassRateCalculator(ExperienceOperator):
    """Compute each task's pass rate and report it for curriculum scheduling.

    A task's pass rate is the mean reward of its runs (Trinity-RFT's definition) or, with
    ``success_threshold`` set, the fraction of runs whose reward is ``>= success_threshold``.
    Tasks that carry their task set (``info["task_index"] = {"taskset_id", "index"}``, as the
    explorer records it) are reported under ``selector_metric`` in Trinity-RFT 0.6's shape,
    ``{taskset_id: {"indices": [...], "values": [...]}}``; any other task key (see
    :func:`_task_key`) under ``taskset_schedule``, ``{key: pass rate}``. Experiences pass
    through unchanged.
    """

    def __init__(self, success_threshold: Optional[float] = None) -> None:
        self.success_threshold = success_threshold

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict]:
        per_task: dict[Hashable, list[float]] = {}
        for exp in exps:
            if exp.reward is None or exp.reward != exp.reward:  # no usable outcome
                continue
            if self.success_threshold is None:
                score = exp.reward
            else:
                score = float(exp.reward >= self.success_threshold)
            per_task.setdefault(_task_key(exp), []).append(score)
        rates = {key: sum(v) / len(v) for key, v in per_task.items()}
        by_taskset: dict[Any, dict[str, list]] = {}
        bare: dict[Hashable, float] = {}
        for key, rate in rates.items():
            if isinstance(key, tuple) and len(key) == 2 and None not in key:
                entry = by_taskset.setdefault(key[0], {"indices": [], "values": []})
                entry["indices"].append(key[1])
                entry["values"].append(rate)
            else:
                bare[key] = rate
        metrics: dict[str, Any] = {"task_count": len(rates)}
        if by_taskset:
            metrics[SELECTOR_METRIC] = by_taskset
        if bare or not by_taskset:
            metrics[TASKSET_SCHEDULE_METRIC] = bare
        if rates:
            metrics["pass_rate/mean"] = sum(rates.values()) / len(rates)
        return exps, metrics
