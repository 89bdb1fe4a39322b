"""Advantage speed: Trinity's vectorized advantages vs verl's, measured in the same run.

    .venvs/trinity-algorithms/bin/python benchmarks/advantage_bench.py [--batch 100000]

Both sides get the same inputs, 100k sequences' worth by default (groups of 8, right-padded
responses of mixed length up to 256 tokens) and do the same work:

* GRPO: ``token_level_rewards [B, R]`` + ``response_mask`` + a numpy ``index`` of group ids ->
  token advantages ``[B, R]``; ours is ``as_group_index`` + ``grpo_advantages`` +
  ``broadcast_to_tokens`` vs verl's ``compute_grpo_outcome_advantage``.
* GAE: rewards, critic values and mask ``[B, R]`` -> (whitened advantages, returns); ours is
  ``gae_advantages_returns`` vs verl's ``compute_gae_advantage_return``.

It also times ``GRPOGroupedAdvantage()(experiences)`` on a list of :class:`Experience`
(validation, grouping by ``eid.tid``, writing each ``advantages`` / ``returns``), and the
per-group path (``GroupAdvantage.__call__``) on the same list. Ratios are ours / verl
(goal: <= 1.0). Times are the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from trinity.algorithm.advantage_fn import GroupAdvantage, GRPOGroupedAdvantage
from trinity.algorithm.advantage_fn import functional as F
from trinity.common.experience import EID, Experience


def best_ms(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Best wall time of ``repeat`` calls in ms, and the last call's result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    from verl.trainer.ppo import core_algos  # the reference; the package never imports verl

    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    gen = torch.Generator().manual_seed(0)
    b, r = args.batch, args.max_len
    lengths = torch.randint(1, r + 1, (b,), generator=gen)
    mask = (torch.arange(r)[None, :] < lengths[:, None]).float()
    rewards = (torch.rand(b, generator=gen) < 0.5).float() + 0.1 * torch.randn(b, generator=gen)
    tlr = torch.zeros(b, r)
    tlr[torch.arange(b), lengths - 1] = rewards
    index = np.array([f"uid-{i // args.group}" for i in range(b)], dtype=object)
    np.random.default_rng(0).shuffle(index)
    values = torch.randn(b, r, generator=gen)
    tlr, mask, values = tlr.to(dev), mask.to(dev), values.to(dev)
    print(
        f"inputs: B={b} sequences, groups of {args.group}, R={r} (mean response "
        f"{float(lengths.float().mean()):.0f} tokens), device {dev}, "
        f"torch threads {torch.get_num_threads()}"
    )

    # ---- GRPO on tensors
    def ours_grpo():
        g, _ = F.as_group_index(index, device=dev)
        out = F.broadcast_to_tokens(F.grpo_advantages(tlr.sum(-1), g), mask)
        sync()
        return out

    def verl_grpo():
        out = core_algos.compute_grpo_outcome_advantage(tlr, mask, index)[0]
        sync()
        return out

    t_ours, ours = best_ms(ours_grpo, args.repeat)
    t_verl, ref = best_ms(verl_grpo, args.repeat)
    # verl keeps group statistics in float32, ours in float64: at this size verl's own rounding
    # reaches ~1.5e-6 on a few elements (the float64 result is the exact one, to float32 ulp)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=0)
    t_verl_grpo = t_verl
    print(
        f"grpo: ours {t_ours:.1f} ms, verl {t_verl:.1f} ms, ratio {t_ours / t_verl:.3f} "
        f"(max |diff| {float((ours - ref).abs().max()):.1e})"
    )

    # ---- GAE on tensors
    def ours_gae():
        out = F.gae_advantages_returns(tlr, values, mask, gamma=0.99, lam=0.95)
        sync()
        return out

    def verl_gae():
        out = core_algos.compute_gae_advantage_return(tlr, values, mask, 0.99, 0.95)
        sync()
        return out

    t_ours, (a1, r1) = best_ms(ours_gae, args.repeat)
    t_verl, (a2, r2) = best_ms(verl_gae, args.repeat)
    torch.testing.assert_close(r1, r2, atol=1e-6, rtol=0)
    torch.testing.assert_close(a1, a2, atol=1e-6, rtol=0)
    diff = max(float((a1 - a2).abs().max()), float((r1 - r2).abs().max()))
    print(
        f"gae: ours {t_ours:.1f} ms, verl {t_verl:.1f} ms, ratio {t_ours / t_verl:.3f} "
        f"(max |diff| {diff:.1e})"
    )

    # ---- GRPO on a list of Experience (the experience-pipeline path)
    lengths_l, rewards_l, tasks = lengths.tolist(), rewards.tolist(), index.tolist()
    exps = [
        Experience(
            eid=EID(batch=0, task=tasks[i], run=i),
            tokens=torch.zeros(8 + lengths_l[i], dtype=torch.long),
            prompt_length=8,
            reward=rewards_l[i],
        )
        for i in range(b)
    ]
    fn = GRPOGroupedAdvantage()
    t_list, _ = best_ms(lambda: fn(exps), args.repeat)
    print(
        f"grpo experience list ({b} Experience): ours {t_list:.1f} ms "
        f"(verl on tensors {t_verl_grpo:.1f} ms, ratio {t_list / t_verl_grpo:.3f})"
    )
    subset = copy.deepcopy(exps[: b // 10])
    t_group = best_ms(lambda: GroupAdvantage.__call__(fn, subset), 1)[0] * 10
    print(f"grpo experience list, per-group path (extrapolated from B/10): {t_group:.1f} ms")


if __name__ == "__main__":
    main()
