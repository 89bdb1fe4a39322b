"""The ``vlm`` preset of :mod:`trinity.launcher.tiny_model`: a tiny random Qwen2.5-VL.

A vision-language model with the architecture of ``Qwen2_5_VLForConditionalGeneration`` (a
vision tower of ``depth`` blocks whose patches are merged 2 x 2 into tokens of the text
model, multimodal rotary positions), small enough to build in a second and to train on a CPU.
The directory holds what a downloaded Qwen2.5-VL holds and nothing from a hub:

* ``config.json`` and ``model.safetensors``: text hidden 64 in 2 layers (as the other
  presets), vision hidden 32 in ``vision_depth`` blocks of one 32-wide head;
* ``tokenizer.json``: the ``arithmetic`` presets' vocabulary (digits, ``+-*=``, space,
  newline, chat words; other characters are dropped) plus Qwen's vision tokens
  (``<|vision_start|>``, ``<|vision_end|>``, ``<|image_pad|>``, ``<|video_pad|>``), with
  :data:`VL_CHAT_TEMPLATE`, which writes an image part of a message as
  ``<|vision_start|><|image_pad|><|vision_end|>``;
* ``preprocessor_config.json``: Qwen2-VL's image processor (14-pixel patches, merge 2,
  temporal patch 2) resizing every image to between 56 x 56 and 112 x 112 pixels, so an image
  is 4 to 16 tokens.

Each ``<|image_pad|>`` is expanded to the image's token count (``grid_t * grid_h * grid_w / 4``)
before the model sees it: :func:`trinity.launcher.engines.mm_inputs.render_vl_prompt` does it
from the tokenizer and the image processor alone, as Hugging Face's ``Qwen2_5_VLProcessor``
does (that class needs torchvision, which has no CPU build for this torch on PyPI).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trinity.launcher.engines.mm_inputs import VISION_TOKENS

__all__ = [
    "IMAGE_MAX_PIXELS",
    "IMAGE_MIN_PIXELS",
    "VL_CHAT_TEMPLATE",
    "write_tiny_vlm",
]


#: Images are resized to between these pixel counts (kept multiples of 28 x 28): 4 to 16
#: tokens per image after the 2 x 2 merge.
IMAGE_MIN_PIXELS = 56 * 56
IMAGE_MAX_PIXELS = 112 * 112

#: Qwen2-VL's chat template, tools left out: a message's content is text or a list of parts
#: (``{"type": "text", "text": ...}``, ``{"type": "image", ...}``, OpenAI's
#: ``{"type": "image_url", "image_url": {...}}``, ``{"type": "video", ...}``); each image part
#: is written ``<|vision_start|><|image_pad|><|vision_end|>``.
VL_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' or part['type'] == 'image_url' %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'video' or part['type'] == 'video_url' %}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' %}{{- part['text'] }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def write_tiny_vlm(path: Path, spec: Any, tokenizer: Any) -> None:
    """Write a tiny random Qwen2.5-VL, ``tokenizer`` (with the vision tokens added) and its
    image processor to ``path``.

    Args:
        path: the model directory (created by the caller).
        spec: a :class:`~trinity.launcher.tiny_model.TinyModelSpec` whose ``vision_depth`` is
            at least 1; its text sizes shape the language model.
        tokenizer: the text tokenizer of ``spec.tokenizer``; changed in place.
    """
    from transformers import GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    from trinity.launcher.tiny_weights import seeded_model

    tokenizer.add_special_tokens(
        {"additional_special_tokens": ["<|im_start|>", "<|im_end|>", *VISION_TOKENS]}
    )
    tokenizer.chat_template = VL_CHAT_TEMPLATE
    token = tokenizer.convert_tokens_to_ids
    head_dim = spec.hidden_size // spec.num_attention_heads
    # Multimodal rotary sections (time, height, width) over head_dim / 2 frequencies, in
    # Qwen2.5-VL's proportions (16, 24, 24 of 64).
    quarter = head_dim // 8
    mrope_section = [quarter, (head_dim // 2 - quarter) // 2, (head_dim // 2 - quarter + 1) // 2]
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": spec.hidden_size,
            "intermediate_size": spec.intermediate_size,
            "num_hidden_layers": spec.num_hidden_layers,
            "num_attention_heads": spec.num_attention_heads,
            "num_key_value_heads": spec.num_key_value_heads,
            "max_position_embeddings": spec.max_position_embeddings,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1000000.0,
                "mrope_section": mrope_section,
            },
            "tie_word_embeddings": True,
            "initializer_range": spec.initializer_range,
            "bos_token_id": token("<|endoftext|>"),
            "eos_token_id": token("<|im_end|>"),
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": spec.vision_depth,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 1,  # head_dim 32, as vLLM's CPU attention needs
            "out_hidden_size": spec.hidden_size,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [spec.vision_depth - 1],
            "initializer_range": spec.initializer_range,
        },
        image_token_id=token("<|image_pad|>"),
        video_token_id=token("<|video_pad|>"),
        vision_start_token_id=token("<|vision_start|>"),
        vision_end_token_id=token("<|vision_end|>"),
        tie_word_embeddings=True,
        dtype="float32",
    )
    model = seeded_model(Qwen2_5_VLForConditionalGeneration, config, spec.seed)
    model.generation_config = GenerationConfig(
        bos_token_id=token("<|endoftext|>"),
        eos_token_id=token("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        do_sample=True,
    )
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    Qwen2VLImageProcessorPil(
        min_pixels=IMAGE_MIN_PIXELS,
        max_pixels=IMAGE_MAX_PIXELS,
        patch_size=14,
        merge_size=2,
        temporal_patch_size=2,
    ).save_pretrained(path)
