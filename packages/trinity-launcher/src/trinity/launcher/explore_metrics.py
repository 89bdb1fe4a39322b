"""What the explorer reports: the scalars of an explore step's experiences and of an evaluation.

:func:`rollout_metrics` summarises one step's experiences (reward, lengths, tokens, model
version, every numeric ``Experience.metrics`` key, and the two signs that a run cannot learn:
``rollout/response_length/clip_ratio`` and ``rollout/identical_reward_groups``);
:func:`eval_metrics` turns an evaluation's task results into
``eval/<task set>/<key>/{mean,best,worst,std}@k``. Pure functions over experiences and results,
so they are tested by hand-computed values without any engine.

:class:`LearningSignalWatch` is the one stateful piece: it follows those two ratios over explore
steps and warns, once each, when one of them stays at 100% for :data:`STALL_STEPS` steps in a
row (every answer cut at ``max_response_tokens``, or every group's rewards identical, so that
group-relative advantages are all zero): such a run reports zero loss and an unchanging reward
and would otherwise pass silently. From then on the metrics ``rollout/all_clipped_steps`` and
``rollout/all_identical_reward_steps`` (consecutive steps at 100%, on every step) count it.
"""

from __future__ import annotations

import math
import numbers
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from trinity.common.experience import Experience
from trinity.utils.log import get_logger

if TYPE_CHECKING:  # the runner imports nothing of this module
    from trinity.launcher.runner import TaskResult

__all__ = ["STALL_STEPS", "LearningSignalWatch", "eval_metrics", "rollout_metrics"]

logger = get_logger(__name__)

#: Consecutive explore steps with every response clipped, or every reward group identical,
#: before :class:`LearningSignalWatch` warns. Ten, not fewer: the quickstart, which learns,
#: has steps where all 128 of its 2-token answers are clipped, or all 16 groups answered
#: alike once it is right ~99% of the time (measured runs of up to 4 and 1 such steps; at
#: that rate a run of 5 comes every few hundred steps, a run of 10 practically never).
STALL_STEPS = 10
#: Rewards of a group closer than this count as identical (group advantages are then ~0).
_IDENTICAL_TOLERANCE = 1e-8


def _number(value: Any) -> Optional[float]:
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _is_clipped(exp: Experience) -> bool:
    """Whether the engine stopped ``exp``'s response at the response-token limit: every
    rollout engine (vLLM, transformers, external, the test double) marks a response whose
    finish reason is ``"length"`` with ``truncate_status="response_truncated"``."""
    return exp.truncate_status == "response_truncated"


def _identical_reward_groups(exps: Sequence[Experience]) -> tuple[int, int]:
    """``(groups with identical rewards, groups)`` over the step's reward groups.

    A group is what GRPO-like advantages normalise over: the experiences of one task
    (``eid.tid``, the task's ``repeat_times`` runs in this step). Only groups of two or more
    rewarded experiences count; with ``repeat_times: 1`` there are none.
    """
    groups: dict[str, list[float]] = {}
    for exp in exps:
        reward = _number(exp.reward)
        if reward is not None:
            groups.setdefault(exp.eid.tid, []).append(reward)
    sizable = [rewards for rewards in groups.values() if len(rewards) >= 2]
    same = sum(1 for r in sizable if max(r) - min(r) <= _IDENTICAL_TOLERANCE)
    return same, len(sizable)


def rollout_metrics(exps: Sequence[Experience]) -> dict[str, float]:
    """Scalars of one step's experiences: reward, lengths, tokens, model version, the mean of
    every numeric ``Experience.metrics`` key (``rollout/<key>/mean``), and

    * ``rollout/response_length/clip_ratio``: the share of responses cut at the response-token
      limit (``truncate_status == "response_truncated"``; verl's ``response_length/clip_ratio``);
    * ``rollout/identical_reward_groups``: the share of reward groups (a task's runs, two or
      more) whose rewards are all equal, so their group-relative advantages are zero; with
      ``rollout/reward_groups``, their number (both absent when no group has two runs).
    """
    out: dict[str, float] = {"rollout/experiences": float(len(exps))}
    if not exps:
        return out
    rewards = [r for r in (_number(e.reward) for e in exps) if r is not None]
    if rewards:
        out["rollout/reward/mean"] = _mean(rewards)
        out["rollout/reward/std"] = statistics.pstdev(rewards)
        out["rollout/reward/max"] = max(rewards)
        out["rollout/reward/min"] = min(rewards)
    response = [e.response_length for e in exps]
    prompt = [int(e.prompt_length) for e in exps]
    out["rollout/response_length/mean"] = _mean(response)
    out["rollout/response_length/max"] = float(max(response))
    out["rollout/response_length/min"] = float(min(response))
    out["rollout/response_length/clip_ratio"] = sum(map(_is_clipped, exps)) / len(exps)
    same, groups = _identical_reward_groups(exps)
    if groups:
        out["rollout/identical_reward_groups"] = same / groups
        out["rollout/reward_groups"] = float(groups)
    out["rollout/prompt_length/mean"] = _mean(prompt)
    out["rollout/response_tokens"] = float(sum(response))
    out["rollout/total_tokens"] = float(sum(len(e.tokens) for e in exps))
    versions = [e.model_version for e in exps if e.model_version is not None]
    if versions:
        out["rollout/model_version"] = float(max(versions))
        out["rollout/model_version/min"] = float(min(versions))
        # experiences whose request spanned a weight update (sync_style fully_async)
        spanned = [e for e in exps if "model_version_last" in (e.info or {})]
        out["rollout/in_flight_updated"] = float(len(spanned))
        if spanned:
            out["rollout/model_version/last_max"] = float(
                max(e.info["model_version_last"] for e in spanned)
            )
        # how long those requests stood frozen while the weights were loaded
        paused = [float(e.info["paused_s"]) for e in exps if "paused_s" in (e.info or {})]
        out["rollout/paused_requests"] = float(len(paused))
        if paused:
            out["rollout/time_paused/mean"] = _mean(paused)
            out["rollout/time_paused/max"] = max(paused)
    sums: dict[str, list[float]] = {}
    for exp in exps:
        for key, value in (exp.metrics or {}).items():
            number = _number(value)
            if number is not None:
                sums.setdefault(str(key), []).append(number)
    for key, values in sums.items():
        out[f"rollout/{key}/mean"] = _mean(values)
    return out


class LearningSignalWatch:
    """Warns when a run cannot learn, from the step metrics of :func:`rollout_metrics`.

    Two conditions, each followed over consecutive explore steps:

    * every response hit the response-token limit (``rollout/response_length/clip_ratio`` is 1):
      no answer is complete, so rewards cannot tell answers apart;
    * every reward group had identical rewards (``rollout/identical_reward_groups`` is 1):
      group-relative advantages (GRPO, RLOO, OPMD ...) are all zero, so the loss is zero and
      the policy does not change.

    When one of them has held for ``steps`` steps in a row, one warning says so and what to
    change (once per condition and run); :meth:`update` returns on every step the current run
    length of each, ``rollout/all_clipped_steps`` and ``rollout/all_identical_reward_steps``,
    so the metrics keep counting after the warning. A step that does not report a ratio (no
    experiences; no group of two runs) leaves its count as it is.

    Args:
        steps: steps in a row before the warning (default :data:`STALL_STEPS`).
        max_response_tokens: the response limit, named in the warning.
        log: the logger that warns (default: this module's).
    """

    CLIPPED = "rollout/all_clipped_steps"
    IDENTICAL = "rollout/all_identical_reward_steps"

    def __init__(
        self,
        steps: int = STALL_STEPS,
        max_response_tokens: Optional[int] = None,
        log: Any = None,
    ) -> None:
        if steps < 1:
            raise ValueError(f"steps={steps} is invalid; allowed: an integer >= 1")
        self.steps = int(steps)
        self.max_response_tokens = max_response_tokens
        self.log = log if log is not None else logger
        self.counts = {self.CLIPPED: 0, self.IDENTICAL: 0}
        self.warned: set[str] = set()

    def update(self, metrics: dict[str, Any]) -> dict[str, float]:
        """Take one explore step's metrics; return the two counts (and warn when due)."""
        sources = {
            self.CLIPPED: "rollout/response_length/clip_ratio",
            self.IDENTICAL: "rollout/identical_reward_groups",
        }
        for name, source in sources.items():
            ratio = _number(metrics.get(source))
            if ratio is None:
                continue
            self.counts[name] = self.counts[name] + 1 if ratio >= 1.0 else 0
            if self.counts[name] >= self.steps and name not in self.warned:
                self.warned.add(name)
                self.log.warning(self._message(name, metrics))
        return {name: float(count) for name, count in self.counts.items()}

    def _message(self, name: str, metrics: dict[str, Any]) -> str:
        if name == self.CLIPPED:
            limit = (
                f" ({self.max_response_tokens} tokens)"
                if self.max_response_tokens is not None
                else ""
            )
            return (
                f"every response of the last {self.steps} explore steps stopped at the "
                f"response limit{limit} before the model ended it: the answers may be "
                "incomplete, and a reward that needs a whole answer gives no signal. If they "
                "need more room, raise model.max_response_tokens; if the model never ends an "
                "answer, check its EOS token and chat template. Counted from now on in "
                f"{self.CLIPPED}"
            )
        reward = _number(metrics.get("rollout/reward/mean"))
        same = f" (mean reward {reward:.4g})" if reward is not None else ""
        return (
            f"every task of the last {self.steps} explore steps got the same reward in all "
            f"of its runs{same}: group-relative advantages are all zero, so the loss is zero "
            "and the policy does not change. If that is the best reward, the task is learned; "
            "otherwise check the reward function on a few answers, or raise "
            "algorithm.repeat_times or the sampling temperature. Counted from now on in "
            f"{self.IDENTICAL}"
        )


def _per_run_values(exps: Sequence[Experience]) -> dict[str, list[float]]:
    """``key -> [value of run 0, value of run 1, ...]`` for one task (a run that produced
    several experiences, e.g. one per turn, counts with the mean over them)."""
    runs: dict[Any, dict[str, list[float]]] = {}
    for exp in exps:
        values = runs.setdefault(exp.eid.run, {})
        reward = _number(exp.reward)
        if reward is not None:
            values.setdefault("reward", []).append(reward)
        for key, value in (exp.metrics or {}).items():
            number = _number(value)
            if number is not None:
                values.setdefault(str(key), []).append(number)
    out: dict[str, list[float]] = {}
    for run in sorted(runs, key=str):
        for key, values in runs[run].items():
            out.setdefault(key, []).append(_mean(values))
    return out


def eval_metrics(name: str, results: Sequence[TaskResult], repeat_times: int) -> dict[str, float]:
    """Evaluation scalars of one task set.

    For the reward and every numeric ``Experience.metrics`` key: per task the mean, max, min
    and population standard deviation over its runs; then each averaged over the tasks that
    report the key. Named ``eval/<name>/<key>/{mean,best,worst,std}@<repeat_times>``. Failed
    tasks are left out (and counted in ``eval/<name>/failed_tasks``).
    """
    k = int(repeat_times)
    per_key: dict[str, list[tuple[float, float, float, float]]] = {}
    versions: list[int] = []
    for result in results:
        if not result.ok:
            continue
        versions += [e.model_version for e in result.experiences if e.model_version is not None]
        for key, values in _per_run_values(result.experiences).items():
            per_key.setdefault(key, []).append(
                (_mean(values), max(values), min(values), statistics.pstdev(values))
            )
    ok = sum(1 for r in results if r.ok)
    out: dict[str, float] = {
        f"eval/{name}/tasks": float(len(results)),
        f"eval/{name}/finished_tasks": float(ok),
        f"eval/{name}/failed_tasks": float(len(results) - ok),
    }
    if versions:
        out[f"eval/{name}/model_version"] = float(max(versions))
    for key, stats in per_key.items():
        prefix = f"eval/{name}/{key}"
        out[f"{prefix}/mean@{k}"] = _mean([s[0] for s in stats])
        out[f"{prefix}/best@{k}"] = _mean([s[1] for s in stats])
        out[f"{prefix}/worst@{k}"] = _mean([s[2] for s in stats])
        out[f"{prefix}/std@{k}"] = _mean([s[3] for s in stats])
    return out


def _eval_line(step: int, name: str, metrics: dict[str, float], k: int) -> str:
    text = f"eval step {step} {name}: "
    mean = metrics.get(f"eval/{name}/reward/mean@{k}")
    text += f"reward mean@{k} {mean:.4f}" if mean is not None else "no reward"
    best = metrics.get(f"eval/{name}/reward/best@{k}")
    if best is not None and k > 1:
        text += f", best@{k} {best:.4f}"
    failed = metrics.get(f"eval/{name}/failed_tasks", 0.0)
    if failed:
        text += f", {failed:.0f} failed"
    return text
