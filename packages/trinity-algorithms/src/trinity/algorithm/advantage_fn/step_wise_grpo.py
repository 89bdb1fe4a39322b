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
    BatchedGroupAdvantage,
    experience_rewards,
    group_keys,
    write_outcome_advantages,
)
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.advantage_fn.functional import as_group_index
from trinity.algorithm.advantage_fn.grpo import check_std_cal_level, grpo_group_scores
from trinity.algorithm.args import ComponentArgs, Field, NonNegFloat, PosFloat, StdLevel
from trinity.common.experience import Experience

__all__ = ["StepWiseGRPOAdvantageFn"]


@ADVANTAGE_FN.register_module("step_wise_grpo")
class StepWiseGRPOAdvantageFn(BatchedGroupAdvantage):
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
        self.std_cal_level = check_std_cal_level(std_cal_level)
        self.epsilon = float(epsilon)
        self.enable_step_norm = enable_step_norm
        self.std_threshold = std_threshold

    def score_experiences(
        self, exps: list[Experience], precomputed_std: Optional[Tensor] = None
    ) -> tuple[list[Experience], dict[str, Tensor], dict[str, float]]:
        """All tasks at once: runs and tasks numbered, one GRPO over the run returns.

        ``precomputed_std`` replaces the std of the step's returns for ``std_cal_level="batch"``
        (scoring one task of a larger step). Returns the kept experiences ordered task by task,
        run by run (:meth:`group_experiences` order, each run's steps in input order); per task
        ``reward_mean`` / ``reward_std`` of the returns and ``skipped_count_per_group``; for
        the step ``experience_count``, ``filtered_count`` and ``skipped_group_ratio``.
        """
        run_idx, n_runs = as_group_index(group_keys(exps, "run"))
        task_idx, n_tasks = as_group_index(group_keys(exps, "task"))
        positions = torch.arange(len(exps))
        last = torch.full((n_runs,), -1, dtype=torch.long).scatter_reduce_(
            0, run_idx, positions, "amax"
        )
        rewards = experience_rewards([exps[i] for i in last.tolist()], self.algorithm_name)
        with torch.no_grad():
            scores, stats, skipped = grpo_group_scores(
                rewards,
                task_idx[last],
                n_tasks,
                epsilon=self.epsilon,
                std_cal_level=self.std_cal_level,
                zero_singletons=self.zero_singletons,
                std_threshold=self.std_threshold,
                batch_std=precomputed_std,
            )
            if self.enable_step_norm:
                scores = scores / torch.bincount(run_idx, minlength=n_runs).to(scores.dtype)
            write_outcome_advantages(exps, scores[run_idx])
        keep = ~skipped[task_idx]
        by_run = torch.argsort(run_idx, stable=True)
        order = by_run[torch.argsort(task_idx[by_run], stable=True)]
        order = order[keep[order]]
        out = [exps[i] for i in order.tolist()]
        exps_per_task = torch.bincount(task_idx, minlength=n_tasks).to(REWARD_DTYPE)
        per_group = {
            "reward_mean": stats.mean,
            "reward_std": stats.std,
            "skipped_count_per_group": torch.where(
                skipped, exps_per_task, torch.zeros_like(exps_per_task)
            ),
        }
        per_step = {
            "experience_count": float(len(out)),
            "filtered_count": float(len(exps) - len(out)),
            "skipped_group_ratio": float(skipped.float().mean()),
        }
        return out, per_group, per_step

    @classmethod
    def default_args(cls) -> dict:
        return {
            "epsilon": 1e-6,
            "enable_step_norm": False,
            "std_threshold": None,
            "std_cal_level": "group",
        }
