"""``sdpa_packed``: causal attention within each packed sequence, without a ``T x T`` mask.

Checked against the masked computation it replaces (values and gradients), against each
sequence run on its own through a whole model, and for the cases it must leave to ``sdpa``
(padded batches, a KV cache)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity.launcher.trainer.packed_attention import (
    PACKED_SDPA,
    packed_causal_attention,
    packed_layout,
    register,
)


def _masked_reference(q, k, v, lengths, scale=None):
    """sdpa under transformers' packed mask: same sequence and causal (the replaced path)."""
    t = q.shape[2]
    seq = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    idx = torch.arange(t)
    mask = (seq[:, None] == seq[None, :]) & (idx[:, None] >= idx[None, :])
    rep = q.shape[1] // k.shape[1]
    out = F.scaled_dot_product_attention(
        q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), attn_mask=mask, scale=scale
    )
    return out.transpose(1, 2)  # (1, T, heads, dim)


def _positions(lengths):
    return torch.cat([torch.arange(n) for n in lengths])


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=2, max_size=7),
    kv_heads=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 2**16),
)
def test_values_and_gradients_equal_the_masked_computation(lengths, kv_heads, seed):
    g = torch.Generator().manual_seed(seed)
    t = sum(lengths)
    q = torch.randn(1, 4, t, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, kv_heads, t, 8, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, kv_heads, t, 8, generator=g, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(1, t, 4, 8, generator=g, dtype=torch.float64)

    out = packed_causal_attention(q, k, v, packed_layout(_positions(lengths)), scaling=0.3)
    grads = torch.autograd.grad((out * upstream).sum(), (q, k, v))
    ref = _masked_reference(q, k, v, lengths, scale=0.3)
    ref_grads = torch.autograd.grad((ref * upstream).sum(), (q, k, v))

    torch.testing.assert_close(out, ref)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want)


def test_layout_follows_transformers_packing_rule():
    """A sequence starts wherever a position is not its predecessor + 1; one sequence (at any
    offset) needs no layout."""
    assert packed_layout(torch.arange(5)) is None
    assert packed_layout(torch.arange(3, 9)[None]) is None
    assert packed_layout(torch.tensor([0])) is None
    token_slot, slot_token, n_seq = packed_layout(torch.tensor([[0, 1, 2, 0, 0, 1]]))
    assert n_seq == 3  # lengths 3, 1, 2 -> rows of 3 slots
    assert token_slot.tolist() == [0, 1, 2, 3, 6, 7]
    # padding slots repeat their row's last token (finite values, never read back)
    assert slot_token.tolist() == [0, 1, 2, 3, 3, 3, 4, 5, 5]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from trinity.launcher.tiny_model import build_tiny_model

    path = tmp_path_factory.mktemp("tiny-qwen2")
    build_tiny_model(path)
    assert register() == PACKED_SDPA
    models = {}
    for impl in ("sdpa", PACKED_SDPA):
        torch.manual_seed(0)
        models[impl] = AutoModelForCausalLM.from_pretrained(
            path, attn_implementation=impl, dtype=torch.float32
        )
    models[PACKED_SDPA].load_state_dict(models["sdpa"].state_dict())
    return models


def test_a_packed_row_equals_each_sequence_alone_and_the_masked_model(tiny_models):
    torch.manual_seed(1)
    sdpa, packed = tiny_models["sdpa"], tiny_models[PACKED_SDPA]
    vocab = sdpa.config.vocab_size
    lengths = [5, 1, 9, 3]
    ids = torch.randint(3, vocab, (sum(lengths),))
    pos = _positions(lengths)[None]

    logits, grads = {}, {}
    for name, model in tiny_models.items():
        model.zero_grad()
        out = model(input_ids=ids[None], position_ids=pos, use_cache=False).logits
        out.logsumexp(-1).sum().backward()
        logits[name] = out.detach()
        grads[name] = [p.grad.clone() for p in model.parameters()]
    torch.testing.assert_close(logits[PACKED_SDPA], logits["sdpa"], atol=1e-5, rtol=1e-5)
    for got, want in zip(grads[PACKED_SDPA], grads["sdpa"], strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)

    alone = torch.cat(
        [packed(input_ids=part[None], use_cache=False).logits for part in ids.split(lengths)], 1
    )
    torch.testing.assert_close(logits[PACKED_SDPA], alone.detach(), atol=1e-5, rtol=1e-5)


def test_padded_batches_and_cached_generation_are_left_to_sdpa(tiny_models):
    sdpa, packed = tiny_models["sdpa"], tiny_models[PACKED_SDPA]
    vocab = sdpa.config.vocab_size
    torch.manual_seed(2)
    ids = torch.randint(3, vocab, (3, 7))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding
    mask[2, :1] = 0
    with torch.no_grad():
        want = sdpa(input_ids=ids, attention_mask=mask).logits
        got = packed(input_ids=ids, attention_mask=mask).logits
    keep = mask.bool()
    torch.testing.assert_close(got[keep], want[keep], atol=1e-5, rtol=1e-5)

    prompt = torch.randint(3, vocab, (1, 6))
    args = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert torch.equal(packed.generate(prompt, **args), sdpa.generate(prompt, **args))
