"""Causal attention over packed sequences without a ``T x T`` mask (for devices without flash-attn).

verl's padding-free layout (``use_remove_padding``) packs a micro-batch's sequences into one row
of ``T`` tokens whose ``position_ids`` restart at 0 for each sequence. With flash-attn the kernel
reads the sequence boundaries from ``position_ids`` (``cu_seqlens``). With ``sdpa`` (CPU, or CUDA
without flash-attn) transformers builds a block-diagonal ``T x T`` boolean mask instead, and a
masked SDPA call cannot use the fused kernel: every layer pays for ``T^2`` scores of which only
``sum(L_i^2) / 2`` are kept (a 512-token micro-batch of ten 50-token answers keeps ~5 %).

:func:`packed_causal_attention` lays the sequences out as a ``(n_seq, heads, L_max, head_dim)``
batch, right-padded, and runs SDPA with ``is_causal=True`` and no mask: a padded key sits after
every real query of its row, so causality alone hides it, and the fused kernel runs. The padded
queries' outputs are dropped. Values and gradients equal the masked computation (tested).

:func:`register` adds it to transformers as the attention implementation ``"sdpa_packed"``:
identical to ``"sdpa"`` (same mask builder, same fallback) except in the packed case, which it
recognises exactly as transformers' mask does (``find_packed_sequence_indices``: a new sequence
wherever a position is not its predecessor + 1).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F

__all__ = [
    "PACKED_SDPA",
    "packed_causal_attention",
    "packed_layout",
    "register",
]

#: The attention implementation name this module registers with transformers.
PACKED_SDPA = "sdpa_packed"


def packed_layout(position_ids: torch.Tensor) -> Optional[tuple[torch.Tensor, torch.Tensor, int]]:
    """Where each packed token goes in a right-padded ``(n_seq, L_max)`` layout.

    Args:
        position_ids: ``(T,)`` or ``(1, T)``; a sequence starts wherever a position is not the
            previous one + 1 (transformers' rule for packed inputs).

    Returns:
        ``None`` for a single sequence, else ``(token_slot, slot_token, n_seq)``:
        ``token_slot`` ``(T,)`` is each token's flat index in ``n_seq * L_max`` slots;
        ``slot_token`` ``(n_seq * L_max,)`` is each slot's token (padding slots repeat a real
        token of their row; their outputs are never read).
    """
    pos = position_ids.reshape(-1)
    t = pos.numel()
    if t < 2:
        return None
    starts_mask = torch.ones(t, dtype=torch.bool, device=pos.device)
    starts_mask[1:] = pos[1:] - pos[:-1] != 1
    starts = starts_mask.nonzero().reshape(-1)
    n_seq = int(starts.numel())
    if n_seq == 1:
        return None
    ends = torch.cat([starts[1:], starts.new_tensor([t])])
    lengths = ends - starts
    l_max = int(lengths.max())
    seq_of = torch.cumsum(starts_mask.long(), 0) - 1  # (T,)
    offset = torch.arange(t, device=pos.device) - starts[seq_of]  # (T,) position in its sequence
    token_slot = seq_of * l_max + offset
    # a slot past its row's end reads the row's last token (finite values, never read back)
    col = torch.arange(l_max, device=pos.device)
    slot_token = starts[:, None] + torch.minimum(col[None, :], lengths[:, None] - 1)
    return token_slot, slot_token.reshape(-1), n_seq


def packed_causal_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layout: tuple[torch.Tensor, torch.Tensor, int],
    scaling: Optional[float] = None,
    dropout: float = 0.0,
) -> torch.Tensor:
    """Causal attention of each packed sequence with itself only.

    Args:
        query: ``(1, heads, T, head_dim)``.
        key, value: ``(1, kv_heads, T, head_dim)`` (``heads`` a multiple of ``kv_heads``).
        layout: :func:`packed_layout` of the row's ``position_ids``.

    Returns:
        ``(1, T, heads, head_dim)`` (transformers' attention-output layout).
    """
    token_slot, slot_token, n_seq = layout
    heads, t, dim = query.shape[1], query.shape[2], query.shape[3]

    def rows(x: torch.Tensor) -> torch.Tensor:  # (1, h, T, d) -> (n_seq, h, L_max, d)
        h = x.shape[1]
        return x[0].index_select(1, slot_token).reshape(h, n_seq, -1, dim).transpose(0, 1)

    q, k, v = rows(query), rows(key), rows(value)
    gqa = k.shape[1] != heads
    out = F.scaled_dot_product_attention(
        q, k, v, dropout_p=dropout, is_causal=True, scale=scaling, enable_gqa=gqa
    )  # (n_seq, heads, L_max, dim)
    out = out.transpose(1, 2).reshape(-1, heads, dim)  # (n_seq * L_max, heads, dim)
    return out.index_select(0, token_slot).reshape(1, t, heads, dim)


#: ``(position_ids, its version counter, layout)`` of the last forward, as one tuple: read
#: and replaced whole, so two threads running models at once never pair one's tensor with the
#: other's layout.
_LAST_LAYOUT: list[Any] = [None]


def _layout_for(position_ids: torch.Tensor) -> Optional[tuple[torch.Tensor, torch.Tensor, int]]:
    # every layer of one forward passes the same position_ids tensor: compute its layout once
    last = _LAST_LAYOUT[0]
    if last is not None and last[0] is position_ids and last[1] == position_ids._version:
        return last[2]
    layout = packed_layout(position_ids)
    _LAST_LAYOUT[0] = (position_ids, position_ids._version, layout)
    return layout


def sdpa_packed_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention, with packed single-row inputs routed around the mask."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    position_ids = kwargs.get("position_ids")
    window = kwargs.get("sliding_window")
    if (
        position_ids is not None
        and query.shape[0] == 1
        and query.shape[2] == key.shape[2]
        and kwargs.get("cache") is None
        and kwargs.get("position_bias") is None
        and kwargs.get("is_causal", getattr(module, "is_causal", True))
        and position_ids.numel() == query.shape[2]
    ):
        layout = _layout_for(position_ids)
        if layout is not None and (window is None or window >= layout[1].numel() // layout[2]):
            out = packed_causal_attention(query, key, value, layout, scaling, dropout)
            return out, None
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )


def register() -> str:
    """Register ``"sdpa_packed"`` with transformers (idempotent); returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(PACKED_SDPA, sdpa_packed_attention_forward)
    # the same masks as "sdpa": every case this does not reroute gets exactly sdpa's behaviour
    AttentionMaskInterface.register(PACKED_SDPA, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    return PACKED_SDPA
