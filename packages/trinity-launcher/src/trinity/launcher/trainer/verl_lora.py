"""LoRA on Trinity's verl engine: the adapter trains, the base stays, the engines get the adapter.

``model.lora_configs`` (one adapter) becomes :class:`~trinity.launcher.trainer.verl_settings.
VerlEngineSettings`' ``lora_*`` fields; verl 0.9.1's FSDP engine does the rest of the model
side (``FSDPEngine._build_lora_module``: peft's ``get_peft_model``, or
``PeftModel.from_pretrained`` for ``lora_adapter_path``; the base weights are frozen, only
``lora_A`` / ``lora_B`` require grad). This module holds what Trinity adds around it:

* :func:`lora_model_fields`: the settings as verl's ``HFModelConfig`` fields;
* :func:`adapter_only_optimizer`: verl builds its optimizer over ``module.parameters()``, the
  frozen base included (AdamW skips parameters without a gradient, but the optimizer and its
  checkpoint would still list them); here it gets the adapter's parameters only;
* :func:`check_adapter`: after the build, the trainable parameters are the adapter's, in the
  dtype ``lora_dtype`` names -- a setting that did not take effect fails the build;
* :func:`iter_merged_state_dict`: what weight synchronisation and the Hugging Face export send
  -- the merged weights ``W + (alpha / r) * B @ A`` under the base model's parameter names, so
  the rollout engines load them as they load a fully fine-tuned model (merge-on-sync). verl's
  own merged export (``get_per_tensor_param`` with ``lora.merge``) casts every tensor to
  bfloat16; this one keeps the trainer's fp32, as the full-fine-tuning export does;
* :func:`adapter_state_dict` / :func:`adapter_config_dict`: the adapter alone in PEFT's
  format, what weight synchronisation sends when the engines serve base + adapter
  (:mod:`trinity.launcher.lora_adapter`);
* :class:`AdapterDisabledReference`: the reference policy of a LoRA run is the base model,
  i.e. the same engine with the adapter disabled (verl's ``ref_in_actor``: its workers run
  ``infer_batch`` under ``engine.disable_adapter()`` for ``no_lora_adapter`` batches), so no
  second copy of the weights is built.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Optional, Union

import torch
from torch import Tensor

if TYPE_CHECKING:
    from trinity.common.experience import Experiences
    from trinity.launcher.trainer.verl_settings import VerlEngineSettings

__all__ = [
    "AdapterDisabledReference",
    "adapter_config_dict",
    "adapter_only_optimizer",
    "adapter_state_dict",
    "check_adapter",
    "iter_merged_state_dict",
    "lora_model_fields",
]

#: the config path of the adapter's settings (errors name it)
LORA_FIELD = "model.lora_configs[0]"


def lora_model_fields(settings: VerlEngineSettings) -> dict[str, Any]:
    """verl ``HFModelConfig`` fields for the settings' adapter (empty without LoRA)."""
    if not settings.lora_rank:
        return {}
    return {
        "lora_rank": settings.lora_rank,
        "lora_alpha": settings.lora_alpha,
        "target_modules": settings.lora_target_modules,
        "exclude_modules": settings.lora_exclude_modules,
        "lora_adapter_path": settings.lora_adapter_path,
    }


def adapter_only_optimizer(engine: Any) -> None:
    """Make ``engine`` (a verl FSDP engine, before ``initialize()``) build its optimizer over
    the parameters that require grad -- the adapter's -- instead of all of them. The lr
    schedule and the checkpoint manager then hold that optimizer, as they would verl's."""
    from verl.workers.config.optimizer import build_optimizer

    def build(module: torch.nn.Module) -> Any:
        trainable = [p for p in module.parameters() if p.requires_grad]
        return build_optimizer(trainable, engine.optimizer_config)

    engine._build_optimizer = build  # verl's hook, called once by initialize()


def peft_build_error(settings: VerlEngineSettings, error: Exception) -> Optional[ValueError]:
    """The error to raise when peft refused the module selection (``None``: not that)."""
    text = str(error)
    if "target_modules" not in text.lower() and "target modules" not in text.lower():
        return None
    return ValueError(
        f"{LORA_FIELD}.target_modules={settings.lora_target_modules!r} (exclude_modules="
        f"{settings.lora_exclude_modules!r}) selects no module of {settings.model_path}: "
        f"{text}; allowed: 'all-linear', or a regular expression that fully matches module "
        "names, such as '.*(q_proj|v_proj)'"
    )


def check_adapter(module: torch.nn.Module, settings: VerlEngineSettings) -> int:
    """That the built model trains exactly a LoRA adapter in the dtype ``lora_dtype`` names;
    returns the number of adapter parameters (tensors)."""
    trainable = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    if not trainable:
        raise ValueError(
            f"{LORA_FIELD}: the adapter has no trainable parameter (target_modules="
            f"{settings.lora_target_modules!r}); allowed: modules that get an adapter"
        )
    strays = [n for n, _ in trainable if "lora_" not in n]
    if strays:
        raise RuntimeError(
            f"with LoRA only the adapter may train, but base parameters require grad: {strays[:3]}"
        )
    dtype = torch.float32  # 'auto' and 'float32': the trainer's fp32 master weights
    wrong = sorted({str(p.dtype) for _, p in trainable if p.dtype != dtype})
    if wrong:
        raise ValueError(
            f"{LORA_FIELD}.lora_dtype={settings.lora_dtype!r}: the adapter's parameters are "
            f"{', '.join(wrong)}, not {dtype}; allowed: 'auto' or 'float32'"
        )
    return len(trainable)


def iter_merged_state_dict(engine: Any) -> Iterator[tuple[str, Tensor]]:
    """``(base parameter name, merged full tensor)`` of a LoRA engine, one at a time.

    Inside verl's ``merged_lora_context`` (base weights backed up with the adapter disabled,
    peft's ``merge`` into every LoRA layer, then the backup copied back: the base weights come
    out bit-identical, the adapter untouched). Each yielded tensor is a copy made while the
    context is open. Collective over the engine's ranks (every rank must consume the whole
    iterator); tensors are on the engine's device, in the trainer's (fp32) precision.
    """
    from peft.tuners.lora import LoraLayer
    from torch.distributed.tensor import DTensor
    from verl.utils.fsdp_utils import (
        load_fsdp_model_to_gpu,
        merged_lora_context,
        normalize_peft_param_name,
        offload_fsdp_model_to_cpu,
    )
    from verl.utils.model import convert_weight_keys

    module = engine.module
    offloaded = bool(getattr(engine, "_is_offload_param", False))
    if offloaded:
        load_fsdp_model_to_gpu(module)
    try:
        with torch.no_grad(), merged_lora_context(module, backup_adapters=True):
            layers = [(n, m) for n, m in module.named_modules() if isinstance(m, LoraLayer)]
            unmerged = [n for n, m in layers if not m.merged]
            if not layers or unmerged:  # else the engines would get base weights silently
                raise RuntimeError(
                    f"merging the LoRA adapter left {len(unmerged)} of {len(layers)} layers "
                    f"unmerged ({unmerged[:3]}); the merged weights cannot be exported"
                )
            params = normalize_peft_param_name(module.state_dict())
            params = convert_weight_keys(params, getattr(module, "_fsdp_wrapped_module", module))
            for name, param in params.items():
                full = param.full_tensor() if isinstance(param, DTensor) else param
                yield name, full.detach().clone()
    finally:
        if offloaded:
            offload_fsdp_model_to_cpu(module)


def adapter_state_dict(engine: Any) -> dict[str, Tensor]:
    """The adapter alone in PEFT's format (``get_peft_model_state_dict``'s names), full CPU
    tensors in the trainer's precision: what weight synchronisation sends when the rollout
    engines serve the adapter (a few MB, against the whole model merged). Collective over the
    engine's ranks (each gathers every full tensor)."""
    from peft import get_peft_model_state_dict
    from torch.distributed.tensor import DTensor
    from verl.utils.fsdp_utils import load_fsdp_model_to_gpu, offload_fsdp_model_to_cpu

    module = engine.module
    offloaded = bool(getattr(engine, "_is_offload_param", False))
    if offloaded:
        load_fsdp_model_to_gpu(module)
    try:
        with torch.no_grad():
            tensors = {
                name: (p.full_tensor() if isinstance(p, DTensor) else p).to("cpu", copy=True)
                for name, p in module.named_parameters()
                if "lora_" in name
            }
    finally:
        if offloaded:
            offload_fsdp_model_to_cpu(module)
    return dict(get_peft_model_state_dict(module, state_dict=tensors, save_embedding_layers=False))


def adapter_config_dict(engine: Any, model_path: str) -> dict[str, Any]:
    """``adapter_config.json``'s content for the engine's adapter (the resolved
    ``LoraConfig``: ``all-linear`` expanded to the module names peft chose)."""
    from trinity.launcher.lora_adapter import resolved_config_dict

    return resolved_config_dict(engine.module, model_path)


class AdapterDisabledReference:
    """The reference policy of a LoRA run: the policy engine with its adapter disabled.

    The base weights are frozen, so the policy engine without its adapter *is* the initial
    model; scoring through it costs no second copy of the weights. ``engine`` is a
    :class:`~trinity.launcher.trainer.verl_engine.VerlTrainEngine` or a
    :class:`~trinity.launcher.trainer.workers.RemoteEngine` of one (its ranks run the same
    call). It is never stepped or saved: it is a view, not an engine of its own.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    @property
    def global_step(self) -> int:
        return 0  # the reference never trains

    def compute_logprobs(
        self, batch: Experiences, temperature: float = 1.0, return_entropy: bool = False
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """The base model's log-probs (see ``VerlTrainEngine.compute_logprobs``)."""
        return self.engine.compute_logprobs(
            batch, temperature, return_entropy, disable_adapter=True
        )
