"""The trainer's log-probabilities on CPU: verl's row loop replaced by bounded chunks."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("verl")

from verl.utils.torch_functional import logprobs_from_logits_v2  # noqa: E402

from trinity.launcher.trainer.verl_logprobs import chunked_logprobs  # noqa: E402


def _inputs(rows: int, vocab: int, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(rows, vocab, generator=g) * 3).to(dtype).requires_grad_(True)
    labels = torch.randint(0, vocab, (rows,), generator=g)
    return logits, labels


@pytest.mark.parametrize("chunk_elements", [1, 7 * 5, 10**9])
def test_chunks_give_verls_values_and_gradients(chunk_elements):
    logits, labels = _inputs(37, 5)
    ref_logits = logits.detach().clone().requires_grad_(True)
    ours = chunked_logprobs(logits, labels, chunk_elements=chunk_elements)
    ref = logprobs_from_logits_v2(ref_logits, labels)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6)
    weights = torch.linspace(-1, 1, 37)
    (ours * weights).sum().backward()
    (ref * weights).sum().backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad, rtol=0, atol=1e-6)


def test_batched_shapes_and_low_precision():
    logits, labels = _inputs(24, 11, dtype=torch.bfloat16)
    out = chunked_logprobs(logits.reshape(4, 6, 11), labels.reshape(4, 6), chunk_elements=30)
    assert out.shape == (4, 6) and out.dtype == torch.bfloat16
    exact = torch.log_softmax(logits.float(), -1).gather(-1, labels[:, None]).squeeze(-1)
    torch.testing.assert_close(
        out.reshape(-1).float(), exact, rtol=8e-3, atol=1e-2
    )  # bf16 rounding


def test_no_rows():
    logits, labels = _inputs(0, 5)
    assert chunked_logprobs(logits, labels).shape == (0,)


def test_verls_engine_uses_it_on_cpu():
    from trinity.launcher.trainer.verl_compat import apply_verl_compat

    apply_verl_compat("cpu")
    import verl.utils.torch_functional as vtf
    import verl.workers.engine.fsdp.transformer_impl as impl

    assert impl.logprobs_from_logits is vtf.logprobs_from_logits
    assert getattr(impl.logprobs_from_logits, "_trinity_patched", False)
    logits, labels = _inputs(9, 4)
    torch.testing.assert_close(
        impl.logprobs_from_logits(logits, labels), logprobs_from_logits_v2(logits, labels)
    )
