"""Image rows for verl's FSDP engine: multimodal rotary positions and the vision inputs.

A Qwen2-VL-style model places its tokens on three rotary axes (time, height, width): text
advances all three together, an image's tokens spread over its grid. verl's patched forward
takes ``position_ids`` as ``[4, ...]``: the plain text positions, then those three axes (what
its own data loaders build with the model's ``get_rope_index``), and ``multi_modal_inputs`` as
one dict per row (``pixel_values`` ``[patches, C*T*P*P]``, ``image_grid_thw`` ``[images, 3]``),
which it concatenates per micro-batch.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Optional

import torch
from torch import Tensor

__all__ = [
    "fix_nested_ragged_dim",
    "keep_hf_vl_attention",
    "localize_vl_patches",
    "mm_rows",
    "nested_mrope_positions",
    "vlm_position_ids",
]


def mm_rows(multi_modal_inputs: dict[str, list[Tensor]]) -> list[dict[str, Tensor]]:
    """The batch's ``{key: [per-row tensor]}`` as one ``{key: tensor}`` per row."""
    keys = list(multi_modal_inputs)
    size = len(multi_modal_inputs[keys[0]]) if keys else 0
    return [{k: multi_modal_inputs[k][i] for k in keys} for i in range(size)]


def vlm_position_ids(
    tokens: Tensor,
    attention_mask: Tensor,
    text_position_ids: Tensor,
    image_grid_thw: list[Tensor],
    tokenizer: Any,
    merge_size: int,
    prompt_length: int,
) -> Tensor:
    """``[B, 4, L]`` int64: row ``i`` is ``text_position_ids[i]`` over the three rotary axes
    of its tokens (``1`` where ``attention_mask`` is 0, as verl's loaders leave padding).

    The prompt's axes come from the images' grids (the model's ``get_rope_index``); the
    response continues as text from one past the prompt's largest position, as the model
    placed it while generating. (A response is never read for images: a sampled vision token
    there is text.)

    Args:
        tokens: ``[B, L]`` the padded batch, prompts left-padded to ``prompt_length``.
        attention_mask: ``[B, L]`` 1 on real tokens.
        text_position_ids: ``[B, L]`` the batch's 1-D positions.
        image_grid_thw: per row, ``[images, 3]`` grids of its images.
        tokenizer: the model's tokenizer (its vision token ids are looked up by name).
        merge_size: the vision tower's spatial merge (``vision_config.spatial_merge_size``).
        prompt_length: ``P``, the width of the prompt part.
    """
    from verl.models.transformers.qwen2_vl import get_rope_index

    processor = SimpleNamespace(
        image_processor=SimpleNamespace(merge_size=merge_size), tokenizer=tokenizer
    )
    p = prompt_length
    rows = []
    for i in range(tokens.shape[0]):
        axes = torch.ones(3, tokens.shape[1], dtype=torch.int64)
        prompt_mask = attention_mask[i, :p]
        axes[:, :p] = get_rope_index(
            processor,
            input_ids=tokens[i, :p],
            image_grid_thw=image_grid_thw[i],
            attention_mask=prompt_mask,
        ).to(torch.int64)
        start = int(axes[:, :p][:, prompt_mask.bool()].max()) + 1
        response_mask = attention_mask[i, p:].bool()
        steps = torch.arange(int(response_mask.sum()), dtype=torch.int64) + start
        axes[:, p:][:, response_mask] = steps.expand(3, -1)
        rows.append(torch.cat([text_position_ids[i].unsqueeze(0), axes], dim=0))
    return torch.stack(rows)


#: the attention classes whose Hugging Face ``forward`` verl replaces, by module and name
_VL_ATTENTION = (
    ("transformers.models.qwen2_vl.modeling_qwen2_vl", "Qwen2VLAttention"),
    ("transformers.models.qwen2_5_vl.modeling_qwen2_5_vl", "Qwen2_5_VLAttention"),
)
_HF_FORWARDS: dict[type, Any] = {}


def keep_hf_vl_attention() -> None:
    """Keep Hugging Face's own attention in Qwen2-VL / Qwen2.5-VL under verl's monkey patch.

    verl 0.9.1 replaces their attention ``forward`` (``qwen2_vl_attn_forward``) whenever it
    trains without padding. That forward imports ``apply_multimodal_rotary_pos_emb``, which
    ``transformers`` 5 no longer has (its rotary module now mixes the three axes itself), and
    calls flash-attention directly. The Hugging Face forward does the rotation right for this
    ``transformers`` and goes through the configured attention implementation
    (``sdpa_packed`` on CPU, flash-attention 2 on CUDA), which reads the packed sequences'
    boundaries from the text positions. So the name verl assigns from is pointed back at the
    Hugging Face forward of each class (idempotent).
    """

    import verl.models.transformers.qwen2_vl as verl_qwen2_vl

    _hf_model_classes()  # their Hugging Face forwards too, for localize_vl_patches
    _hf_classes(_VL_ATTENTION)

    def hf_attention_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        for cls in type(self).__mro__:
            if cls in _HF_FORWARDS:
                return _HF_FORWARDS[cls](self, *args, **kwargs)
        raise TypeError(f"no Hugging Face attention forward known for {type(self).__name__}")

    if _HF_FORWARDS:
        verl_qwen2_vl.qwen2_vl_attn_forward = hf_attention_forward


def fix_nested_ragged_dim() -> None:
    """Rebuild verl's split nested tensors with their ragged dimension where it was.

    Image rows' ``position_ids`` are nested ``[B, 4, j]`` (ragged last). When verl splits a
    batch into micro-batches (``tensordict_utils.chunk_tensordict``) it rebuilds each part with
    ``nested_tensor_from_tensor_list``, which makes a tensor ragged in its first dimension and
    then overwrites ``_ragged_idx``; under torch 2.13 that tensor's ``values()`` no longer hold
    the rows (a micro-batch of one 43-token row read ``[4, 4]`` positions). Building it with
    ``nested_tensor_from_jagged(..., jagged_dim=ragged_idx)`` keeps the layout; 1-D rows
    (``input_ids``) are built as before (idempotent).
    """
    import verl.utils.tensordict_utils as tu

    original = tu.nested_tensor_from_tensor_list
    if getattr(original, "_trinity_fixed", False):
        return

    def nested_tensor_from_tensor_list(
        tensors: list[Tensor], ragged_idx: Optional[int] = None
    ) -> Tensor:
        sample_dim = tensors[0].dim()
        ragged_idx = sample_dim if ragged_idx is None else ragged_idx
        if sample_dim < 2 or ragged_idx < 2:
            return original(tensors, ragged_idx=ragged_idx)
        values = torch.cat(tensors, dim=ragged_idx - 1)
        lengths = torch.tensor([t.shape[ragged_idx - 1] for t in tensors], device=values.device)
        offsets = torch.zeros(len(tensors) + 1, dtype=torch.long, device=values.device)
        torch.cumsum(lengths, dim=0, out=offsets[1:])
        return torch.nested.nested_tensor_from_jagged(
            values, offsets=offsets, jagged_dim=ragged_idx
        )

    nested_tensor_from_tensor_list._trinity_fixed = True  # type: ignore[attr-defined]
    tu.nested_tensor_from_tensor_list = nested_tensor_from_tensor_list


def nested_mrope_positions(position_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """``[B, 4, L]`` padded positions as a nested ``[B, 4, j]`` tensor, ragged in its last
    dimension (the real tokens of each row).

    verl's ``left_right_2_no_padding`` builds it with ``as_nested_tensor``, which infers the
    ragged dimension from the rows' shapes: when every row has the same length it picks the
    first (``[B, j, L]``, the 4 read as lengths) and the positions reach the model garbled.
    """
    rows = [position_ids[i][:, attention_mask[i].bool()] for i in range(position_ids.shape[0])]
    lengths = torch.tensor([row.shape[1] for row in rows])
    offsets = torch.zeros(len(rows) + 1, dtype=torch.long)
    torch.cumsum(lengths, dim=0, out=offsets[1:])
    return torch.nested.nested_tensor_from_jagged(
        torch.cat(rows, dim=1).contiguous(), offsets=offsets, jagged_dim=2
    )


#: the model classes whose ``forward`` verl's monkey patch replaces for the whole process
_VL_MODELS = (
    ("transformers.models.qwen2_vl.modeling_qwen2_vl", "Qwen2VLForConditionalGeneration"),
    ("transformers.models.qwen2_vl.modeling_qwen2_vl", "Qwen2VLModel"),
    ("transformers.models.qwen2_5_vl.modeling_qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration"),
    ("transformers.models.qwen2_5_vl.modeling_qwen2_5_vl", "Qwen2_5_VLModel"),
)


def _hf_classes(names: tuple[tuple[str, str], ...]) -> list[type]:
    """The classes of ``names`` (module, class); each one's ``forward`` is kept in
    :data:`_HF_FORWARDS` while it is still the Hugging Face one (before verl replaces it)."""
    import importlib

    classes = []
    for module_name, class_name in names:
        cls = getattr(importlib.import_module(module_name), class_name)
        forward = cls.__dict__.get("forward")
        if cls not in _HF_FORWARDS and getattr(forward, "__module__", "") == module_name:
            _HF_FORWARDS[cls] = forward
        classes.append(cls)
    return classes


def _hf_model_classes() -> list[type]:
    return _hf_classes(_VL_MODELS)


def localize_vl_patches(module: Any) -> None:
    """Keep verl's forwards of a Qwen2-VL model on the trainer's ``module`` only.

    verl assigns its forwards (image embeddings merged before the language model, the 4-row
    positions it requires) to the ``transformers`` classes, so every other model of those
    classes in the process (a transformers rollout engine beside the trainer, a reference
    model) would then need verl's positions and fail without them. Here the forwards verl set
    move to ``module`` and its inner model (instance attributes), and the classes get their
    Hugging Face forwards back. Text models are left alone.
    """
    import types

    classes = _hf_model_classes()
    for part in (module, getattr(module, "model", None)):
        if part is None:
            continue
        for cls in type(part).__mro__:
            if cls in classes and cls in _HF_FORWARDS:
                patched = cls.__dict__.get("forward")
                if patched is not None and patched is not _HF_FORWARDS[cls]:
                    part.forward = types.MethodType(patched, part)
                break
    for cls in classes:
        if cls in _HF_FORWARDS:
            cls.forward = _HF_FORWARDS[cls]
