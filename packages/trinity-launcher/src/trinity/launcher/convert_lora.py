"""``trinity convert`` of a LoRA checkpoint: the adapter in PEFT's on-disk format.

A LoRA run (``model.lora_configs``) checkpoints the adapter alone: its
``model_world_size_W_rank_R.pt`` shards hold peft's parameter names
(``base_model.model.<module>.lora_A.default.weight``), the base weights being ``model_path``'s.
What a user wants from that is what ``PeftModel.save_pretrained`` writes, so
``PeftModel.from_pretrained(base, DIR)`` (or vLLM's ``LoRARequest``) loads it:

* ``adapter_model.safetensors``: the shards unsharded on the CPU (the same concatenation
  :func:`~trinity.launcher.convert.merge_shards` does, no engine, no process group), under the
  names ``get_peft_model_state_dict`` gives (no ``.default`` adapter segment), in the
  trainer's precision -- bit for bit what the trainer held;
* ``adapter_config.json``: the ``LoraConfig`` the engine trained with (verl's
  ``_build_lora_module``: ``task_type`` CAUSAL_LM, ``r``, ``lora_alpha``, ``target_modules``,
  ``exclude_modules``, ``bias`` none; or the continued adapter's own config for a
  ``lora_configs[0].path`` run), ``base_model_name_or_path`` the run's model;
* the tokenizer files of the checkpoint's ``huggingface/``.

The default directory is ``<actor>/lora_adapter/`` (verl's model merger names it so). Before
writing, peft builds the adapter on the base model's architecture on the ``meta`` device
(no weights, no memory): its names and shapes must be the export's, so a file that PEFT would
load with missing or unexpected keys is never written. Shards the offline reader does not
understand go through the trainer engine (one CPU process per rank) for the tensors only.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional, Union

from trinity.launcher.convert_shards import (
    ConvertError,
    _check_model_path,
    _config_source,
    _convert_with_engine,
    _load_shard,
    _same_dir,
    _UnsupportedShards,
    unshard,
)
from trinity.launcher.lora_adapter import (
    ADAPTER_DIR,
    AdapterFormatError,
    peft_layout,
    resolved_config_dict,
    trained_lora_config,
    write_adapter,
)
from trinity.utils.log import get_logger

logger = get_logger(__name__)

#: files of a model directory that a tokenizer or processor reads (copied beside the adapter)
_TOKENIZER_FILES = (
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.*",
    "merges.txt",
    "chat_template*",
    "*.tiktoken",
    "*.model",
    "preprocessor_config.json",
    "processor_config.json",
)

_ADAPTER_RANK_SCRIPT = """
import json, sys
from trinity.launcher.convert_lora import _adapter_in_process
_adapter_in_process(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
"""


def _adapter_in_process(actor: str, target: str, settings: dict) -> None:
    """The engine loads the checkpoint; every rank gathers the adapter's full tensors
    (collective), rank 0 saves them to ``target`` (a ``torch.save`` file)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from trinity.launcher.convert_shards import _build_engine

    engine = _build_engine(settings)
    engine.load_checkpoint(actor)
    state = {
        name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().cpu().clone()
        for name, p in engine.module.named_parameters()
        if "lora_" in name
    }
    if dist.get_rank() == 0:
        torch.save(state, target)


def _adapter_tensors(actor: Path, shards: list[Path], settings: dict) -> dict[str, Any]:
    """The adapter's full tensors under the engine's (peft's in-model) names: the shards
    unsharded offline, or through the engine where their layout is not understood."""
    import torch

    try:
        state = unshard([_load_shard(p) for p in shards])
    except _UnsupportedShards as exc:
        logger.info("reading the adapter shards in the trainer engine (%s)", exc)
        _check_model_path(actor, settings.get("model_path"), needed=True)
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / "adapter.pt"
            _convert_with_engine(actor, target, settings, len(shards), _ADAPTER_RANK_SCRIPT)
            state = torch.load(target, map_location="cpu", weights_only=True)
    strays = [key for key in state if "lora_" not in key]
    if strays:
        raise ConvertError(
            f"{actor}: the LoRA checkpoint also holds non-adapter tensors {strays[:3]}; a PEFT "
            "LoRA adapter cannot carry them (--merged writes the full model)"
        )
    if not state:
        raise ConvertError(f"{actor}: the LoRA checkpoint holds no adapter tensor")
    return state


def _lora_config(settings: dict[str, Any]) -> Any:
    try:
        return trained_lora_config(settings)
    except AdapterFormatError as exc:
        raise ConvertError(str(exc)) from exc


def export_adapter(
    actor: Path,
    shards: list[Path],
    settings: dict[str, Any],
    out: Optional[Union[str, os.PathLike]] = None,
) -> Path:
    """Write the LoRA adapter of the checkpoint ``actor`` in PEFT's format; return the
    directory (``out``, default ``<actor>/lora_adapter``).

    Raises:
        ConvertError: ``out`` is where bench mode looks for full weights (the checkpoint's
            ``huggingface/``, actor or step directory: an adapter there would pass for a
            model), or the shards are not the adapter peft builds from the recorded settings.
    """
    from peft import get_peft_model_state_dict

    target = Path(out) if out is not None else actor / ADAPTER_DIR
    for taken in (actor, actor / "huggingface", actor.parent):
        if _same_dir(target, taken):
            raise ConvertError(
                f"{target}: bench mode reads full model weights there; write the adapter "
                f"elsewhere (--out, default {actor / ADAPTER_DIR}) or the merged model "
                "(--merged)"
            )
    tensors = _adapter_tensors(actor, shards, settings)
    source = _config_source(actor, settings.get("model_path"))
    lora = _lora_config(settings)
    model, expected = peft_layout(source, lora, bool(settings.get("trust_remote_code")))
    # peft's own renaming (the adapter's name segment dropped), applied to the real tensors
    state = get_peft_model_state_dict(model, state_dict=tensors, save_embedding_layers=False)
    got = {k: tuple(v.shape) for k, v in state.items()}
    if got != expected or len(state) != len(tensors):
        missing, unexpected = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        shapes = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])
        raise ConvertError(
            f"{actor}: the adapter shards are not the adapter peft builds from the recorded "
            f"settings (r={lora.r}, target_modules={lora.target_modules!r}) on "
            f"{source / 'config.json'}: missing {missing[:3]}, unexpected {unexpected[:3]}, "
            f"other shapes {shapes[:3]}"
        )
    write_adapter(target, state, resolved_config_dict(model, settings.get("model_path")))
    if not _same_dir(source, target):
        for item in source.iterdir():
            if item.is_file() and any(fnmatch.fnmatch(item.name, p) for p in _TOKENIZER_FILES):
                shutil.copy2(item, target / item.name)
    dtypes = sorted({str(v.dtype).removeprefix("torch.") for v in state.values()})
    logger.info("LoRA adapter: %d tensors (%s) to %s", len(state), ", ".join(dtypes), target)
    return target
