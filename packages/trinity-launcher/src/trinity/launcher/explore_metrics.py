"""What the explorer reports: the scalars of an explore step's experiences and of an evaluation.

:func:`rollout_metrics` summarises one step's experiences (reward, lengths, tokens, model
version, every numeric ``Experience.metrics`` key); :func:`eval_metrics` turns an evaluation's
task results into ``eval/<task set>/<key>/{mean,best,worst,std}@k``. Pure functions over
experiences and results, so they are tested by hand-computed values without any engine.
"""

from __future__ import annotations

import math
import numbers
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from trinity.common.experience import Experience

if TYPE_CHECKING:  # the runner imports nothing of this module
    from trinity.launcher.runner import TaskResult

__all__ = ["eval_metrics", "rollout_metrics"]


def _number(value: Any) -> Optional[float]:
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def rollout_metrics(exps: Sequence[Experience]) -> dict[str, float]:
    """Scalars of one step's experiences: reward, lengths, tokens, model version, and the
    mean of every numeric ``Experience.metrics`` key (``rollout/<key>/mean``)."""
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
    out["rollout/prompt_length/mean"] = _mean(prompt)
    out["rollout/response_tokens"] = float(sum(response))
    out["rollout/total_tokens"] = float(sum(len(e.tokens) for e in exps))
    versions = [e.model_version for e in exps if e.model_version is not None]
    if versions:
        out["rollout/model_version"] = float(max(versions))
    sums: dict[str, list[float]] = {}
    for exp in exps:
        for key, value in (exp.metrics or {}).items():
            number = _number(value)
            if number is not None:
                sums.setdefault(str(key), []).append(number)
    for key, values in sums.items():
        out[f"rollout/{key}/mean"] = _mean(values)
    return out


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
