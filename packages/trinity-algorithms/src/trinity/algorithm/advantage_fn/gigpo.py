"""GiGPO advantage (``"gigpo"``): episode-level plus anchor-state step-level groups.

Group-in-Group Policy Optimization (Feng et al., arXiv:2505.10978) for multi-step agent runs.
As in ``step_wise_grpo`` one run of a task gives one experience per step (sharing ``eid.task``
and ``eid.run``, ordered by ``eid.step``), and each run's return is compared with the other runs
of its task (``A_E``). In addition, steps taken from the same environment state, wherever they
occur in the step's runs, form an *anchor group*: their discounted returns are compared with
each other (``A_S``), crediting the individual action. Each experience gets
``A_E + omega * A_S`` over its action mask. The math is
:func:`~trinity.algorithm.advantage_fn.functional.gigpo_advantages`.

What the workflow provides, in ``Experience.info``:

* ``info[env_state_hash_key]``: any hashable identity of the state the step acted from (its
  ``str`` is the key); steps without one get ``A_S = 0``;
* ``info[step_reward_key]``: the step's immediate reward ``r_t``. If no step of a run has it,
  the run's last step (largest ``eid.step``) carries ``Experience.reward`` and the others 0
  (what a workflow that only rewards the episode gives).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from trinity.algorithm.advantage_fn._vectorized import (
    REWARD_DTYPE,
    BatchedGroupAdvantage,
    group_keys,
    write_outcome_advantages,
)
from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.advantage_fn.functional import (
    as_group_index,
    check_finite,
    gigpo_advantages,
    group_stats,
)
from trinity.algorithm.args import Field, GroupAdvantageArgs, NonNegFloat, PosFloat, Probability
from trinity.common.experience import Experience

__all__ = ["GiGPOAdvantageFn"]

_FNORMS = ("std", "none")


def _positions(run_idx: Tensor, steps: Tensor, n_runs: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(position [B], run lengths [n_runs], order [B])``: each experience's index within its
    run by ``eid.step`` (ties: input order), and the experiences sorted run by run, by step."""
    by_step = torch.argsort(steps, stable=True)
    order = by_step[torch.argsort(run_idx[by_step], stable=True)]
    lengths = torch.bincount(run_idx, minlength=n_runs)
    starts = torch.cumsum(lengths, 0) - lengths
    position = torch.empty_like(run_idx)
    position[order] = torch.arange(run_idx.shape[0]) - starts[run_idx[order]]
    return position, lengths, order


@ADVANTAGE_FN.register_module("gigpo")
class GiGPOAdvantageFn(BatchedGroupAdvantage):
    """GiGPO advantage.

    Args:
        omega: weight of the step-level advantage ``A_S``.
        gamma: discount of the step returns ``R_t = sum_{k>=t} gamma^(k-t) r_k``.
        fnorm: ``"none"`` (the paper's default for agents: no std division) or ``"std"``
            (divide by the group's std, as GRPO).
        epsilon: added to the normaliser.
        step_reward_key / env_state_hash_key: the ``Experience.info`` keys read.

    Metrics (Trinity-RFT's names): ``gigpo/episode_reward_mean|std/mean|max|min`` over tasks
    (the mean and the normaliser the returns were scored with: 1 with ``fnorm="none"``, and
    mean 0 / normaliser 1 for a one-run task), ``gigpo/anchor_groups_total``,
    ``gigpo/anchor_groups_size_gt1``, ``gigpo/anchor_group_hit_ratio``,
    ``gigpo/mean_abs_A_E``, ``gigpo/mean_abs_A_S``, ``experience_count``. A one-run task gets
    ``A_E = return / (1 + epsilon)`` (``zero_singletons=True`` gives 0).
    """

    class Args(GroupAdvantageArgs):
        """``advantage_fn_args`` of ``gigpo``."""

        omega: NonNegFloat = Field(1.0, description="Weight of the step-level advantage.")
        gamma: Probability = Field(1.0, description="Discount of the step returns.")
        fnorm: Literal["std", "none"] = Field(
            "none", description="Group normaliser: std (GRPO) or none (1)."
        )
        epsilon: PosFloat = Field(1e-6, description="Added to the normaliser.")
        step_reward_key: str = Field("step_reward", description="info key of r_t.")
        env_state_hash_key: str = Field(
            "env_state_hash", description="info key of the anchor state's identity."
        )

    algorithm_name = "gigpo"
    metrics_prefix = "gigpo"

    def __init__(
        self,
        omega: float = 1.0,
        gamma: float = 1.0,
        fnorm: str = "none",
        epsilon: float = 1e-6,
        step_reward_key: str = "step_reward",
        env_state_hash_key: str = "env_state_hash",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if fnorm not in _FNORMS:
            raise ValueError(f"fnorm must be 'std' or 'none', got {fnorm!r}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if not omega >= 0:
            raise ValueError(f"omega must be >= 0, got {omega}")
        self.omega = float(omega)
        self.gamma = float(gamma)
        self.fnorm = fnorm
        self.epsilon = float(epsilon)
        self.step_reward_key = step_reward_key
        self.env_state_hash_key = env_state_hash_key

    def _step_rewards(self, exps: list[Experience], run_idx: Tensor, last: Tensor) -> Tensor:
        """``[B]`` immediate rewards: ``info[step_reward_key]`` (0 where a step lacks it) in
        runs where some step has it, else ``reward`` on the run's last step and 0 before."""
        key = self.step_reward_key
        has = torch.tensor([key in (e.info or {}) for e in exps], dtype=torch.bool)
        run_has = torch.zeros(int(run_idx.max()) + 1, dtype=torch.bool).index_put_(
            (run_idx[has],), torch.ones(int(has.sum()), dtype=torch.bool)
        )
        values = []
        for exp, from_info, final in zip(
            exps, run_has[run_idx].tolist(), last.tolist(), strict=True
        ):
            raw = (exp.info or {}).get(key, 0.0) if from_info else (exp.reward if final else 0.0)
            try:
                values.append(float(0.0 if raw is None else raw))
            except (TypeError, ValueError):
                raise ValueError(
                    f"experience {exp.eid} has a non-numeric step reward {raw!r} "
                    f"(info[{key!r}] or reward)"
                ) from None
        rewards = torch.tensor(values, dtype=REWARD_DTYPE)
        check_finite(rewards, [e.eid for e in exps], what="step reward")
        return rewards

    def _anchors(self, exps: list[Experience]) -> Tensor:
        """``[B]`` long anchor-group id of each step (``-1``: no state hash)."""
        ids: dict[str, int] = {}
        out = []
        for exp in exps:
            state = (exp.info or {}).get(self.env_state_hash_key)
            out.append(-1 if state is None else ids.setdefault(str(state), len(ids)))
        return torch.tensor(out, dtype=torch.long)

    def score_experiences(
        self, exps: list[Experience], **options: Any
    ) -> tuple[list[Experience], dict[str, Tensor], dict[str, float]]:
        """All tasks at once; returns the experiences task by task, run by run, step by step."""
        run_idx, n_runs = as_group_index(group_keys(exps, "run"))
        task_idx, n_tasks = as_group_index(group_keys(exps, "task"))
        steps = torch.tensor([int(e.eid.step) for e in exps], dtype=torch.long)
        position, lengths, order = _positions(run_idx, steps, n_runs)
        rewards = self._step_rewards(exps, run_idx, position == lengths[run_idx] - 1)
        run_task = torch.zeros(n_runs, dtype=torch.long).scatter_(0, run_idx, task_idx)
        anchors = self._anchors(exps)
        with torch.no_grad():
            result = gigpo_advantages(
                rewards,
                run_idx,
                position,
                run_task,
                anchors,
                omega=self.omega,
                gamma=self.gamma,
                norm_by_std=self.fnorm == "std",
                epsilon=self.epsilon,
                zero_singletons=self.zero_singletons,
            )
            write_outcome_advantages(exps, result.advantages)
        order = order[torch.argsort(task_idx[order], stable=True)]
        out = [exps[i] for i in order.tolist()]
        return (
            out,
            self._group_metrics(result.returns, run_task, n_tasks),
            self._step_metrics(result.episode, result.step, anchors, len(out)),
        )

    def _group_metrics(self, returns: Tensor, run_task: Tensor, n_tasks: int) -> dict[str, Tensor]:
        stats = group_stats(returns, run_task, n_tasks)
        single = stats.count == 1
        scale = stats.std if self.fnorm == "std" else torch.ones_like(stats.std)
        return {
            "episode_reward_mean": torch.where(single, torch.zeros_like(stats.mean), stats.mean),
            "episode_reward_std": torch.where(single, torch.ones_like(scale), scale),
        }

    @staticmethod
    def _step_metrics(a_e: Tensor, a_s: Tensor, anchors: Tensor, count: int) -> dict[str, float]:
        anchored = anchors[anchors >= 0]
        sizes = torch.bincount(anchored) if anchored.numel() else torch.zeros(0, dtype=torch.long)
        total, shared = int(sizes.numel()), int((sizes > 1).sum())
        return {
            "gigpo/anchor_groups_total": float(total),
            "gigpo/anchor_groups_size_gt1": float(shared),
            "gigpo/anchor_group_hit_ratio": shared / total if total else 0.0,
            "gigpo/mean_abs_A_E": float(a_e.abs().mean()),
            "gigpo/mean_abs_A_S": float(a_s.abs().mean()),
            "experience_count": float(count),
        }

    @classmethod
    def default_args(cls) -> dict:
        return {
            "omega": 1.0,
            "gamma": 1.0,
            "fnorm": "none",
            "epsilon": 1e-6,
            "step_reward_key": "step_reward",
            "env_state_hash_key": "env_state_hash",
        }
