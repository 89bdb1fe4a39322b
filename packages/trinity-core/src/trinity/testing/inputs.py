"""Small, seeded inputs shared by the contracts: token tensors and experience groups.

Everything is tiny (a batch of 4 rows, 6 response tokens) so a whole contract runs in well under
a second, and every input has a purpose:

* the action mask has an environment token in the middle of a row and right padding, so a
  component that ignores the mask gets different numbers when masked values change;
* the experience groups include the edge cases the framework meets every step: a group whose
  rewards are all the same, a one-member group, and a response whose every token is masked.

Shapes: ``[B, R]`` per-token tensors (``B = 4`` rows, ``R = 6`` response tokens), ``[B]`` per-row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

import torch
from torch import Tensor

from trinity.common.experience import EID, Experience

__all__ = [
    "BATCH",
    "RESPONSE_LEN",
    "STANDARD_MASK",
    "edge_groups",
    "make_experience",
    "perturb_masked",
    "standard_experiences",
    "token_inputs",
]

BATCH = 4
RESPONSE_LEN = 6

#: ``[B, R]``: row 0 all trained; row 1 an environment token (0) then padding; row 2 trailing
#: padding; row 3 alternating (a multi-turn row).
STANDARD_MASK = torch.tensor(
    [
        [1, 1, 1, 1, 1, 1],
        [1, 1, 0, 1, 0, 0],
        [1, 1, 1, 1, 1, 0],
        [1, 0, 1, 0, 1, 1],
    ],
    dtype=torch.bool,
)

#: Per-row ``[B]`` flags for the ``mix`` family (expert demonstrations on odd rows).
STANDARD_EXPERT_MASK = torch.tensor([False, True, False, True])

# Batch fields whose values are per token ([B, R]) and get perturbed under a zero mask.
PER_TOKEN_FIELDS = (
    "logprob",
    "old_logprob",
    "old_logprobs",
    "old_log_probs",
    "ref_logprob",
    "ref_log_prob",
    "advantages",
    "returns",
    "values",
    "teacher_logprobs",
    "entropy",
    "token_level_rewards",
    "token_level_scores",
)


def token_inputs(
    gen: torch.Generator, dtype: torch.dtype = torch.float32, batch: int = BATCH
) -> dict[str, Tensor]:
    """Every standard batch field a loss may name, seeded by ``gen``.

    ``logprob`` in ``[-3, -0.05]``; ``old_logprob`` / ``ref_logprob`` / ``teacher_logprobs`` near
    it (so ratios stay within PPO's clip range for some tokens and outside for others);
    ``advantages``, ``returns``, ``values`` standard normal; ``entropy`` in ``[0, 3]``;
    ``action_mask`` :data:`STANDARD_MASK` (bool); ``expert_mask`` / ``is_expert_mask`` bool
    ``[B]``. Rows beyond 4 repeat the pattern.
    """
    shape = (batch, RESPONSE_LEN)

    def rand(scale: float = 1.0) -> Tensor:
        return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)

    logprob = (-0.05 - 2.95 * torch.rand(shape, generator=gen, dtype=torch.float64)).to(dtype)
    rows = torch.arange(batch) % BATCH
    mask = STANDARD_MASK[rows].clone()
    expert = STANDARD_EXPERT_MASK[rows].clone()
    return {
        "logprob": logprob,
        "old_logprob": logprob + rand(0.15),
        "ref_logprob": logprob + rand(0.3),
        "teacher_logprobs": logprob + rand(0.3),
        "advantages": rand(),
        "returns": rand(),
        "values": rand(),
        "entropy": (3.0 * torch.rand(shape, generator=gen, dtype=torch.float64)).to(dtype),
        "token_level_rewards": rand(),
        "token_level_scores": rand(),
        "action_mask": mask,
        "response_mask": mask.clone(),
        "expert_mask": expert,
        "is_expert_mask": expert.clone(),
    }


def perturb_masked(
    inputs: dict[str, Any], mask: Tensor, gen: torch.Generator, scale: float = 4.0
) -> dict[str, Any]:
    """A copy of ``inputs`` whose per-token tensors differ wherever ``mask`` is 0.

    The new values are finite (``± scale``), so a component that multiplies by the mask gives
    exactly the same result, and one that forgets the mask does not.
    """
    out = dict(inputs)
    off = ~mask.to(torch.bool)
    for name in PER_TOKEN_FIELDS:
        value = inputs.get(name)
        if isinstance(value, Tensor) and value.shape == mask.shape and value.is_floating_point():
            noise = torch.randn(value.shape, generator=gen, dtype=torch.float64) * scale
            changed = value.detach().clone()
            changed[off] = changed[off] + noise.to(value.dtype)[off]
            if name == "logprob":  # log-probabilities stay <= 0
                changed = changed.clamp(max=-1e-3)
            out[name] = changed
    return out


def make_experience(
    task: int,
    run: int,
    reward: Optional[float],
    mask: Iterable[int],
    *,
    gen: Optional[torch.Generator] = None,
    prompt_len: int = 3,
    batch: int = 0,
    step: int = 0,
    model_version: int = 0,
    **fields: Any,
) -> Experience:
    """One single-turn experience of task ``task``, run ``run``, with the given action mask.

    Tokens are ``prompt_len`` prompt ids then ``len(mask)`` response ids; ``logprobs`` are seeded
    negatives, ``response_text`` / ``prompt_text`` short strings, ``model_version`` recorded.
    """
    mask_t = torch.tensor(list(mask), dtype=torch.bool)
    r = int(mask_t.shape[0])
    gen = gen if gen is not None else torch.Generator().manual_seed(1000 * task + run)
    logprobs = -0.05 - 2.95 * torch.rand(r, generator=gen)
    return Experience(
        eid=EID(batch=batch, task=task, run=run, step=step, suffix=f"kit{task}-{run}-{step}"),
        tokens=torch.arange(10, 10 + prompt_len + r),
        prompt_length=prompt_len,
        reward=reward,
        logprobs=logprobs,
        action_mask=mask_t,
        prompt_text=f"task {task}",
        response_text=f"answer {task}.{run}",
        model_version=model_version,
        **fields,
    )


def standard_experiences(seed: int = 0) -> list[Experience]:
    """One explore step: four task groups, edge cases included, in interleaved order.

    * task 0: four runs, rewards ``1, 0, 0.5, 0`` (the ordinary case);
    * task 1: three runs with identical rewards (no group-relative signal);
    * task 2: one run (a one-member group);
    * task 3: two runs, one of which has every response token masked.
    """
    gen = torch.Generator().manual_seed(seed)
    spec = [
        (0, 0, 1.0, [1, 1, 1, 1]),
        (1, 0, 1.0, [1, 1, 1]),
        (0, 1, 0.0, [1, 1, 0, 1, 0]),
        (2, 0, 0.7, [1, 1]),
        (0, 2, 0.5, [1, 0, 1]),
        (3, 0, 0.2, [0, 0, 0]),
        (1, 1, 1.0, [1, 1, 0, 0]),
        (0, 3, 0.0, [1, 1, 1, 1, 1, 1]),
        (3, 1, 0.9, [1, 1, 1, 1]),
        (1, 2, 1.0, [1]),
    ]
    return [make_experience(t, r, rw, m, gen=gen) for t, r, rw, m in spec]


def edge_groups(seed: int = 0) -> dict[str, list[Experience]]:
    """The edge cases of :func:`standard_experiences`, each alone in its own explore step."""
    exps = standard_experiences(seed)
    by_task: dict[int, list[Experience]] = {}
    for exp in exps:
        by_task.setdefault(int(exp.eid.task), []).append(exp)
    return {
        "a group of identical rewards": by_task[1],
        "a one-member group": by_task[2],
        "a group with an all-masked response": by_task[3],
    }
