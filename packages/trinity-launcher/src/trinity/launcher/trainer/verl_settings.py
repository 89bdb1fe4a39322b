"""Settings of Trinity's verl training engine: one flat, validated dataclass.

This module owns :class:`VerlEngineSettings` (model, precision, optimizer, lr schedule,
micro-batching and FSDP knobs, each checked at construction with an error naming the field) and
its mapping from a Trinity ``Config`` (:meth:`VerlEngineSettings.from_config`), plus the name
tables (dtypes, schedulers, optimizers) the engine translates into verl's configs. The engine
itself is :mod:`trinity.launcher.trainer.verl_engine`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Union

import torch

from trinity.launcher.lora_adapter import lora_settings
from trinity.launcher.trainer.verl_compat import (
    default_device,
)

if TYPE_CHECKING:
    from trinity.common.config import Config

#: Memory one micro-batch's logits and saved activations may take by default (fp32 bytes).
MICRO_BATCH_BYTES = 256 * 2**20


def _model_dims(model_path: Optional[str]) -> Optional[tuple[int, int, int]]:
    """``(vocab_size, hidden_size, num_hidden_layers)`` from a local ``config.json``, or
    ``None`` when it is not local or not readable."""
    import json
    import os

    if not model_path or not os.path.isfile(os.path.join(model_path, "config.json")):
        return None
    try:
        with open(os.path.join(model_path, "config.json")) as f:
            cfg = json.load(f)
        cfg = cfg.get("text_config", cfg)
        return int(cfg["vocab_size"]), int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


#: Widest model whose CPU training runs on one intra-op thread by default.
SINGLE_THREAD_MAX_HIDDEN = 128


def cpu_threads_for(model_path: Optional[str]) -> Optional[int]:
    """The trainer's torch intra-op threads on CPU: 1 for a model no wider than
    :data:`SINGLE_THREAD_MAX_HIDDEN`, else ``None`` (torch's default: every core).

    A tiny model's ops are too small to gain from a second thread, and inside a run the
    trainer shares the cores with the explorer's processes and its own process's threads: an
    OpenMP region then waits for a thread that has no core. Measured on the 2-core quickstart
    (hidden 64), the train step inside the run took 62 ms with 2 threads and 47 ms with 1
    (in isolation: 40 and 44 ms); the realistic preset (hidden 512) needs both cores (its train
    step in isolation: 4.3 s with 2 threads, 7.2 s with 1).
    """
    dims = _model_dims(model_path)
    if dims is None:
        return None
    return 1 if dims[1] <= SINGLE_THREAD_MAX_HIDDEN else None


def micro_batch_token_floor(model_path: Optional[str], masked_attention: bool = False) -> int:
    """The fewest tokens a derived micro-batch budget holds for the model at ``model_path``.

    Trinity-RFT's default budget, ``2 * max_model_len`` tokens per micro-batch, is sized for
    models whose logits dominate memory (a 150K vocabulary: ~1 MB per token in fp32). A small
    model with a short ``max_model_len`` then runs a 16 x 8 batch in dozens of micro-batches,
    each paying the fixed cost of a forward and backward pass: on the CPU quickstart that was
    most of the train step. The floor is the token count whose fp32 logits (twice: logits and
    log-softmax) and ~16 saved activations of width ``hidden_size`` per layer fit in
    :data:`MICRO_BATCH_BYTES`. With ``masked_attention`` (``attn_implementation: sdpa`` or
    ``eager`` named explicitly: a packed micro-batch attends over all its tokens under a block
    mask) it is also capped by :func:`micro_batch_token_cap`. The default attention
    (flash-attention 2, or :mod:`~trinity.launcher.trainer.packed_attention` without it)
    attends within each sequence, so a bigger micro-batch only saves fixed costs (measured on
    this project's 2-core CPU: the realistic preset, hidden 512, trains a step in 4.2-4.4 s
    with 1023-token micro-batches against 4.6 s with 512; the quickstart's 1084 tokens in one
    micro-batch, 40 ms against 49 ms in two). For real LLMs (Qwen2.5-0.5B: ~100 tokens) the
    floor is below ``2 * max_model_len`` and changes nothing.

    Returns 0 (no floor) when the model's ``config.json`` is not local or not readable.
    """
    dims = _model_dims(model_path)
    if dims is None:
        return 0
    vocab, hidden, layers = dims
    per_token = 4 * (2 * vocab + 16 * layers * hidden)
    floor = MICRO_BATCH_BYTES // per_token
    if masked_attention:
        floor = min(floor, micro_batch_token_cap(hidden))
    return int(floor)


def micro_batch_token_cap(hidden_size: int) -> int:
    """The most tokens a derived packed micro-batch holds under masked attention:
    ``min(1024, 512 * sqrt(512 / hidden_size))``.

    A packed micro-batch of ``T`` tokens under a block mask costs about
    ``c + a*T*h^2 + b*T^2*h`` (a fixed cost, the projections, the masked attention), so the cost
    per token is least at ``T ~ sqrt(c / (b*h))`` (measured on this project's 2-core CPU with
    ``sdpa``: the realistic preset, hidden 512, trained a step in 4.1-4.3 s with 512-token
    micro-batches against 4.4-4.5 s with 1023)."""
    import math

    return int(min(1024, 512 * math.sqrt(512 / max(hidden_size, 1))))


#: dtype names accepted in settings -> verl's precision names.
_DTYPES = {
    "float32": "fp32",
    "fp32": "fp32",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
}
_TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_SCHEDULERS = ("constant", "cosine")
_OPTIMIZERS = {"adam": "AdamW", "adamw": "AdamW", "sgd": "SGD"}
#: adapter dtypes the engine honours: the trainer's fp32 master weights ('auto': those)
_LORA_DTYPES = ("auto", "float32", "float")


# ----------------------------------------------------------------------------------- settings


@dataclass
class VerlEngineSettings:
    """Plain settings of :class:`VerlTrainEngine` (no verl types, so configs and tests build it).

    Model:
        model_path: a Hugging Face model directory (local; nothing is downloaded).
        tokenizer_path: defaults to ``model_path``.
        trust_remote_code: allow custom model code in the model directory.
        attn_implementation: ``None`` = ``flash_attention_2`` on CUDA when ``flash_attn`` is
            installed, else ``sdpa_packed`` (:mod:`~trinity.launcher.trainer.packed_attention`).
    Precision and device:
        device: ``"cpu"``, ``"cuda"`` or ``None`` (CUDA when available).
        dtype: compute dtype of the forward/backward (FSDP ``param_dtype``): ``float32`` or
            ``bfloat16`` (``float16`` with loss scaling). Master weights, gradients reduction and
            the optimizer are always fp32. ``None`` = fp32 on CPU (bf16 autocast on CPU drifts
            1e-2 from the rollout's logprobs), bf16 on CUDA.
    Optimizer and schedule (verl's ``FSDPOptimizerConfig``):
        optimizer: ``AdamW`` (default) or ``SGD``; lr, betas, weight_decay, eps.
        grad_clip: max global gradient norm (clipping happens every step).
        lr_scheduler_type: ``constant`` or ``cosine``; lr_warmup_steps (``-1``: use
            ``lr_warmup_steps_ratio * total_training_steps``), min_lr_ratio, num_cycles.
        total_training_steps: optimizer steps of the whole run (cosine decay and warm-up ratio);
            ``-1`` if unknown (constant schedule only).
    Batching:
        micro_batch_size: rows per forward/backward when ``use_dynamic_bsz`` is off. A batch
            whose size it does not divide runs in micro-batches of the largest divisor below it
            (results do not depend on micro-batching).
        use_dynamic_bsz / max_token_len_per_gpu: pack micro-batches up to this many tokens
            (verl's balanced ``rearrange_micro_batches``) instead.
        infer_micro_batch_size / infer_max_token_len_per_gpu: the same for
            :meth:`VerlTrainEngine.compute_logprobs` (default: the training values).
        use_remove_padding: run packed sequences without padding (verl's default).
    Memory and parallelism: gradient_checkpointing, param_offload, optimizer_offload,
        ulysses_sequence_parallel_size, fsdp_size (``-1``: shard over all ranks).
    LoRA (``model.lora_configs``; :mod:`~trinity.launcher.trainer.verl_lora`):
        lora_rank: ``0`` trains every weight; ``> 0`` freezes the base and trains a peft LoRA
            adapter of this rank (verl's ``_build_lora_module``).
        lora_alpha: the update is ``(lora_alpha / lora_rank) * B @ A``.
        lora_target_modules / lora_exclude_modules: peft's selection (``"all-linear"`` or a
            full-match regular expression; a list of module-name suffixes).
        lora_adapter_path: a PEFT adapter directory to continue training (its own
            ``adapter_config.json`` then sets rank, alpha and modules; ``from_config`` reads
            them from it).
        lora_dtype: ``"auto"`` or ``"float32"``: the adapter is kept with the fp32 master weights.
    Other:
        cpu_threads: torch intra-op threads of the process the engine runs in, on CPU
            (``None``: torch's default; ``from_config`` derives :func:`cpu_threads_for`).
        seed: seeds torch's RNGs when the engine is built.
        use_torch_compile: compile verl's entropy kernel (``None``: on CUDA only).
        full_determinism: verl's deterministic mode (slower).
        engine_overrides: extra ``FSDPEngineConfig`` fields (verl passthrough, e.g.
            ``{"wrap_policy": {...}, "reshard_after_forward": False}``).
        optimizer_overrides: extra keyword arguments of the optimizer class.
    """

    model_path: str
    tokenizer_path: Optional[str] = None
    trust_remote_code: bool = False
    attn_implementation: Optional[str] = None
    device: Optional[str] = None
    dtype: Optional[str] = None
    optimizer: str = "AdamW"
    lr: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01
    eps: float = 1e-8
    grad_clip: float = 1.0
    lr_scheduler_type: str = "constant"
    lr_warmup_steps: int = -1
    lr_warmup_steps_ratio: float = 0.0
    min_lr_ratio: float = 0.0
    num_cycles: float = 0.5
    total_training_steps: int = -1
    micro_batch_size: int = 1
    use_dynamic_bsz: bool = False
    max_token_len_per_gpu: Optional[int] = None
    infer_micro_batch_size: Optional[int] = None
    infer_max_token_len_per_gpu: Optional[int] = None
    use_remove_padding: bool = True
    gradient_checkpointing: bool = False
    param_offload: bool = False
    optimizer_offload: bool = False
    ulysses_sequence_parallel_size: int = 1
    fsdp_size: int = -1
    cpu_threads: Optional[int] = None
    seed: int = 42
    use_torch_compile: Optional[bool] = None
    full_determinism: bool = False
    lora_rank: int = 0
    lora_alpha: int = 32
    lora_target_modules: Union[str, list[str]] = "all-linear"
    lora_exclude_modules: Optional[Union[str, list[str]]] = None
    lora_adapter_path: Optional[str] = None
    lora_dtype: str = "auto"
    engine_overrides: dict[str, Any] = field(default_factory=dict)
    optimizer_overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:  # noqa: C901 - one flat list of checks
        def bad(name: str, value: Any, allowed: str) -> ValueError:
            return ValueError(f"VerlEngineSettings.{name}={value!r} is invalid; allowed: {allowed}")

        if not self.model_path:
            raise bad("model_path", self.model_path, "a Hugging Face model directory")
        if self.device not in (None, "cpu", "cuda"):
            raise bad("device", self.device, "'cpu', 'cuda' or None (CUDA when available)")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise bad("cpu_threads", self.cpu_threads, "a positive integer or None")
        if self.dtype is not None and self.dtype not in _DTYPES:
            raise bad("dtype", self.dtype, f"{', '.join(_DTYPES)} or None")
        if self.optimizer.lower() not in _OPTIMIZERS:
            raise bad("optimizer", self.optimizer, "AdamW, Adam (= AdamW) or SGD")
        if not self.lr > 0:
            raise bad("lr", self.lr, "a positive float")
        if len(tuple(self.betas)) != 2:
            raise bad("betas", self.betas, "two floats")
        self.betas = (float(self.betas[0]), float(self.betas[1]))
        if not self.grad_clip > 0:
            raise bad("grad_clip", self.grad_clip, "a positive float")
        if self.lr_scheduler_type not in _SCHEDULERS:
            raise bad("lr_scheduler_type", self.lr_scheduler_type, ", ".join(_SCHEDULERS))
        if self.lr_scheduler_type == "cosine" and self.total_training_steps <= 0:
            raise bad(
                "total_training_steps",
                self.total_training_steps,
                "a positive number of steps with lr_scheduler_type='cosine'",
            )
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise bad("min_lr_ratio", self.min_lr_ratio, "a float in [0, 1]")
        if not 0.0 <= self.lr_warmup_steps_ratio <= 1.0:
            raise bad("lr_warmup_steps_ratio", self.lr_warmup_steps_ratio, "a float in [0, 1]")
        if self.micro_batch_size < 1:
            raise bad("micro_batch_size", self.micro_batch_size, "an integer >= 1")
        if self.infer_micro_batch_size is not None and self.infer_micro_batch_size < 1:
            raise bad("infer_micro_batch_size", self.infer_micro_batch_size, "an integer >= 1")
        if self.use_dynamic_bsz and not (self.max_token_len_per_gpu or 0) > 0:
            raise bad(
                "max_token_len_per_gpu",
                self.max_token_len_per_gpu,
                "a positive token budget when use_dynamic_bsz is true",
            )
        if self.ulysses_sequence_parallel_size < 1:
            raise bad(
                "ulysses_sequence_parallel_size",
                self.ulysses_sequence_parallel_size,
                "an integer >= 1",
            )
        self._check_lora(bad)
        if self.ulysses_sequence_parallel_size > 1 and not self.use_remove_padding:
            raise bad(
                "use_remove_padding",
                self.use_remove_padding,
                "true when ulysses_sequence_parallel_size > 1 (verl's requirement)",
            )

    def _check_lora(self, bad: Any) -> None:
        if self.lora_rank < 0:
            raise bad("lora_rank", self.lora_rank, "0 (no LoRA) or a positive rank")
        if not self.lora_rank:
            if self.lora_adapter_path is not None:
                raise bad("lora_rank", 0, "the adapter's rank (> 0) with lora_adapter_path")
            return
        if self.lora_alpha <= 0:
            raise bad("lora_alpha", self.lora_alpha, "a positive integer")
        if self.lora_dtype not in _LORA_DTYPES:
            raise bad("lora_dtype", self.lora_dtype, ", ".join(map(repr, _LORA_DTYPES)))
        if not self.lora_target_modules:
            raise bad("lora_target_modules", self.lora_target_modules, "'all-linear' or names")

    @property
    def resolved_device(self) -> str:
        return self.device or default_device()

    @property
    def precision(self) -> str:
        """verl's name of the compute dtype (``fp32``/``bf16``/``fp16``)."""
        if self.dtype is not None:
            return _DTYPES[self.dtype]
        return "fp32" if self.resolved_device == "cpu" else "bf16"

    @classmethod
    def from_config(cls, config: Config, **overrides: Any) -> VerlEngineSettings:
        """Settings from a Trinity :class:`~trinity.common.config.Config`.

        Reads ``model.model_path`` (and ``model.max_model_len``: without
        ``trainer.max_token_len_per_gpu`` the budget is ``2 * max_model_len / sp``, the config's
        own rule), ``algorithm.optimizer`` (lr, betas, weight decay, schedule,
        warm-up), ``trainer`` (grad_clip, use_dynamic_bsz, max_token_len_per_gpu,
        use_remove_padding, ulysses_sequence_parallel_size, param/optimizer offload,
        trust_remote_code, total_steps) and, from the verl passthrough ``trainer.trainer_config``,
        ``actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu``,
        ``actor_rollout_ref.model.enable_gradient_checkpointing`` and
        ``actor_rollout_ref.actor.fsdp_config.{param_offload,optimizer_offload}``. The gradient
        clip is ``algorithm.optimizer.clip_grad`` where set, else ``trainer.grad_clip``.
        ``model.lora_configs`` gives the ``lora_*`` fields (:func:`lora_settings`).
        ``overrides`` win over everything.
        """
        optim = config.algorithm.optimizer
        trainer = config.trainer
        verl_cfg = dict(trainer.trainer_config or {})
        arr = dict(verl_cfg.get("actor_rollout_ref") or {})
        actor = dict(arr.get("actor") or {})
        model = dict(arr.get("model") or {})
        fsdp = dict(actor.get("fsdp_config") or {})
        max_tokens = trainer.max_token_len_per_gpu
        sp = trainer.ulysses_sequence_parallel_size
        if max_tokens is None and config.model.max_model_len:
            # the config's own rule (check_and_update): twice the longest sequence per SP rank
            max_tokens = math.ceil(2 * config.model.max_model_len / sp)
        if max_tokens is not None and "max_token_len_per_gpu" not in trainer.model_fields_set:
            # derived, not the user's: a small model gets micro-batches that fit its size
            masked = overrides.get("attn_implementation") in ("sdpa", "eager")
            floor = micro_batch_token_floor(config.model.model_path, masked_attention=masked)
            max_tokens = max(max_tokens, floor // sp)
        if (
            trainer.use_dynamic_bsz
            and max_tokens is None
            and "max_token_len_per_gpu" not in overrides
        ):
            raise ValueError(
                "trainer.max_token_len_per_gpu is unset and model.max_model_len is unset too, "
                "while trainer.use_dynamic_bsz is true; allowed: set either, or "
                "trainer.use_dynamic_bsz: false"
            )
        scheduler = optim.lr_scheduler_type
        if getattr(optim, "warmup_style", None):
            scheduler = optim.warmup_style
        kwargs: dict[str, Any] = dict(
            model_path=config.model.model_path,
            trust_remote_code=bool(config.model.trust_remote_code or trainer.trust_remote_code),
            optimizer=_OPTIMIZERS.get(str(optim.optimizer_type).lower(), optim.optimizer_type),
            lr=optim.lr,
            betas=tuple(optim.betas),
            weight_decay=optim.weight_decay,
            # algorithm.optimizer.clip_grad where the user set it, else trainer.grad_clip
            grad_clip=optim.clip_grad
            if "clip_grad" in optim.model_fields_set
            else trainer.grad_clip,
            lr_scheduler_type=scheduler,
            lr_warmup_steps=optim.lr_warmup_steps,
            lr_warmup_steps_ratio=optim.lr_warmup_steps_ratio,
            min_lr_ratio=optim.min_lr_ratio,
            total_training_steps=trainer.total_steps or -1,
            use_dynamic_bsz=trainer.use_dynamic_bsz,
            max_token_len_per_gpu=max_tokens,
            use_remove_padding=trainer.use_remove_padding,
            ulysses_sequence_parallel_size=trainer.ulysses_sequence_parallel_size,
            param_offload=bool(fsdp.get("param_offload", trainer.param_offload)),
            optimizer_offload=bool(fsdp.get("optimizer_offload", trainer.optimizer_offload)),
        )
        if actor.get("ppo_micro_batch_size_per_gpu"):
            kwargs["micro_batch_size"] = int(actor["ppo_micro_batch_size_per_gpu"])
        kwargs["cpu_threads"] = cpu_threads_for(config.model.model_path)
        kwargs.update(lora_settings(config))
        if "enable_gradient_checkpointing" in model:
            kwargs["gradient_checkpointing"] = bool(model["enable_gradient_checkpointing"])
        kwargs.update(overrides)
        return cls(**kwargs)
