"""The LoRA adapter in PEFT's format: what the trainer, the rollout engines and ``trinity
convert`` agree on.

A LoRA run (``model.lora_configs``, one adapter) trains the adapter alone; the rollout engines
serve the base model plus that adapter, and weight synchronisation moves only the adapter
(a few MB instead of the whole model). Everything that crosses a process boundary is in the
format ``PeftModel.save_pretrained`` writes, so each side can also be checked against plain
``peft``:

* a state dict under the names ``get_peft_model_state_dict`` gives
  (``base_model.model.<module>.lora_A.weight``: no ``.default`` adapter segment);
* ``adapter_config.json``: the resolved ``LoraConfig`` (``all-linear`` expanded to module names).

This module holds the pieces: :func:`lora_settings` (the config's adapter as flat ``lora_*``
settings), :func:`trained_lora_config` (the ``peft.LoraConfig`` those settings train),
:func:`peft_layout` (peft's adapter built on the ``meta`` device: resolved config and expected
names/shapes), :func:`is_adapter_state` and :func:`write_adapter`.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Union

if TYPE_CHECKING:
    from torch import Tensor

    from trinity.common.config import Config

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_DIR",
    "ADAPTER_WEIGHTS",
    "AdapterFormat",
    "AdapterFormatError",
    "adapter_bytes",
    "is_adapter_state",
    "lora_settings",
    "model_lora_settings",
    "vllm_max_lora_rank",
    "peft_layout",
    "resolved_config_dict",
    "trained_lora_config",
    "write_adapter",
]

#: the adapter's directory inside an actor checkpoint (verl's model merger's name)
ADAPTER_DIR = "lora_adapter"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


class AdapterFormatError(ValueError):
    """An adapter that is not the one peft builds from the run's settings."""


def lora_settings(config: Config) -> dict[str, Any]:
    """The ``lora_*`` settings of ``model.lora_configs`` (one adapter; the config's rules refuse
    more and what cannot be honoured). With ``path`` the adapter's own ``adapter_config.json``
    gives rank, alpha and modules (peft trains what it loads; the rules refuse other values
    written beside it). Empty without LoRA."""
    return model_lora_settings(config.model)


def model_lora_settings(model: Any) -> dict[str, Any]:
    """:func:`lora_settings` of a config's ``model`` section."""
    if not getattr(model, "lora_configs", None):
        return {}
    lora = model.lora_configs[0]
    out: dict[str, Any] = dict(
        lora_rank=lora.lora_rank,
        lora_alpha=lora.lora_alpha,
        lora_target_modules=lora.target_modules,
        lora_exclude_modules=lora.exclude_modules,
        lora_dtype=lora.lora_dtype,
    )
    if lora.path is not None:
        path = os.path.expanduser(lora.path)
        with open(os.path.join(path, ADAPTER_CONFIG), encoding="utf-8") as f:
            saved = json.load(f)
        out.update(
            lora_adapter_path=path,
            lora_rank=int(saved["r"]),
            lora_alpha=int(saved.get("lora_alpha", saved["r"])),
            lora_target_modules=saved.get("target_modules") or lora.target_modules,
            lora_exclude_modules=saved.get("exclude_modules"),
        )
    return out


def trained_lora_config(settings: Mapping[str, Any]) -> Any:
    """The ``peft.LoraConfig`` the trainer trains with.

    A run that continued an adapter (``lora_adapter_path``) trains with that adapter's own
    config (verl loads it with ``PeftModel.from_pretrained``), dropout and all, so it is read
    from there while it exists; otherwise verl's ``_build_lora_module`` config is rebuilt from
    the ``lora_*`` settings."""
    from peft import LoraConfig, PeftConfig, TaskType

    from trinity.utils.log import get_logger

    path = settings.get("lora_adapter_path")
    if path and (Path(path) / ADAPTER_CONFIG).is_file():
        config = PeftConfig.from_pretrained(path)
        if not isinstance(config, LoraConfig):
            raise AdapterFormatError(f"{path}: a {type(config).__name__} adapter, not LoRA")
        config.task_type = TaskType.CAUSAL_LM  # as verl sets it
        return config
    if path:
        get_logger(__name__).warning(
            "the continued adapter %s is gone: its config is rebuilt from the recorded "
            "lora_* settings (fields beyond r, lora_alpha and the modules take peft's defaults)",
            path,
        )
    return LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=int(settings["lora_rank"]),
        lora_alpha=int(settings["lora_alpha"]),
        target_modules=settings.get("lora_target_modules") or "all-linear",
        exclude_modules=settings.get("lora_exclude_modules"),
        bias="none",
    )


def peft_layout(
    config_dir: Union[str, os.PathLike], lora: Any, trust_remote_code: bool = False
) -> tuple[Any, dict[str, tuple[int, ...]]]:
    """peft's adapter on the base architecture of ``config_dir``, built on the ``meta`` device
    (no weights, no memory): the model -- for peft's key naming and its resolved ``LoraConfig``
    (``all-linear`` becomes the module names, as ``save_pretrained`` writes it) -- and the
    names and shapes ``get_peft_model_state_dict`` saves."""
    import torch
    from peft import get_peft_model, get_peft_model_state_dict
    from transformers import AutoConfig, AutoModelForCausalLM

    # the trainer records its own attention kernel in the config; any built-in one does here
    config = AutoConfig.from_pretrained(
        config_dir, trust_remote_code=trust_remote_code, attn_implementation="eager"
    )
    lora = copy.deepcopy(lora)
    lora.base_model_name_or_path = None  # set on export; peft would warn it was renamed
    with torch.device("meta"):
        base = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
        model = get_peft_model(base, lora)
    expected = get_peft_model_state_dict(model, save_embedding_layers=False)
    return model, {k: tuple(v.shape) for k, v in expected.items()}


def resolved_config_dict(model: Any, base_model: str) -> dict[str, Any]:
    """``adapter_config.json``'s content for the peft ``model``'s adapter (as
    ``PeftModel.save_pretrained`` writes it: inference mode, sorted target modules)."""
    config = copy.deepcopy(model.peft_config["default"])
    if isinstance(config.target_modules, (set, frozenset)):  # the same file on every run
        config.target_modules = sorted(config.target_modules)
    config.base_model_name_or_path = base_model
    config.inference_mode = True
    out = config.to_dict()
    for key, value in out.items():  # JSON: sets (exclude_modules...) as sorted lists
        if isinstance(value, (set, frozenset)):
            out[key] = sorted(value)
    return out


def is_adapter_state(weights: Mapping[str, Any]) -> bool:
    """Whether ``weights`` is a LoRA adapter (every name a ``lora_`` tensor) rather than a
    model's full weights."""
    return bool(weights) and all(".lora_" in name for name in weights)


def adapter_bytes(weights: Mapping[str, Tensor]) -> int:
    """Bytes of the tensors of ``weights`` (what a weight sync moves)."""
    return sum(t.numel() * t.element_size() for t in weights.values())


def write_adapter(
    directory: Union[str, os.PathLike], state: Mapping[str, Tensor], config: Mapping[str, Any]
) -> Path:
    """Write ``state`` (peft's saved names) and ``config`` (``adapter_config.json``'s
    content) to ``directory`` as ``PeftModel.save_pretrained`` would; returns it. The weights
    file is written under a temporary name and renamed, so a reader never sees half of it."""
    from safetensors.torch import save_file

    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    tmp = target / f".{ADAPTER_WEIGHTS}.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, target / ADAPTER_WEIGHTS)
    (target / ADAPTER_CONFIG).write_text(json.dumps(dict(config), indent=2, sort_keys=True))
    return target


#: the ranks vLLM's ``max_lora_rank`` accepts (``vllm.config.lora.MaxLoRARanks``)
_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds an adapter of ``rank``."""
    for allowed in _VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(
        f"model.lora_configs[0].lora_rank={rank}: vLLM serves adapters up to rank "
        f"{_VLLM_LORA_RANKS[-1]}; allowed: 1 to {_VLLM_LORA_RANKS[-1]}"
    )


class AdapterFormat:
    """The adapter a rollout engine accepts: the one peft builds from the run's settings
    (``EngineSettings.lora``). Built on first use (peft on the ``meta`` device)."""

    def __init__(self, settings: Mapping[str, Any], engine_name: str) -> None:
        self.settings = dict(settings)
        self.engine_name = engine_name
        self._built: Any = None

    @property
    def lora_config(self) -> Any:
        """The ``peft.LoraConfig`` the trainer trains with."""
        return self._build()[0]

    def check(self, weights: Mapping[str, Tensor]) -> dict[str, Any]:
        """``adapter_config.json``'s content for ``weights``, after checking they are the
        run's adapter (the names and shapes peft builds from the settings).

        Raises:
            AdapterFormatError: missing, unexpected or reshaped tensors (named).
        """
        _, config, expected = self._build()
        got = {name: tuple(t.shape) for name, t in weights.items()}
        if got != expected:
            missing, unexpected = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
            shapes = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])
            s = self.settings
            raise AdapterFormatError(
                f"{self.engine_name}: the new adapter is not the one peft builds from "
                f"model.lora_configs (rank {s.get('lora_rank')}, target_modules "
                f"{s.get('lora_target_modules')!r}): missing {missing[:3]}, unexpected "
                f"{unexpected[:3]}, other shapes {shapes[:3]}"
            )
        return config

    def _build(self) -> tuple[Any, dict[str, Any], dict[str, tuple[int, ...]]]:
        if self._built is None:
            s = self.settings
            lora = trained_lora_config(s)
            model, expected = peft_layout(s["model_path"], lora, bool(s.get("trust_remote_code")))
            self._built = (lora, resolved_config_dict(model, s["model_path"]), expected)
        return self._built
