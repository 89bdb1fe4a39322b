"""The pieces of ``trinity convert`` that read a checkpoint: finding it, its shards and engine
settings, the offline merge (:func:`unshard`), writing a Hugging Face directory, and the
trainer-engine fallback. Split from :mod:`trinity.launcher.convert` (the command, which
re-exports these names) so that :mod:`trinity.launcher.convert_lora` builds on them without
an import circle.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional, Union

from trinity.utils.log import get_logger

logger = get_logger(__name__)

_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_SHARD = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
#: files of a model directory that are weights (not copied from the config source)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


class ConvertError(ValueError):
    """The given path holds no convertible checkpoint; the message says what is there."""


class _UnsupportedShards(Exception):
    """Shards laid out in a way the offline merge does not read (the engine does)."""


def find_actor_dir(path: Union[str, os.PathLike]) -> Path:
    """The ``actor`` checkpoint directory that ``path`` names.

    ``path`` may be the actor directory itself, a ``global_step_N`` directory, or a run
    directory (the latest ``global_step_N`` is taken).
    """
    path = Path(path)
    if not path.is_dir():
        raise ConvertError(f"{path}: no such directory")
    if any(path.glob("model_world_size_*_rank_*.pt")):
        return path
    if (path / "actor").is_dir():
        return find_actor_dir(path / "actor")
    steps = sorted(
        (int(m.group(1)), p)
        for p in path.iterdir()
        if p.is_dir() and (m := _STEP_DIR.match(p.name))
    )
    if steps:
        return find_actor_dir(steps[-1][1])
    listing = ", ".join(sorted(p.name for p in path.iterdir())[:20]) or "nothing"
    raise ConvertError(
        f"{path}: not a checkpoint (expected model_world_size_*_rank_*.pt, an actor/ "
        f"directory or global_step_N/ directories; found: {listing})"
    )


def has_hf_weights(directory: Union[str, os.PathLike]) -> bool:
    """Whether ``directory`` holds Hugging Face safetensors weights."""
    directory = Path(directory)
    return directory.is_dir() and any(directory.glob("*.safetensors"))


def _same_dir(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _shard_files(actor: Path) -> tuple[int, list[Path]]:
    """The world size of the shards in ``actor`` and their files in rank order."""
    found: dict[int, dict[int, Path]] = {}
    for p in actor.iterdir():
        if m := _SHARD.match(p.name):
            found.setdefault(int(m.group(1)), {})[int(m.group(2))] = p
    if len(found) != 1:
        raise ConvertError(f"{actor}: shards of several world sizes {sorted(found)}")
    world_size, ranks = found.popitem()
    missing = sorted(set(range(world_size)) - set(ranks))
    if missing:
        raise ConvertError(
            f"{actor}: the checkpoint of world size {world_size} lacks the shards of rank(s) "
            f"{missing}"
        )
    return world_size, [ranks[r] for r in range(world_size)]


def _engine_settings(actor: Path, model_path: Optional[str]) -> dict:
    meta_file = actor / "trinity_engine.json"
    if not meta_file.is_file():
        raise ConvertError(f"{actor}: no trinity_engine.json (not a Trinity trainer checkpoint)")
    meta = json.loads(meta_file.read_text())
    settings = dict(meta.get("settings") or {})
    settings["model_path"] = model_path or settings.get("model_path")
    return settings


def _check_model_path(actor: Path, path: Optional[str], needed: bool) -> None:
    """An explicit ``--model-path`` must exist; the recorded one only where it is ``needed``."""
    if path and Path(path).is_dir():
        return
    if path or needed:
        raise ConvertError(
            f"{actor}: the base model {path!r} (recorded in trinity_engine.json, or "
            "--model-path) is not a directory here; it gives the module's architecture: "
            "pass --model-path"
        )


# ---------------------------------------------------------------------- offline merge
@contextmanager
def _quiet_device_mesh() -> Iterator[None]:
    """Loading a DTensor outside a process group makes torch warn about its device mesh
    (harmless here: the mesh is never used)."""
    log = logging.getLogger("torch.distributed.device_mesh")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _load_shard(path: Path) -> dict[str, Any]:
    import torch
    import torch.distributed.tensor  # noqa: F401 - lets weights_only loading accept DTensors

    with _quiet_device_mesh():
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception as exc:  # noqa: BLE001 - an unexpected file: the engine reads it
            raise _UnsupportedShards(f"{path.name}: {exc}") from exc
    if not isinstance(state, dict):
        raise _UnsupportedShards(f"{path.name} holds a {type(state).__name__}, not a state dict")
    return state


def merge_shards(shards: list[Path]) -> dict[str, Any]:
    """The full state dict of a checkpoint's model shards (rank order), on the CPU.

    See :func:`unshard`. A LoRA checkpoint's shards (the adapter alone, peft's names) are no
    model: :func:`~trinity.launcher.convert_lora.export_adapter` reads them.

    Raises:
        _UnsupportedShards: a layout this merge does not read (see :func:`unshard`), or the
            shards of a LoRA adapter.
    """
    states = [_load_shard(p) for p in shards]
    if any("lora_" in key for key in states[0]):  # a LoRA run keeps the adapter only (and peft's
        # names): the trainer engine rebuilds base + adapter and writes the merged weights
        raise _UnsupportedShards("a LoRA checkpoint (adapter shards only)")
    return unshard(states)


def unshard(states: list[dict[str, Any]]) -> dict[str, Any]:
    """The full tensors of the ranks' loaded shard state dicts (rank order), on the CPU.

    A ``DTensor`` entry is the concatenation of the ranks' local slices along its ``Shard``
    dimension (a ``Replicate`` one is rank 0's); a plain tensor is replicated (rank 0's).
    Every result has the shape the ``DTensor`` records for the whole tensor.

    Raises:
        _UnsupportedShards: a layout this merge does not read (a device mesh of more than one
            dimension, a partial placement, shards that disagree on the keys).
    """
    import torch
    from torch.distributed.tensor import DTensor

    keys = list(states[0])
    for rank, state in enumerate(states[1:], start=1):
        if set(state) != set(keys):
            raise _UnsupportedShards(f"rank {rank}'s shard holds other keys than rank 0's")
    merged: dict[str, Any] = {}
    for key in keys:
        parts = [state[key] for state in states]
        first = parts[0]
        if not isinstance(first, DTensor):
            merged[key] = first
            continue
        if first.device_mesh.ndim != 1 or len(first.placements) != 1:
            raise _UnsupportedShards(f"{key}: a device mesh of {first.device_mesh.ndim} dims")
        placement = first.placements[0]
        if placement.is_replicate():
            full = first.to_local()
        elif placement.is_shard():
            dim = placement.dim  # type: ignore[attr-defined]
            full = torch.cat([p.to_local() for p in parts], dim=dim)
        else:
            raise _UnsupportedShards(f"{key}: placement {placement}")
        if tuple(full.shape) != tuple(first.shape):
            raise _UnsupportedShards(
                f"{key}: merged shape {tuple(full.shape)} != {tuple(first.shape)}"
            )
        merged[key] = full
    return merged


def _config_source(actor: Path, model_path: Optional[str]) -> Path:
    """Where the config and tokenizer come from: the checkpoint's ``huggingface/`` (verl
    writes them there with every checkpoint), else the base model."""
    hf = actor / "huggingface"
    if (hf / "config.json").is_file():
        return hf
    _check_model_path(actor, model_path, needed=True)
    assert model_path is not None
    return Path(model_path)


def _is_weight_file(name: str) -> bool:
    return name.endswith(_WEIGHT_SUFFIXES) or name in _WEIGHT_INDEXES


def _write_hf(state: dict[str, Any], source: Path, target: Path) -> None:
    """``state`` as safetensors in the config's dtype, and the non-weight files of
    ``source`` (config, tokenizer, chat template, generation config) beside it."""
    import torch
    from huggingface_hub import save_torch_state_dict

    config = json.loads((source / "config.json").read_text())
    name = config.get("dtype") or config.get("torch_dtype") or "float32"
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        dtype = torch.float32
    if config.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)  # stored once, as Hugging Face saves it
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    target.mkdir(parents=True, exist_ok=True)
    if not _same_dir(source, target):
        for item in source.iterdir():
            if item.is_file() and not _is_weight_file(item.name):
                shutil.copy2(item, target / item.name)
    save_torch_state_dict(state, str(target), safe_serialization=True)
    # the trainer records its own attention kernel in the config; a loader picks its own
    config.pop("attn_implementation", None)
    config["torch_dtype" if "torch_dtype" in config else "dtype"] = str(dtype).removeprefix(
        "torch."
    )
    (target / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _copy_hf(source: Path, target: Path) -> None:
    """Copy a Hugging Face directory (files only; real copies, so writing into one never
    changes the other)."""
    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.is_file():
            shutil.copy2(item, target / item.name)


# ---------------------------------------------------------------------- engine fallback
_RANK_SCRIPT = """
import json, sys
from trinity.launcher.convert_shards import _convert_in_process
_convert_in_process(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
"""


def _build_engine(settings: dict) -> Any:
    """The trainer engine of the recorded ``settings`` (joins ``env://`` when ``WORLD_SIZE``
    > 1)."""
    from trinity.launcher.trainer import VerlEngineSettings, VerlTrainEngine

    if isinstance(settings.get("betas"), list):
        settings["betas"] = tuple(settings["betas"])
    known = VerlEngineSettings.__dataclass_fields__
    return VerlTrainEngine(VerlEngineSettings(**{k: v for k, v in settings.items() if k in known}))


def _convert_in_process(actor: str, target: str, settings: dict) -> None:
    """Build the engine, load, write HF weights (merged ones for a LoRA checkpoint)."""
    import torch

    engine = _build_engine(settings)
    engine.load_checkpoint(actor)
    dtype = getattr(torch, str(engine.hf_config.to_dict().get("dtype") or "float32"), None)
    engine.save_hf(target, dtype=dtype if isinstance(dtype, torch.dtype) else None)


def _convert_with_engine(
    actor: Path, target: Path, settings: dict, world_size: int, script: str = _RANK_SCRIPT
) -> None:
    """The trainer engine loads the shards and writes the weights (``script``, called with
    actor, target and settings): one CPU process per rank (gloo), their output kept for the
    error message."""
    from trinity.launcher.trainer.ranks import run_ranks

    settings = dict(settings)
    settings["device"] = "cpu"  # conversion needs no accelerator
    settings["dtype"] = "float32"
    settings["param_offload"] = settings["optimizer_offload"] = False
    if settings.get("tokenizer_path") and not Path(settings["tokenizer_path"]).exists():
        settings["tokenizer_path"] = None
    if settings.get("lora_adapter_path") and not Path(settings["lora_adapter_path"]).exists():
        # the adapter a run continued only seeds the engine: the checkpoint's replaces it
        settings["lora_adapter_path"] = None
    results = run_ranks(
        script,
        [str(actor), str(target), json.dumps(settings)],
        world_size,
        env={"CUDA_VISIBLE_DEVICES": ""},
    )
    for rank, (code, log) in enumerate(results):
        if code != 0:
            raise RuntimeError(f"conversion rank {rank} failed:\n{log[-3000:]}")
