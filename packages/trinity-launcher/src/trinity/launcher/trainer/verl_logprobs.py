"""Log-probabilities of labels under logits, vectorised in bounded chunks (a pure function).

verl computes the trainer's log-probabilities with ``logprobs_from_logits``. Without
flash-attn's cross-entropy kernel (always on CPU) it falls back to ``logprobs_from_logits_v2``,
which takes ``logsumexp`` one *row* at a time to bound memory. With verl's packed
(remove-padding) layout the rows are tokens: a micro-batch of 1,000 tokens is 1,000 Python
iterations forward and 1,000 autograd nodes backward, most of a small model's train step on CPU.
:func:`chunked_logprobs` computes the same ``x[label] - logsumexp(x)`` over chunks of rows sized
to a memory budget, so peak memory stays bounded and the loop runs a few times, not per token.
:mod:`trinity.launcher.trainer.verl_compat` installs it in verl's engine modules on CPU.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["DEFAULT_CHUNK_ELEMENTS", "chunked_logprobs"]

#: Logit elements per chunk (2**24 fp32 = 64 MiB for one temporary of ``logsumexp``).
DEFAULT_CHUNK_ELEMENTS = 2**24


def chunked_logprobs(
    logits: Tensor, labels: Tensor, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS
) -> Tensor:
    """``log_softmax(logits)[..., labels]`` with ``logsumexp`` taken over chunks of rows.

    Args:
        logits: ``(..., vocab)`` floating point.
        labels: ``(...)`` int64 token ids, the shape of ``logits`` without its last dim.
        chunk_elements: at most this many logit elements per ``logsumexp`` call (at least
            one row).

    Returns:
        ``(...)`` log-probabilities of ``labels``, in ``logits``' dtype (bf16/fp16 logits
        are reduced in fp32, as verl's fallback does through ``log_softmax``).
    """
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)
    picked = torch.gather(flat, -1, labels.reshape(-1, 1)).squeeze(-1)
    rows = max(1, chunk_elements // max(vocab, 1))
    if flat.dtype in (torch.float32, torch.float64):
        norms = [torch.logsumexp(part, dim=-1) for part in flat.split(rows)]
        out = picked - (torch.cat(norms) if len(norms) != 1 else norms[0])
    else:
        out = (
            picked.float() - torch.cat([torch.logsumexp(p.float(), -1) for p in flat.split(rows)])
        ).to(flat.dtype)
    return out.reshape(labels.shape)
