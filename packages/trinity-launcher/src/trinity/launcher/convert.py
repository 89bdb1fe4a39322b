"""``trinity convert``: a trainer checkpoint to a Hugging Face model directory, in seconds.

A run saves ``<checkpoint_job_dir>/global_step_N/actor/`` in verl's layout: one
``model_world_size_W_rank_R.pt`` per trainer rank (the FSDP2 shards: a ``torch.save`` of the
module's state dict, each parameter a ``DTensor`` holding that rank's slice),
``huggingface/`` (config and tokenizer; with the weights too when the trainer wrote them,
``trainer.save_hf_checkpoint``) and ``trinity_engine.json`` (the engine settings).

Conversion boots no training engine and no process group:

* the trainer's ``huggingface/`` already holds the weights (``*.safetensors``): they are the
  result. Without ``--out`` nothing is written; with ``--out DIR`` the directory is copied
  there.
* only the shards: they are read on the CPU (``torch.load`` of tensors only, no pickled code),
  each parameter's slices concatenated along its shard dimension (verl's own model merger
  does the same) and written as safetensors in the model's dtype with the config, tokenizer
  and generation config, to ``--out`` or, by default, into ``huggingface/`` (which then
  holds what ``bench`` mode, vLLM and ``transformers`` load). No precision is lost on the way
  (verl's merger casts to bf16).

The trainer's ``huggingface/`` weights are never rewritten unless ``--out`` names that
directory. A checkpoint whose shards this reader does not understand (a 2-D device mesh, a
partial placement) falls back to loading it in the trainer engine, one CPU process per rank,
with the engine's output kept out of the console (shown only if it fails).

A LoRA run's checkpoint (``lora_rank`` > 0 in ``trinity_engine.json``) holds the adapter
alone. By default it is exported in PEFT's format (``adapter_config.json``,
``adapter_model.safetensors``, tokenizer) to ``--out`` or ``<actor>/lora_adapter/``, read
offline from the shards the same way (:mod:`trinity.launcher.convert_lora`): a small file
that ``PeftModel.from_pretrained`` puts on the base model. ``--merged`` writes the merged
model (base + ``alpha / r * B @ A``) instead, as above: the trainer's ``huggingface/``
weights where ``save_hf_checkpoint`` wrote them, else the trainer engine rebuilds base and
adapter (the base model must be there). For a full fine-tuning checkpoint ``--merged`` changes
nothing: it is the full model already.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

from trinity.launcher.convert_shards import (  # noqa: F401 - the names this module always had
    _RANK_SCRIPT,
    _SHARD,
    _STEP_DIR,
    _WEIGHT_INDEXES,
    _WEIGHT_SUFFIXES,
    ConvertError,
    _build_engine,
    _check_model_path,
    _config_source,
    _convert_in_process,
    _convert_with_engine,
    _copy_hf,
    _engine_settings,
    _is_weight_file,
    _load_shard,
    _quiet_device_mesh,
    _same_dir,
    _shard_files,
    _UnsupportedShards,
    _write_hf,
    find_actor_dir,
    has_hf_weights,
    merge_shards,
    unshard,
)
from trinity.utils.log import get_logger

logger = get_logger(__name__)


# ---------------------------------------------------------------------- the command
def is_lora_checkpoint(checkpoint: Union[str, os.PathLike]) -> bool:
    """Whether the checkpoint is a LoRA run's (``lora_rank`` > 0 in ``trinity_engine.json``):
    its shards hold the adapter only, and ``convert`` exports that adapter by default."""
    actor = find_actor_dir(checkpoint)
    return int(_engine_settings(actor, None).get("lora_rank") or 0) > 0


def convert_checkpoint(
    checkpoint: Union[str, os.PathLike],
    out: Optional[Union[str, os.PathLike]] = None,
    model_path: Optional[str] = None,
    merged: bool = False,
) -> Path:
    """A Hugging Face directory of a trainer checkpoint; return its path.

    A LoRA checkpoint gives its adapter in PEFT's format (to ``out`` or ``<actor>/
    lora_adapter``; see :func:`~trinity.launcher.convert_lora.export_adapter`) unless
    ``merged``: then, like any other checkpoint, the full model.

    The full model: where the trainer already wrote the weights
    (``actor/huggingface/*.safetensors``) that directory is the answer: returned as it is
    without ``out``, copied to ``out`` otherwise. Otherwise the shards are merged on the CPU
    (see :func:`merge_shards`) and written in the model's dtype, exactly the values the trainer
    held, to ``out`` or the checkpoint's ``huggingface/`` (a LoRA checkpoint's through the
    trainer engine, which merges base and adapter). ``out`` naming the checkpoint's
    ``huggingface/`` rewrites it from the shards even when it holds weights.

    Args:
        checkpoint: an actor, ``global_step_N`` or run directory (see :func:`find_actor_dir`).
        out: where to write (default: the checkpoint's ``huggingface/`` directory; for a LoRA
            adapter ``lora_adapter/``).
        model_path: the base model directory, if not where the run found it (needed only when
            the checkpoint has no ``huggingface/config.json``, or to merge an adapter; the
            adapter's ``base_model_name_or_path`` then names it).
        merged: a LoRA checkpoint's merged model (base + adapter) instead of the adapter; a
            full fine-tuning checkpoint is the full model either way (no effect there).

    Raises:
        ConvertError: no checkpoint there, or the base model is missing where it is needed.
    """
    actor = find_actor_dir(checkpoint)
    settings = _engine_settings(actor, model_path)
    world_size, shards = _shard_files(actor)
    _check_model_path(actor, model_path, needed=False)
    if int(settings.get("lora_rank") or 0) > 0 and not merged:
        from trinity.launcher.convert_lora import export_adapter

        return export_adapter(actor, shards, settings, out)
    hf = actor / "huggingface"
    target = Path(out) if out is not None else hf
    rewrite = out is not None and _same_dir(target, hf)
    if has_hf_weights(hf) and not rewrite:
        if out is None:
            logger.info("%s already holds the trainer's Hugging Face weights", hf)
            return hf
        _copy_hf(hf, target)
        return target
    try:
        state = merge_shards(shards)
    except _UnsupportedShards as exc:
        logger.info("reading the shards in the trainer engine (%s)", exc)
        _check_model_path(actor, settings.get("model_path"), needed=True)
        _convert_with_engine(actor, target, settings, world_size)
        return target
    _write_hf(state, _config_source(actor, settings.get("model_path")), target)
    return target
