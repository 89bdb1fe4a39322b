"""The rules of ``model.lora_configs``: one adapter the trainer trains, and whether the rollout
engines serve it (``explorer.rollout_model.enable_lora``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

from ._utils import _Checker, _set_derived

if TYPE_CHECKING:
    from ._core import Config


#: what serving the adapter under a base model name of its own would need
_LORA_SERVED_MERGED = (
    "is not supported yet: the rollout engines serve the adapter to Trinity's own requests "
    "only (workflows do not choose a model by name); allowed: null"
)


#: engine types that serve a LoRA adapter (vLLM's LoRA support; transformers with peft)
_ADAPTER_ENGINES = ("vllm", "vllm_async", "transformers")


def rule_lora(c: _Checker, cfg: Config) -> None:
    """``model.lora_configs``: one adapter, trained by the trainer (verl's FSDP engine with
    peft; base weights frozen). The rollout engines serve base + adapter and get the adapter
    alone on every sync (``explorer.rollout_model.enable_lora``, on by default where the engine
    can), or the merged weights (``enable_lora: false``). What that cannot honour yet is
    refused naming the field; an empty list is no LoRA."""
    configs = cfg.model.lora_configs
    if not configs:
        return
    _rule_lora_serving(c, cfg)
    if len(configs) > 1:
        c.error(
            ("model", "lora_configs"),
            f"{len(configs)} adapters",
            f"model.lora_configs has {len(configs)} entries and only one adapter is supported "
            "(as in Trinity-RFT); allowed: one entry",
        )
        return
    lora, at = configs[0], ("model", "lora_configs", 0)
    if lora.is_dummy:
        c.error(
            at + ("is_dummy",),
            True,
            "true: a blank adapter made beforehand (Trinity-RFT marks the one it creates with "
            "is_dummy) is not supported yet: without path a new adapter starts blank in the "
            "trainer; allowed: false (leave path out for a new adapter)",
        )
    if lora.base_model_name is not None:
        value = lora.base_model_name
        c.error(
            at + ("base_model_name",),
            value,
            f"{value!r}: an adapter base_model_name {_LORA_SERVED_MERGED}",
        )
    _check_lora_dtype(c, at + ("lora_dtype",), lora.lora_dtype)
    if lora.path is not None and c.run_checks:
        _check_lora_adapter_dir(c, at, lora)


def _rule_lora_serving(c: _Checker, cfg: Config) -> None:
    """Whether the engines serve the adapter: on by default for an engine that can (and not
    through the OpenAI API, which serves the model's own name: its requests would miss the
    adapter); set explicitly, what cannot be honoured is refused."""
    rollout = cfg.explorer.rollout_model
    loc = ("explorer", "rollout_model", "enable_lora")
    can = rollout.engine_type in _ADAPTER_ENGINES and not rollout.enable_openai_api
    if "enable_lora" not in rollout.model_fields_set:
        _set_derived(rollout, "enable_lora", can)
    elif rollout.enable_lora and rollout.enable_openai_api:
        c.error(
            loc,
            True,
            "true with enable_openai_api is not supported yet: the OpenAI API serves the model "
            "under its own name, so requests through it would not use the adapter; allowed: "
            "false (the engines get the merged weights on every sync)",
        )
    elif rollout.enable_lora and rollout.engine_type not in _ADAPTER_ENGINES:
        c.error(
            loc,
            True,
            f"true: engine_type {rollout.engine_type!r} cannot serve a LoRA adapter; allowed: "
            f"false (merged weights on every sync), or engine_type one of {_ADAPTER_ENGINES}",
        )
    for i, aux in enumerate(cfg.explorer.auxiliary_models):
        if aux.enable_lora:
            c.error(
                ("explorer", "auxiliary_models", i, "enable_lora"),
                True,
                "true is not supported yet: the run's adapter trains the rollout model; an "
                "auxiliary model serves its own weights; allowed: false",
            )


def _check_lora_dtype(c: _Checker, loc: tuple[Union[str, int], ...], value: str) -> None:
    """``auto`` or a torch dtype name; only float32 can be honoured: the trainer keeps the
    adapter with its fp32 master weights (FSDP2 shards a layer's parameters in one dtype; the
    compute dtype is the trainer's precision either way)."""
    name = str(value).strip()
    if name == "auto":
        return
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        c.error(
            loc,
            value,
            f"{value!r} is not a torch dtype name; allowed: 'auto' or a torch dtype name such "
            "as 'float32'",
        )
    elif dtype != torch.float32:
        c.error(
            loc,
            value,
            f"{value!r}: an adapter kept in {name} is not supported yet (the trainer keeps it with its fp32 "
            "master weights and computes in its own precision); allowed: 'auto' or 'float32'",
        )


def _check_lora_adapter_dir(c: _Checker, at: tuple[Union[str, int], ...], lora: Any) -> None:
    """``path``: a PEFT LoRA adapter directory. Its ``adapter_config.json`` decides rank, alpha
    and modules, so a value written beside it must agree (else it would be ignored)."""
    import json
    from pathlib import Path

    config_file = Path(lora.path).expanduser() / "adapter_config.json"
    try:
        saved = json.loads(config_file.read_text(encoding="utf-8"))
        kind = str(saved.get("peft_type", "LORA")).upper()
    except (OSError, ValueError, AttributeError) as exc:
        saved, kind = {}, f"no readable {config_file.name} ({exc})"
    if kind != "LORA":
        c.error(
            at + ("path",),
            lora.path,
            f"{lora.path!r} is not a PEFT LoRA adapter directory ({kind}); allowed: a directory written by "
            "peft's save_pretrained, or leave path out for a new adapter",
        )
        return
    for field, key in (
        ("lora_rank", "r"),
        ("lora_alpha", "lora_alpha"),
        ("target_modules", "target_modules"),
        ("exclude_modules", "exclude_modules"),
    ):
        if field in lora.model_fields_set and getattr(lora, field) != saved.get(key):
            c.error(
                at + (field,),
                getattr(lora, field),
                f"{getattr(lora, field)!r}: the adapter at path has {key}={saved.get(key)!r}, "
                "which is what trains; "
                f"allowed: leave {field} out with path",
            )
