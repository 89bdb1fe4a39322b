"""``trinity convert``: a trainer checkpoint (sharded FSDP state) to a Hugging Face model directory.

A run saves ``<checkpoint_job_dir>/global_step_N/actor/`` in verl's layout: one
``model_world_size_W_rank_R.pt`` per trainer rank, ``huggingface/`` (config and tokenizer, no
weights) and ``trinity_engine.json`` (the engine settings). Conversion loads the shards into the
trainer engine on the CPU and writes the weights into ``huggingface/`` by default, which is where
``bench`` mode, vLLM and ``transformers`` look for them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Optional, Union

_STEP_DIR = re.compile(r"^global_step_(\d+)$")


class ConvertError(ValueError):
    """The given path holds no convertible checkpoint; the message says what is there."""


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


_RANK_SCRIPT = """
import json, sys
from trinity.launcher.convert import _convert_in_process
_convert_in_process(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
"""


def _engine_settings(actor: Path, model_path: Optional[str]) -> dict:
    meta_file = actor / "trinity_engine.json"
    if not meta_file.is_file():
        raise ConvertError(f"{actor}: no trinity_engine.json (not a Trinity trainer checkpoint)")
    meta = json.loads(meta_file.read_text())
    settings = dict(meta.get("settings") or {})
    settings["model_path"] = model_path or settings.get("model_path")
    if not settings["model_path"] or not Path(settings["model_path"]).is_dir():
        raise ConvertError(
            f"{actor}: the base model {settings['model_path']!r} (recorded in "
            "trinity_engine.json) is not a directory here; it gives the module's architecture: "
            "pass --model-path"
        )
    settings["device"] = "cpu"  # conversion needs no accelerator
    settings["dtype"] = "float32"
    settings["param_offload"] = settings["optimizer_offload"] = False
    if settings.get("tokenizer_path") and not Path(settings["tokenizer_path"]).exists():
        settings["tokenizer_path"] = None
    return settings


def _convert_in_process(actor: str, target: str, settings: dict) -> None:
    """Build the engine (joins ``env://`` when ``WORLD_SIZE`` > 1), load, write HF weights."""
    import torch

    from trinity.launcher.trainer import VerlEngineSettings, VerlTrainEngine

    if isinstance(settings.get("betas"), list):
        settings["betas"] = tuple(settings["betas"])
    known = VerlEngineSettings.__dataclass_fields__
    engine = VerlTrainEngine(
        VerlEngineSettings(**{k: v for k, v in settings.items() if k in known})
    )
    engine.load_checkpoint(actor)
    dtype = getattr(torch, str(engine.hf_config.to_dict().get("dtype") or "float32"), None)
    engine.save_hf(target, dtype=dtype if isinstance(dtype, torch.dtype) else None)


def convert_checkpoint(
    checkpoint: Union[str, os.PathLike],
    out: Optional[Union[str, os.PathLike]] = None,
    model_path: Optional[str] = None,
) -> Path:
    """Merge a trainer checkpoint into a Hugging Face model directory; return its path.

    The trainer engine itself loads the shards (one CPU process per rank the checkpoint was
    saved with, gloo) and writes the full weights in the base model's dtype, so the result is
    exactly what the trainer held -- no precision is lost on the way (verl's own model merger
    casts to bf16).

    Args:
        checkpoint: an actor, ``global_step_N`` or run directory (see :func:`find_actor_dir`).
        out: where to write (default: the checkpoint's ``huggingface/`` directory).
        model_path: the base model directory, if not where the run found it.

    Raises:
        ConvertError: no checkpoint there, or the base model is missing.
    """
    actor = find_actor_dir(checkpoint)
    settings = _engine_settings(actor, model_path)
    world_sizes = {
        int(m.group(1))
        for p in actor.glob("model_world_size_*_rank_*.pt")
        if (m := re.match(r"model_world_size_(\d+)_rank_\d+\.pt", p.name))
    }
    if len(world_sizes) != 1:
        raise ConvertError(f"{actor}: shards of several world sizes {sorted(world_sizes)}")
    world_size = world_sizes.pop()
    target = Path(out) if out is not None else actor / "huggingface"
    if world_size == 1:
        _convert_in_process(str(actor), str(target), settings)
        return target
    from trinity.launcher.trainer.ranks import run_ranks

    results = run_ranks(
        _RANK_SCRIPT,
        [str(actor), str(target), json.dumps(settings)],
        world_size,
        env={"CUDA_VISIBLE_DEVICES": ""},
    )
    for rank, (code, log) in enumerate(results):
        if code != 0:
            raise RuntimeError(f"conversion rank {rank} failed:\n{log[-3000:]}")
    return target
