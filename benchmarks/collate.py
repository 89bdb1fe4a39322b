"""Collate speed: ``collate_experiences`` vs a naive per-row padding loop, in the same run.

    .venv/bin/python benchmarks/collate.py

Prints the ratio (naive / collate); padding is done once per training step for the whole batch,
so it must stay far below the cost of a forward pass.
"""

from __future__ import annotations

import time

import torch

from trinity.common.experience import Experience, collate_experiences


def naive(exps: list[Experience], pad: int = 0) -> torch.Tensor:
    p = max(e.prompt_length for e in exps)
    r = max(len(e.tokens) - e.prompt_length for e in exps)
    rows = []
    for e in exps:
        prompt = e.tokens[: e.prompt_length].tolist()
        resp = e.tokens[e.prompt_length :].tolist()
        rows.append([pad] * (p - len(prompt)) + prompt + resp + [pad] * (r - len(resp)))
    return torch.tensor(rows)


def main() -> None:
    gen = torch.Generator().manual_seed(0)
    exps = []
    for _ in range(512):
        p, r = (int(x) for x in torch.randint(1, 2048, (2,), generator=gen))
        exps.append(
            Experience(
                tokens=torch.randint(1, 1000, (p + r,), generator=gen),
                prompt_length=p,
                logprobs=torch.randn(r, generator=gen),
            )
        )
    collate_experiences(exps[:4])

    def best(fn, repeat=3):
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    t_collate = best(lambda: collate_experiences(exps))
    t_naive = best(lambda: naive(exps))
    assert torch.equal(collate_experiences(exps).tokens, naive(exps))
    print(f"collate_experiences: {t_collate * 1e3:.1f} ms for 512 rows (tokens, masks, logprobs)")
    print(f"naive token padding: {t_naive * 1e3:.1f} ms")
    print(f"ratio naive/collate: {t_naive / t_collate:.1f}x")


if __name__ == "__main__":
    main()
