"""Image prompts for Qwen2-VL-style models: token ids plus the vision tower's inputs.

A chat template writes each image part of a message as one ``<|image_pad|>`` placeholder
(between ``<|vision_start|>`` and ``<|vision_end|>``). The model reads an image as
``grid_t * grid_h * grid_w / merge_size**2`` tokens, so each placeholder is repeated that many
times, and the image processor's ``pixel_values`` and ``image_grid_thw`` go beside the ids.
Hugging Face's ``Qwen2_5_VLProcessor`` does exactly this; it is done here from the tokenizer
and the image processor alone because that class also builds a video processor, which needs
torchvision (PyPI has no CPU build of it for this torch, see ``docs/vlm.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import torch
from torch import Tensor

from trinity.common.models.mm_utils import image_refs, load_image, should_use_processor

__all__ = [
    "IMAGE_PAD",
    "VISION_TOKENS",
    "VLPrompt",
    "load_image_processor",
    "mm_token_type_ids",
    "render_vl_prompt",
    "vision_token_ids",
]

#: The placeholder the chat template writes for an image.
IMAGE_PAD = "<|image_pad|>"
#: Qwen2-VL's vision tokens: they mark image (and video) inputs and are never generated.
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", IMAGE_PAD, "<|video_pad|>")


@dataclass
class VLPrompt:
    """A rendered image prompt.

    Attributes:
        prompt_ids: token ids, each image's placeholder repeated to its token count.
        multi_modal_inputs: ``pixel_values`` ``(patches, channels * temporal_patch *
            patch**2)`` float and ``image_grid_thw`` ``(images, 3)`` int64, what the model's
            forward takes beside ``input_ids``.
        images: the images as RGB PIL images, in prompt order (vLLM's ``multi_modal_data``).
    """

    prompt_ids: list[int]
    multi_modal_inputs: dict[str, Tensor] = field(default_factory=dict)
    images: list[Any] = field(default_factory=list)


def load_image_processor(model_path: Union[str, Path]) -> Optional[Any]:
    """The model's image processor, or None for a text-only model (no preprocessor config)."""
    if not should_use_processor(model_path):
        return None
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(str(model_path))


def render_vl_prompt(
    tokenizer: Any,
    image_processor: Any,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool = True,
    tools: Optional[list[dict[str, Any]]] = None,
) -> VLPrompt:
    """Render ``messages`` (image parts included, see :mod:`trinity.common.models.mm_utils`)
    with ``tokenizer``'s chat template and ``image_processor``.

    Raises:
        ValueError: the template wrote a different number of image placeholders than the
            messages hold images (a template that drops image parts), or an image is unreadable.
    """
    images = [load_image(ref) for ref in image_refs(messages)]
    text = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False
    )
    pieces = text.split(IMAGE_PAD)
    if len(pieces) - 1 != len(images):
        raise ValueError(
            f"the chat template wrote {len(pieces) - 1} {IMAGE_PAD} placeholder(s) for "
            f"{len(images)} image(s): use a template that writes each image part as "
            f"<|vision_start|>{IMAGE_PAD}<|vision_end|> (a vision-language model's)"
        )
    if not images:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return VLPrompt([int(t) for t in ids])
    processed = image_processor(images=images, return_tensors="pt")
    grid = processed["image_grid_thw"]
    merge = int(getattr(image_processor, "merge_size", 2))
    expanded = pieces[0]
    for piece, thw in zip(pieces[1:], grid, strict=True):
        expanded += IMAGE_PAD * (int(thw.prod()) // merge**2) + piece
    ids = tokenizer(expanded, add_special_tokens=False)["input_ids"]
    return VLPrompt(
        [int(t) for t in ids],
        {"pixel_values": processed["pixel_values"], "image_grid_thw": grid},
        images,
    )


def mm_token_type_ids(input_ids: Tensor, image_token_id: int) -> Tensor:
    """``[B, L]`` int: 1 on image tokens, 0 elsewhere.

    ``transformers`` 5 computes a Qwen2-VL model's rotary positions over the three axes only
    when ``mm_token_type_ids`` comes with the image inputs (its processor returns it);
    without it the image tokens get plain text positions. The trainer computes the positions
    from the token ids itself, so this is made where the model is called, not stored.
    """
    return (input_ids == image_token_id).to(torch.int32)


def vision_token_ids(tokenizer: Any) -> list[int]:
    """Ids of the :data:`VISION_TOKENS` the tokenizer has (an engine keeps them out of its
    samples: one sampled into a response would read as an image placeholder)."""
    vocab = tokenizer.get_vocab()
    return [int(vocab[token]) for token in VISION_TOKENS if token in vocab]
