"""Step-wise GRPO advantage (``"step_wise_grpo"``) for multi-step (agentic) tasks.

A multi-step workflow turns one run of a task into several experiences, one per step (turn),
sharing ``eid.task`` and ``eid.run`` and numbered by ``eid.step``. The reward of the run's last
step is the episode return. GRPO is applied across the runs of each task on those returns, and
each run's advantage is broadcast to every step of the run (Trinity-RFT's
``StepWiseGRPOAdvantageFn``, inspired by rLLM): earlier steps get credit for where the episode
ended up. Only the last step of a run needs a reward.

"Last step" is the run's last experience in input order, as in Trinity-RFT (workflows emit
steps in order).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from trinity.algorithm.advantage_fn._vectorized import (
    REWARD_DTYPE,
    VectorizedGroupAdvantage,
    experience_rewards,
    group_keys,
    reference_group_scores,
    write_outcome_advantages,
)
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN, GroupAdvantage
from trinity.algorithm.advantage_fn.functional import as_group_index, group_stats, grpo_advantages
from trinity.algorithm.args import ComponentArgs, Field, NonNegFloat, PosFloat, StdLevel
from trinity.common.experience import Experience, group_by

__all__ = ["StepWiseGRPOAdvantageFn"]

_STD_LEVELS = ("group", "batch", "none")


@ADVANTAGE_FN.register_module("step_wise_grpo")
class StepWiseGRPOAdvantageFn(GroupAdvantage):
    """GRPO over episode returns, broadcast to every step of each run.

    Args:
        epsilon: added to the std.
        enable_step_norm: divide each run's advantage by its number of steps, so long
            trajectories do not dominate the loss.
        std_cal_level: ``"group"`` (std over the task's runs), ``"batch"`` (std over every
            run's return in the step; the mean stays per task) or ``"none"`` (no std
            division).
        std_threshold: if set, tasks whose return std is ``<=`` it (and one-run tasks) are
            dropped.

    Metrics: ``reward_mean`` / ``reward_std`` (means over tasks of the returns' mean / std),
    ``experience_count``, ``filtered_count``, ``skipped_group_ratio``. A task with a single run
    gets Trinity-RFT's ``return / (1 + epsilon)`` (``zero_singletons=True`` gives 0).
    """

    class Args(ComponentArgs):
        """``advantage_fn_args`` of ``step_wise_grpo``."""

        epsilon: PosFloat = Field(1e-6, description="Added to the std before dividing.")
        enable_step_norm: bool = Field(False, description="Divide by the number of steps.")
        std_cal_level: StdLevel = Field("group", description="group, batch or none.")
        std_threshold: Optional[NonNegFloat] = Field(
            None, description="Drop groups whose reward std is at or below it."
        )

    zero_singletons: bool = False
    algorithm_name = "step_wise_grpo"

    def __init__(
        self,
        epsilon: float = 1e-6,
        enable_step_norm: bool = False,
        std_cal_level: str = "group",
        std_threshold: Optional[float] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if std_cal_level not in _STD_LEVELS:
            raise ValueError(f"std_cal_level must be one of {_STD_LEVELS}, got {std_cal_level!r}")
        self.epsilon = float(epsilon)
        self.enable_step_norm = enable_step_norm
        self.std_cal_level = std_cal_level
        self.std_threshold = std_threshold

    def group_experiences(self, exps: list[Experience]) -> dict[str, list[Experience]]:
        return group_by(exps, id_type="task")

    # ---------------------------------------------------------------- per-group reference
    def calculate_group_advantage(
        self,
        group_id: str,
        exps: list[Experience],
        precomputed_std: Optional[Tensor] = None,
    ) -> tuple[list[Experience], dict]:
        """One task, written plainly; same numbers as ``__call__``.

        ``precomputed_std``: the batch-level std for ``std_cal_level="batch"``.
        """
        with torch.no_grad():
            runs = group_by(exps, id_type="run")
            last = [steps[-1] for steps in runs.values()]
            rewards = experience_rewards(last, self.algorithm_name)
            n = len(last)
            mean = rewards.mean()
            std = rewards.std() if n > 1 else torch.tensor(0.0, dtype=REWARD_DTYPE)
            metrics = {"reward_mean": float(mean), "reward_std": float(std)}
            skip = self.std_threshold is not None and (n == 1 or bool(std <= self.std_threshold))
            metrics["skipped_count_per_group"] = float(len(exps)) if skip else 0.0
            if skip:
                return [], metrics
            scores = reference_group_scores(
                rewards,
                mean,
                std,
                zero_singletons=self.zero_singletons,
                std_cal_level=self.std_cal_level,
                epsilon=self.epsilon,
                precomputed_std=precomputed_std,
            )
            out: list[Experience] = []
            for steps, score in zip(runs.values(), scores, strict=True):
                if self.enable_step_norm:
                    score = score / len(steps)
                for exp in steps:
                    exp.advantages = score.float() * exp.action_mask
                    exp.returns = exp.advantages.clone()
                out.extend(steps)
        return out, metrics

    # ---------------------------------------------------------------- vectorized path
    def __call__(  # type: ignore[override]
        self, exps: list[Experience], **kwargs: Any
    ) -> tuple[list[Experience], dict]:
        """All tasks of the step at once: runs and tasks numbered, one GRPO over run returns.

        Returns the kept experiences ordered task by task, run by run (the per-group order).
        """
        exps = list(exps)
        if not exps:
            return [], {}
        run_idx, n_runs = as_group_index(group_keys(exps, "run"))
        task_idx, n_tasks = as_group_index(group_keys(exps, "task"))
        positions = torch.arange(len(exps))
        last = torch.full((n_runs,), -1, dtype=torch.long).scatter_reduce_(
            0, run_idx, positions, "amax"
        )
        last_list = last.tolist()
        rewards = experience_rewards([exps[i] for i in last_list], self.algorithm_name)
        run_task = task_idx[last]
        with torch.no_grad():
            stats = group_stats(rewards, run_task, n_tasks)
            batch_std = None
            if self.std_cal_level == "batch":
                batch_std = rewards.std() if n_runs > 1 else torch.tensor(1.0)
            scores = grpo_advantages(
                rewards,
                run_task,
                epsilon=self.epsilon,
                norm_by_std=self.std_cal_level != "none",
                batch_std=batch_std,
                zero_singletons=self.zero_singletons,
                stats=stats,
            )
            if self.enable_step_norm:
                scores = scores / torch.bincount(run_idx, minlength=n_runs).to(scores.dtype)
            write_outcome_advantages(exps, scores[run_idx])
        skipped = torch.zeros(n_tasks, dtype=torch.bool)
        if self.std_threshold is not None:
            skipped = (stats.count == 1) | (stats.std <= self.std_threshold)
        keep = ~skipped[task_idx]
        by_run = torch.argsort(run_idx, stable=True)
        order = by_run[torch.argsort(task_idx[by_run], stable=True)]
        order = order[keep[order]]
        out = [exps[i] for i in order.tolist()]
        exps_per_task = torch.bincount(task_idx, minlength=n_tasks).to(REWARD_DTYPE)
        metrics = VectorizedGroupAdvantage.report_metrics(
            {
                "reward_mean": stats.mean,
                "reward_std": stats.std,
                "skipped_count_per_group": torch.where(
                    skipped, exps_per_task, torch.zeros_like(exps_per_task)
                ),
            }
        )
        metrics.update(
            experience_count=float(len(out)),
            filtered_count=float(len(exps) - len(out)),
            skipped_group_ratio=float(skipped.float().mean()),
        )
        return out, metrics

    @classmethod
    def default_args(cls) -> dict:
        return {
            "epsilon": 1e-6,
            "enable_step_norm": False,
            "std_threshold": None,
            "std_cal_level": "group",
        }
