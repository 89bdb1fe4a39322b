"""Weights export and checkpoints of Trinity's verl training engine.

This module owns :class:`VerlWeightsMixin`, the part of
:class:`~trinity.launcher.trainer.verl_engine.VerlTrainEngine` that moves weights out of the
FSDP2 shards: the full state dict (what weight synchronisation sends to the rollout engines),
the NCCL broadcast, a Hugging Face model directory (:meth:`save_hf`), and the sharded
save/resume of model, optimizer, lr-scheduler and RNG state (:meth:`save_checkpoint` /
:meth:`load_checkpoint`). All methods are collective over the trainer's ranks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional, Union

import torch
import torch.distributed as dist
from torch import Tensor

from trinity.launcher.trainer.verl_compat import (
    SUPPORTED_VERL_VERSION,
)

_CHECKPOINT_META = "trinity_engine.json"


class VerlWeightsMixin:
    """Weights and checkpoints of a verl engine (mixed into ``VerlTrainEngine``); expects
    ``self._engine``, ``self.settings``, ``self.rank``, ``self.hf_config``, ``self.tokenizer``,
    ``self._model_config``, ``self.global_step`` and ``self.is_lora``."""

    # ---------------------------------------------------------------- weights

    def iter_state_dict(self) -> Iterator[tuple[str, Tensor]]:
        """``(HF parameter name, full tensor)`` one at a time (gathered from the shards; on the
        engine's device). Collective: every rank must consume the whole iterator.

        With LoRA these are the merged weights (base + ``alpha / r * B @ A``) under the base
        model's names (:func:`~trinity.launcher.trainer.verl_lora.iter_merged_state_dict`): what
        the rollout engines and the Hugging Face export get, loaded like full weights."""
        if getattr(self, "is_lora", False):
            from trinity.launcher.trainer.verl_lora import iter_merged_state_dict

            yield from iter_merged_state_dict(self._engine)
            return
        params, _ = self._engine.get_per_tensor_param()
        for name, tensor in params:
            yield name, tensor.detach()

    def weight_sync_address(self) -> tuple[str, int]:
        """Host and a free port of this process's node: where rank 0 hosts the weight group."""
        from trinity.launcher.trainer.ranks import free_port

        try:
            import ray

            host = ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"
        except ImportError:
            host = "127.0.0.1"
        return host, free_port()

    def gpu_placement(self) -> tuple[str, list[str]]:
        """``(node id, GPU ids)`` of this rank's process (see ``weight_sync.local_gpus``)."""
        from trinity.launcher.weight_sync import local_gpus

        return local_gpus()

    def broadcast_weights(self, spec: Any) -> int:
        """Send the full weights to the rollout engines over the weight group ``spec``
        (:mod:`trinity.launcher.weight_sync`; ``sync_method: nccl``). Collective over the
        trainer's ranks (each gathers every full tensor); rank 0 broadcasts them one at a
        time. Returns the number of tensors sent (0 on other ranks)."""
        from trinity.launcher.weight_sync import WeightSender

        items = self.iter_state_dict()
        if self.rank != 0:
            for _ in items:
                pass
            return 0
        sender = getattr(self, "_weight_sender", None)
        if sender is None:
            sender = self._weight_sender = WeightSender()
        return sender.send(spec, items)

    def state_dict(self) -> dict[str, Tensor]:
        """The full, unsharded weights: HF parameter names, CPU tensors (copies), fp32.

        Keys and shapes are those of the Hugging Face model's ``state_dict()`` (a tied
        ``lm_head.weight`` is present, equal to ``model.embed_tokens.weight``, as in HF). This is
        what weight synchronisation sends to the rollout engines. Collective.
        """
        return {name: t.to("cpu", copy=True) for name, t in self.iter_state_dict()}

    def adapter_state_dict(self) -> dict[str, Tensor]:
        """The LoRA adapter alone in PEFT's format (CPU tensors): what weight synchronisation
        sends when the rollout engines serve base + adapter. Collective."""
        from trinity.launcher.trainer.verl_lora import adapter_state_dict

        self._require_lora("adapter_state_dict")
        return adapter_state_dict(self._engine)

    def save_lora_adapter(self, directory: Union[str, os.PathLike]) -> Path:
        """Write the adapter as ``PeftModel.save_pretrained`` does (``adapter_config.json`` and
        ``adapter_model.safetensors``) to ``directory``. Collective; rank 0 writes."""
        from trinity.launcher.lora_adapter import write_adapter
        from trinity.launcher.trainer.verl_lora import adapter_config_dict

        self._require_lora("save_lora_adapter")
        state = self.adapter_state_dict()
        if self.rank == 0:
            config = adapter_config_dict(self._engine, self.settings.model_path)
            write_adapter(directory, state, config)
        dist.barrier()
        return Path(directory)

    def weight_sync_bytes(self, adapter_only: bool = False) -> int:
        """Bytes one weight synchronisation moves: the adapter's tensors (``adapter_only``) or
        the full model's, from the parameters' shapes (nothing is gathered)."""
        total = 0
        for name, p in self._engine.module.named_parameters():
            if adapter_only and "lora_" not in name:
                continue
            if not adapter_only and "lora_" in name:
                continue  # merged into the base weights
            total += p.numel() * p.element_size()
        return total

    def _require_lora(self, what: str) -> None:
        if not getattr(self, "is_lora", False):
            raise RuntimeError(f"{what}: this engine trains no LoRA adapter")

    def save_hf(
        self, directory: Union[str, os.PathLike], dtype: Optional[torch.dtype] = None
    ) -> Path:
        """Write a Hugging Face model directory (config, safetensors, tokenizer, generation
        config) that ``AutoModelForCausalLM.from_pretrained`` loads. Collective; rank 0 writes.

        Args:
            directory: created if missing.
            dtype: weights dtype; ``None`` keeps the dtype of the model the engine was loaded
                from (``config.dtype``), fp32 if it names none.

        Tied embeddings are stored once (``lm_head.weight`` left out), as HF saves them.
        """
        from huggingface_hub import save_torch_state_dict

        path = Path(directory)
        state = self.state_dict()
        if self.rank == 0:
            config = self.hf_config
            if dtype is None:
                dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
                dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
                dtype = dtype if isinstance(dtype, torch.dtype) else torch.float32
            if getattr(config, "tie_word_embeddings", False):
                state.pop("lm_head.weight", None)
            state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
            path.mkdir(parents=True, exist_ok=True)
            save_torch_state_dict(state, str(path), safe_serialization=True)
            config = type(config).from_dict(config.to_dict())
            config.dtype = dtype
            config.save_pretrained(str(path))
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(str(path))
            generation_config = getattr(self._model_config, "generation_config", None)
            if generation_config is not None:
                generation_config.save_pretrained(str(path))
        dist.barrier()
        return path

    # ---------------------------------------------------------------- checkpoints

    def save_checkpoint(
        self, directory: Union[str, os.PathLike], step: Optional[int] = None
    ) -> Path:
        """Save model, optimizer, lr-scheduler and RNG state (sharded, one file set per rank,
        verl's layout) plus ``trinity_engine.json``; :meth:`load_checkpoint` resumes exactly.
        With LoRA the model part is the adapter's (the frozen base is ``model_path``'s) and the
        optimizer holds only the adapter's state.

        Args:
            directory: the checkpoint directory (e.g. ``<job>/global_step_10/actor``).
            step: the global step to record (default: :attr:`global_step`).
        """
        path = Path(directory)
        step = self.global_step if step is None else int(step)
        self._engine.save_checkpoint(str(path), global_step=step)
        if self.rank == 0:
            meta = {
                "global_step": step,
                "world_size": dist.get_world_size(),
                "verl_version": SUPPORTED_VERL_VERSION,
                "settings": asdict(self.settings),
            }
            (path / _CHECKPOINT_META).write_text(json.dumps(meta, indent=2, default=str))
        dist.barrier()
        return path

    def load_checkpoint(self, directory: Union[str, os.PathLike]) -> int:
        """Restore a :meth:`save_checkpoint` directory; returns (and sets) the global step.

        Raises:
            FileNotFoundError: no checkpoint of this world size in ``directory`` (the message
                lists what is there).
        """
        path = Path(directory)
        world_size, rank = dist.get_world_size(), dist.get_rank()
        expected = path / f"model_world_size_{world_size}_rank_{rank}.pt"
        if not expected.is_file():
            found = sorted(p.name for p in path.glob("*.pt")) if path.is_dir() else []
            raise FileNotFoundError(
                f"no checkpoint for world size {world_size} in {path} (looked for "
                f"{expected.name}; found: {', '.join(found) or 'nothing'})"
            )
        meta_file = path / _CHECKPOINT_META
        meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
        self._check_lora_matches(meta.get("settings") or {}, path)
        self._engine.load_checkpoint(str(path), del_local_after_load=False)
        if meta:
            self.global_step = int(meta.get("global_step", 0))
        return self.global_step

    def _check_lora_matches(self, saved: dict[str, Any], path: Path) -> None:
        """A checkpoint resumes only under the LoRA setup it was written with: a LoRA one
        holds the adapter alone, a full one no adapter (``model.lora_configs`` decides)."""
        keys = ("lora_rank", "lora_alpha", "lora_target_modules", "lora_exclude_modules")
        then = {k: saved.get(k, 0 if k == "lora_rank" else None) for k in keys}
        now = {k: getattr(self.settings, k) for k in keys}
        if not (then["lora_rank"] or now["lora_rank"]) or not saved:
            return  # full fine-tuning both times (or an unrecorded checkpoint: verl decides)
        changed = [f"{k}: {then[k]!r} then, {now[k]!r} now" for k in keys if then[k] != now[k]]
        if changed:
            raise ValueError(
                f"the checkpoint {path} was written with other LoRA settings "
                f"({'; '.join(changed)}); allowed: model.lora_configs as when it was written"
            )
