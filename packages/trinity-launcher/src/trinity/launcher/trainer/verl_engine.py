"""Trinity's training engine: verl's FSDP2 engine driven by Trinity's own losses.

verl (0.9.1, ``verl.workers.engine``) does the heavy lifting: FSDP2 sharding, the forward pass
(remove-padding layout, Ulysses sequence parallelism), micro-batching and dynamic batch size,
gradient checkpointing, AdamW, the lr schedule, gradient clipping and sharded checkpoints.
Trinity keeps what makes an RL algorithm: the policy, KL and entropy losses are the pure tensor
functions of ``trinity-algorithms`` (:class:`TrinityLoss`), called from the callback verl's
engine invokes on every micro-batch.

Data path (``B`` rows, ``P`` longest prompt, ``R`` longest response, see
:class:`~trinity.common.experience.Experiences`)::

    Experiences (tokens [B, P+R] left/right padded, action_mask/logprobs/advantages [B, R])
      -> TensorDict: input_ids/position_ids nested [B, j] (padding removed, verl's
         left_right_2_no_padding), prompts [B, P], responses [B, R], attention_mask [B, P+R],
         response_mask [B, R], and the loss's fields [B, R] (old_logprob, advantages, ...)
      -> verl splits it into micro-batches (fixed size or by token budget), runs the model and
         gives the callback per-token log-probs (and entropy) over the packed sequences
      -> callback: back to [b, R] (no_padding_2_padding), Trinity's losses on [b, R] tensors.

**Micro-batching does not change the result.** Trinity's losses aggregate over the batch they
are given (e.g. ``token-mean``: a mean over all trained tokens). Averaging micro-batch means would
weight a token by the size of the micro-batch it fell into. Instead, each micro-batch's term is
scaled by its share of the whole batch's aggregation denominator (trained tokens for
``token-mean``, sequences with a trained token for the ``seq-mean-*`` modes, counted over all
data-parallel ranks) and by the data-parallel size (FSDP averages gradients over ranks). The
summed gradient is then exactly the gradient of the loss over the whole batch, as verl's own
losses do with ``global_batch_info``. This is exact for every loss that reduces through
:func:`~trinity.algorithm.utils.aggregate_loss` over per-token or per-sequence terms (all PPO
variants, GSPO, CISPO, SAPO, TOPR, OPMD, SFT, the KL and entropy terms). A loss that couples rows
across the batch (DPO's chosen/rejected pairs, MIX's separately normalised expert/usual parts)
sees one micro-batch at a time: train it with one micro-batch per step.

Single process needs no Ray: a gloo (CPU) or NCCL (CUDA) process group of one is created when
none exists. With several ranks (torchrun, Ray workers), every rank builds the engine and calls
every method with its own shard of the batch (SPMD).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import torch
import torch.distributed as dist
from torch import Tensor

from trinity.common.experience import Experiences
from trinity.launcher.trainer.verl_compat import (
    SUPPORTED_VERL_VERSION,
    apply_verl_compat,
    default_device,
)

if TYPE_CHECKING:
    from trinity.algorithm.entropy_loss_fn import EntropyLossFn
    from trinity.algorithm.kl_fn import KLFn
    from trinity.algorithm.policy_loss_fn import PolicyLossFn
    from trinity.algorithm.resolve import ResolvedAlgorithm
    from trinity.common.config import Config

__all__ = ["TrinityLoss", "VerlEngineSettings", "VerlTrainEngine"]

logger = logging.getLogger(__name__)

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
_CHECKPOINT_META = "trinity_engine.json"

# Non-tensor keys of the TensorDict that carry the batch-wide loss denominators.
_NUM_TOKENS = "trinity_num_tokens"
_NUM_SEQS = "trinity_num_seqs"

# Process-group store created by this module (kept alive for the process's lifetime).
_OWN_STORE: Optional[Any] = None


# ----------------------------------------------------------------------------------- settings


@dataclass
class VerlEngineSettings:
    """Plain settings of :class:`VerlTrainEngine` (no verl types, so configs and tests build it).

    Model:
        model_path: a Hugging Face model directory (local; nothing is downloaded).
        tokenizer_path: defaults to ``model_path``.
        trust_remote_code: allow custom model code in the model directory.
        attn_implementation: ``None`` = ``sdpa`` on CPU, ``flash_attention_2`` on CUDA when
            ``flash_attn`` is installed (else ``sdpa``).
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
    Other:
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
    seed: int = 42
    use_torch_compile: Optional[bool] = None
    full_determinism: bool = False
    engine_overrides: dict[str, Any] = field(default_factory=dict)
    optimizer_overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:  # noqa: C901 - one flat list of checks
        def bad(name: str, value: Any, allowed: str) -> ValueError:
            return ValueError(f"VerlEngineSettings.{name}={value!r} is invalid; allowed: {allowed}")

        if not self.model_path:
            raise bad("model_path", self.model_path, "a Hugging Face model directory")
        if self.device not in (None, "cpu", "cuda"):
            raise bad("device", self.device, "'cpu', 'cuda' or None (CUDA when available)")
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
        if self.ulysses_sequence_parallel_size > 1 and not self.use_remove_padding:
            raise bad(
                "use_remove_padding",
                self.use_remove_padding,
                "true when ulysses_sequence_parallel_size > 1 (verl's requirement)",
            )

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
        if max_tokens is None and config.model.max_model_len:
            # the config's own rule (check_and_update): twice the longest sequence per SP rank
            sp = trainer.ulysses_sequence_parallel_size
            max_tokens = math.ceil(2 * config.model.max_model_len / sp)
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
        if "enable_gradient_checkpointing" in model:
            kwargs["gradient_checkpointing"] = bool(model["enable_gradient_checkpointing"])
        kwargs.update(overrides)
        return cls(**kwargs)


# --------------------------------------------------------------------------------- loss spec


@dataclass
class TrinityLoss:
    """The actor loss of one algorithm, built from ``trinity-algorithms`` components.

    ``loss = policy_loss + kl_loss - entropy_bonus`` (Trinity-RFT's and verl's convention):

    * ``policy_loss_fn``: a :class:`~trinity.algorithm.policy_loss_fn.PolicyLossFn`; it is
      called with exactly the batch fields its ``select_keys`` names (``old_logprob``,
      ``action_mask``, ``advantages``, ...), all ``[b, R]`` (``expert_mask``: ``[b]``);
    * ``kl_loss_fn``: a :class:`~trinity.algorithm.kl_fn.KLFn` or ``None``; ``none`` (and
      ``None``) disables the term; otherwise the batch needs ``ref_logprob``;
    * ``entropy_loss_fn``: an :class:`~trinity.algorithm.entropy_loss_fn.EntropyLossFn` or
      ``None``;
    * ``loss_agg_mode``: aggregation of the KL and entropy terms (the policy loss uses its own
      ``loss_agg_mode``);
    * ``compute_entropy``: compute the per-token entropy (needed by the entropy term, otherwise
      only a metric). ``None``: when the entropy term is active (a non-``none`` function with a
      non-zero coefficient).
    """

    policy_loss_fn: PolicyLossFn
    kl_loss_fn: Optional[KLFn] = None
    entropy_loss_fn: Optional[EntropyLossFn] = None
    loss_agg_mode: str = "token-mean"
    compute_entropy: Optional[bool] = None

    def __post_init__(self) -> None:
        from trinity.algorithm.utils import LOSS_AGG_MODES

        for owner, mode in (
            ("loss_agg_mode", self.loss_agg_mode),
            (
                f"{type(self.policy_loss_fn).__name__}.loss_agg_mode",
                self.policy_loss_agg_mode,
            ),
        ):
            if mode not in LOSS_AGG_MODES:
                raise ValueError(
                    f"{owner}={mode!r} is invalid; allowed: {', '.join(LOSS_AGG_MODES)}"
                )

    @classmethod
    def from_algorithm(
        cls,
        algorithm: Union[ResolvedAlgorithm, Mapping[str, Any], Any],
        compute_entropy: Optional[bool] = None,
    ) -> TrinityLoss:
        """Build the components of a :class:`~trinity.algorithm.resolve.ResolvedAlgorithm` (or
        of anything :func:`~trinity.algorithm.resolve.resolve_algorithm` accepts: an
        ``AlgorithmConfig``, a ``Config``, a mapping such as ``{"algorithm_type": "grpo"}``)."""
        from trinity.algorithm.resolve import ResolvedAlgorithm, resolve_algorithm

        resolved = (
            algorithm if isinstance(algorithm, ResolvedAlgorithm) else resolve_algorithm(algorithm)
        )
        return cls(
            policy_loss_fn=resolved.build_policy_loss_fn(),
            kl_loss_fn=resolved.build_kl_loss_fn(),
            entropy_loss_fn=resolved.build_entropy_loss_fn(),
            loss_agg_mode=resolved.loss_agg_mode,
            compute_entropy=compute_entropy,
        )

    @property
    def policy_loss_agg_mode(self) -> str:
        return str(getattr(self.policy_loss_fn, "loss_agg_mode", "token-mean"))

    @property
    def uses_kl(self) -> bool:
        from trinity.algorithm.kl_fn import DummyKLFn

        return self.kl_loss_fn is not None and not isinstance(self.kl_loss_fn, DummyKLFn)

    @property
    def uses_entropy(self) -> bool:
        from trinity.algorithm.entropy_loss_fn import DummyEntropyLossFn

        return (
            self.entropy_loss_fn is not None
            and not isinstance(self.entropy_loss_fn, DummyEntropyLossFn)
            and float(getattr(self.entropy_loss_fn, "entropy_coef", 1.0)) != 0.0
        )

    @property
    def needs_entropy(self) -> bool:
        return self.uses_entropy if self.compute_entropy is None else bool(self.compute_entropy)

    def required_fields(self) -> list[str]:
        """Batch fields the loss reads (``action_mask`` always: it weights micro-batches)."""
        keys = list(self.policy_loss_fn.select_keys)
        if "action_mask" not in keys:
            keys.append("action_mask")
        if self.uses_kl and "ref_logprob" not in keys:
            keys.append("ref_logprob")
        return keys


def _share(mask: Tensor, mode: str, num_tokens: float, num_seqs: float) -> float:
    """The part of the whole batch's ``mode`` denominator that this micro-batch holds."""
    if mode == "token-sum":  # a sum over micro-batches is the batch's sum: no rescaling
        return 1.0
    if mode == "token-mean":
        return float(mask.sum().item()) / max(num_tokens, 1.0)
    return float((mask.sum(dim=-1) > 0).sum().item()) / max(num_seqs, 1.0)


class _MicroBatchLoss:
    """The ``loss_function`` verl's engine calls per micro-batch (see the module docstring).

    ``__call__(model_output, data, dp_group)``: ``model_output["log_probs"]`` (and
    ``["entropy"]``) are nested ``[b, j]`` over the packed sequences; ``data`` is the micro-batch
    TensorDict. Returns the loss to backpropagate (already weighted by the micro-batch's share and
    the data-parallel size) and metrics weighted by the share, so summing them over micro-batches
    and ranks gives the whole batch's values.
    """

    def __init__(self, loss: TrinityLoss, fields: list[str], dp_size: int) -> None:
        self.loss = loss
        self.fields = fields
        self.dp_size = dp_size

    def __call__(
        self, model_output: Mapping[str, Tensor], data: Any, dp_group: Any = None
    ) -> tuple[Tensor, dict[str, float]]:
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import no_padding_2_padding

        spec = self.loss
        logprob = no_padding_2_padding(model_output["log_probs"], data)  # [b, R]
        batch = {k: data[k] for k in self.fields}
        mask = batch["action_mask"]
        num_tokens = float(tu.get_non_tensor_data(data, _NUM_TOKENS, 0.0))
        num_seqs = float(tu.get_non_tensor_data(data, _NUM_SEQS, 0.0))

        metrics: dict[str, float] = {}

        def add(values: Mapping[str, float], weight: float) -> None:
            for key, value in values.items():
                metrics[f"actor/{key}"] = metrics.get(f"actor/{key}", 0.0) + float(value) * weight

        w_pg = _share(mask, spec.policy_loss_agg_mode, num_tokens, num_seqs)
        pg_loss, pg_metrics = spec.policy_loss_fn.compute(logprob, batch)
        add({**pg_metrics, "pg_loss": float(pg_loss.detach().item())}, w_pg)
        total = pg_loss * w_pg
        reported = float(pg_loss.detach().item()) * w_pg

        w_aux = _share(mask, spec.loss_agg_mode, num_tokens, num_seqs)
        if spec.uses_kl:
            kl_loss, kl_metrics = spec.kl_loss_fn.calculate_kl_loss(  # type: ignore[union-attr]
                logprob=logprob,
                ref_logprob=batch["ref_logprob"],
                response_mask=mask,
                loss_agg_mode=spec.loss_agg_mode,
                old_logprob=batch.get("old_logprob"),
            )
            total = total + kl_loss * w_aux
            reported += float(kl_loss.detach().item()) * w_aux
            add(kl_metrics, w_aux)

        if spec.needs_entropy:
            entropy = no_padding_2_padding(model_output["entropy"], data)  # [b, R]
            extra = {k: batch[k] for k in ("expert_mask", "is_expert_mask") if k in batch}
            if spec.entropy_loss_fn is not None:
                bonus, ent_metrics = spec.entropy_loss_fn(
                    entropy, mask, loss_agg_mode=spec.loss_agg_mode, **extra
                )
                add(ent_metrics, w_aux)
                if spec.uses_entropy:
                    total = total - bonus * w_aux
                    reported -= float(bonus.detach().item()) * w_aux
            from trinity.algorithm.utils import masked_mean

            add({"entropy": float(masked_mean(entropy.detach(), mask).item())}, w_aux)

        metrics["actor/loss"] = reported
        # FSDP averages gradients over data-parallel ranks; the shares are global, so undo it
        return total * self.dp_size, metrics


# ------------------------------------------------------------------------------------- engine


def _ensure_process_group(device: str) -> None:
    """Create a process group of one when none exists (no Ray, no torchrun needed).

    With ``WORLD_SIZE`` > 1 in the environment (torchrun), join it through ``env://`` instead.
    The single-rank store listens on a free port the OS picks (``TCPStore`` port 0), so parallel
    test processes never collide and no ``MASTER_PORT`` needs to be set.
    """
    global _OWN_STORE
    if dist.is_initialized():
        return
    backend = "gloo" if device == "cpu" else "cpu:gloo,cuda:nccl"
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if world_size > 1:
        dist.init_process_group(backend=backend, init_method="env://")
        return
    _OWN_STORE = dist.TCPStore("127.0.0.1", 0, world_size=1, is_master=True)
    dist.init_process_group(backend=backend, store=_OWN_STORE, rank=0, world_size=1)


def _default_attn_implementation(device: str) -> str:
    if device == "cuda":
        try:
            import flash_attn  # noqa: F401

            return "flash_attention_2"
        except ImportError:
            return "sdpa"
    return "sdpa"


def _largest_divisor_at_most(n: int, limit: int) -> int:
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1


class VerlTrainEngine:
    """A Hugging Face causal LM trained on verl's FSDP2 engine with Trinity's losses.

    Build it on every rank with the same :class:`VerlEngineSettings`; each method is collective
    (call it on every rank, with that rank's shard of the batch).

    Attributes:
        settings: the settings it was built with.
        device: ``"cpu"`` or ``"cuda"``.
        global_step: optimizer steps taken (restored by :meth:`load_checkpoint`).
    """

    #: verl's model type of the engine: a causal LM here; the critic
    #: (:class:`~trinity.launcher.trainer.critic.VerlCriticEngine`) builds a ``value_model``.
    MODEL_TYPE = "language_model"

    def __init__(self, settings: VerlEngineSettings) -> None:
        self.settings = settings
        self.device = apply_verl_compat(settings.device)
        _ensure_process_group(self.device)
        torch.manual_seed(settings.seed)
        if self.device == "cuda":
            torch.cuda.manual_seed_all(settings.seed)
        self.global_step = 0
        self._engine = self._build_engine()

    # ---------------------------------------------------------------- construction

    def _build_engine(self) -> Any:
        from verl.trainer.config import CheckpointConfig
        from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
        from verl.workers.engine import EngineRegistry

        s = self.settings
        attn = s.attn_implementation or _default_attn_implementation(self.device)
        model_config = HFModelConfig(
            path=s.model_path,
            tokenizer_path=s.tokenizer_path,
            trust_remote_code=s.trust_remote_code,
            override_config={"attn_implementation": attn},
            use_remove_padding=s.use_remove_padding,
            enable_gradient_checkpointing=s.gradient_checkpointing,
            model_type=self.MODEL_TYPE,
        )
        compile_ = self.device != "cpu" if s.use_torch_compile is None else s.use_torch_compile
        engine_kwargs: dict[str, Any] = dict(
            strategy="fsdp2",
            model_dtype="fp32",
            mixed_precision={
                "param_dtype": s.precision,
                "reduce_dtype": "fp32",
                "buffer_dtype": "fp32",
            },
            use_torch_compile=compile_,
            use_dynamic_bsz=s.use_dynamic_bsz,
            micro_batch_size_per_gpu=s.micro_batch_size,
            max_token_len_per_gpu=s.max_token_len_per_gpu,
            infer_micro_batch_size_per_gpu=s.infer_micro_batch_size or s.micro_batch_size,
            infer_max_token_len_per_gpu=s.infer_max_token_len_per_gpu or s.max_token_len_per_gpu,
            use_remove_padding=s.use_remove_padding,
            ulysses_sequence_parallel_size=s.ulysses_sequence_parallel_size,
            fsdp_size=s.fsdp_size,
            param_offload=s.param_offload,
            optimizer_offload=s.optimizer_offload,
            seed=s.seed,
            full_determinism=s.full_determinism,
        )
        known = sorted(FSDPEngineConfig.__dataclass_fields__)
        unknown = sorted(set(s.engine_overrides) - set(known))
        if unknown:
            raise ValueError(
                f"VerlEngineSettings.engine_overrides has unknown FSDPEngineConfig fields "
                f"{unknown}; allowed: {', '.join(known)}"
            )
        engine_kwargs.update(s.engine_overrides)
        engine_config = FSDPEngineConfig(**engine_kwargs)
        optimizer_args = dict(s.optimizer_overrides)
        if s.optimizer.lower() in ("adam", "adamw"):
            optimizer_args.setdefault("eps", s.eps)
        optimizer_config = FSDPOptimizerConfig(
            optimizer=_OPTIMIZERS[s.optimizer.lower()],
            lr=s.lr,
            betas=s.betas,
            weight_decay=s.weight_decay,
            clip_grad=s.grad_clip,
            lr_scheduler_type=s.lr_scheduler_type,
            lr_warmup_steps=s.lr_warmup_steps,
            lr_warmup_steps_ratio=s.lr_warmup_steps_ratio,
            min_lr_ratio=s.min_lr_ratio,
            num_cycles=s.num_cycles,
            total_training_steps=s.total_training_steps,
            override_optimizer_config=optimizer_args or None,
        )
        self._model_config = model_config
        engine = EngineRegistry.new(
            model_type=self.MODEL_TYPE,
            backend="fsdp2",
            model_config=model_config,
            engine_config=engine_config,
            optimizer_config=optimizer_config,
            checkpoint_config=CheckpointConfig(),
        )
        started = time.perf_counter()
        engine.initialize()
        logger.info(
            "verl FSDP2 engine ready on %s (%s) in %.2fs",
            self.device,
            s.precision,
            time.perf_counter() - started,
        )
        return engine

    # ---------------------------------------------------------------- properties

    @property
    def verl_engine(self) -> Any:
        """The underlying ``verl.workers.engine.fsdp.FSDPEngineWithLMHead``."""
        return self._engine

    @property
    def module(self) -> torch.nn.Module:
        """The FSDP2-wrapped Hugging Face model."""
        return self._engine.module

    @property
    def tokenizer(self) -> Any:
        return self._model_config.tokenizer

    @property
    def hf_config(self) -> Any:
        return self._model_config.hf_config

    @property
    def rank(self) -> int:
        return dist.get_rank()

    @property
    def dp_size(self) -> int:
        return int(self._engine.get_data_parallel_size())

    @property
    def lr(self) -> float:
        """The learning rate the next optimizer step will use."""
        return float(self._engine.lr_scheduler.get_last_lr()[0])

    # ---------------------------------------------------------------- data layout

    def _micro_batch_size(self, batch_size: int, limit: int) -> int:
        mbs = _largest_divisor_at_most(batch_size, limit)
        if mbs != limit and batch_size > limit:
            logger.debug("batch of %d rows runs in micro-batches of %d", batch_size, mbs)
        return mbs

    def _check_batching(self, batch: Experiences, micro_batch_size: int, training: bool) -> None:
        """Refuse, on every rank alike, a batch verl's micro-batching cannot run.

        * dynamic batch size: the token budget must hold the longest sequence of any rank;
        * fixed micro-batch size with several data-parallel ranks: every rank must run the same
          number of micro-batches (FSDP's collectives pair up forward/backward passes across
          ranks; a rank with fewer would leave the others waiting forever).

        One all-reduce, so all ranks see the same numbers and raise together.
        """
        s = self.settings
        longest = int(batch.attention_mask.sum(dim=-1).max().item())
        n_micro = batch.batch_size // micro_batch_size
        stats = torch.tensor([longest, n_micro, -n_micro], dtype=torch.int64)
        if self.dp_size > 1:
            dist.all_reduce(
                stats, op=dist.ReduceOp.MAX, group=self._engine.get_data_parallel_group()
            )
        longest, most, fewest = int(stats[0]), int(stats[1]), -int(stats[2])
        if s.use_dynamic_bsz:
            if training or not s.infer_max_token_len_per_gpu:
                name, budget = "max_token_len_per_gpu", s.max_token_len_per_gpu
            else:
                name, budget = "infer_max_token_len_per_gpu", s.infer_max_token_len_per_gpu
            if (budget or 0) * s.ulysses_sequence_parallel_size < longest:
                raise ValueError(
                    f"VerlEngineSettings.{name}={budget} is smaller than the longest sequence of "
                    f"the batch ({longest} tokens); allowed: at least {longest}"
                )
        elif most != fewest:
            raise ValueError(
                f"the data-parallel ranks' batches split into {fewest} to {most} micro-batches "
                f"(micro_batch_size={micro_batch_size}); with several ranks and use_dynamic_bsz "
                "off every rank needs the same number: give each rank the same number of rows, "
                "or set use_dynamic_bsz (verl then agrees on a count across ranks)"
            )

    def _build_tensordict(
        self,
        batch: Experiences,
        fields: Mapping[str, Tensor],
        temperature: float,
        *,
        training: bool,
        calculate_entropy: bool,
        totals: tuple[float, float] = (0.0, 0.0),
    ) -> Any:
        """verl's no-padding TensorDict of ``batch`` plus ``fields`` (``[B, R]`` / ``[B]``)."""
        from tensordict import TensorDict
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import left_right_2_no_padding

        if not isinstance(batch, Experiences):
            raise TypeError(
                f"batch must be trinity.common.experience.Experiences, got {type(batch)}"
            )
        if temperature < 0 or not math.isfinite(temperature):
            raise ValueError(f"temperature={temperature!r} is invalid; allowed: a float >= 0")
        temperature = 1.0 if temperature == 0 else float(temperature)  # T=0 scores at 1
        s = self.settings
        size = batch.batch_size
        p = batch.prompt_length
        attention = batch.attention_mask.to(torch.int64)
        tensors: dict[str, Tensor] = {
            "input_ids": batch.tokens.to(torch.int64),
            "attention_mask": attention,
            "position_ids": batch.position_ids.to(torch.int64),
            "prompts": batch.tokens[:, :p].contiguous(),
            "responses": batch.tokens[:, p:].contiguous(),
            # valid (attended) response tokens: locates the response in the packed sequence
            "response_mask": attention[:, p:].contiguous(),
        }
        for name, value in fields.items():
            if value.shape[0] != size:
                raise ValueError(
                    f"batch field {name!r} has {value.shape[0]} rows, the batch has {size}"
                )
            tensors[name] = value
        td = left_right_2_no_padding(TensorDict(tensors, batch_size=[size]))
        if training:
            limit, budget = s.micro_batch_size, s.max_token_len_per_gpu
        else:
            limit = s.infer_micro_batch_size or s.micro_batch_size
            budget = s.infer_max_token_len_per_gpu or s.max_token_len_per_gpu
        micro_batch_size = self._micro_batch_size(size, limit)
        self._check_batching(batch, micro_batch_size, training)
        tu.assign_non_tensor(
            td,
            use_remove_padding=s.use_remove_padding,
            use_dynamic_bsz=s.use_dynamic_bsz,
            micro_batch_size_per_gpu=micro_batch_size,
            max_token_len_per_gpu=budget or 0,
            use_fused_kernels=False,
            temperature=temperature,
            calculate_entropy=calculate_entropy,
            pad_token_id=int(getattr(self.tokenizer, "pad_token_id", 0) or 0),
            **{_NUM_TOKENS: float(totals[0]), _NUM_SEQS: float(totals[1])},
        )
        return td

    def _loss_fields(
        self, batch: Experiences, loss: TrinityLoss, extra: Optional[Mapping[str, Tensor]]
    ) -> dict[str, Tensor]:
        """The batch fields ``loss`` needs, by Trinity's loss-argument names."""
        available: dict[str, Tensor] = {"action_mask": batch.action_mask}
        optional = {
            "old_logprob": batch.logprobs,
            "advantages": batch.advantages,
            "returns": batch.returns,
            "token_level_rewards": batch.token_level_rewards,
            "teacher_logprob": batch.teacher_logprobs,
        }
        available.update({k: v for k, v in optional.items() if v is not None})
        available.update(batch.custom_fields)
        available.update(dict(extra or {}))
        if "is_expert_mask" in available and "expert_mask" not in available:
            available["expert_mask"] = available["is_expert_mask"]
        needed = loss.required_fields()
        if "old_logprob" in available and "old_logprob" not in needed and loss.uses_kl:
            needed.append("old_logprob")  # corrected_k3 weights by pi / pi_old
        if loss.needs_entropy and "expert_mask" in available and "expert_mask" not in needed:
            needed.append("expert_mask")  # the 'mix' entropy bonus skips expert rows
        missing = [k for k in needed if k not in available]
        if missing:
            hint = {
                "ref_logprob": "pass extra={'ref_logprob': ...} (reference model log-probs) or "
                "use kl_loss_fn 'none'",
                "old_logprob": "collate experiences that carry logprobs, or pass "
                "extra={'old_logprob': ...}",
                "advantages": "compute advantages before training",
            }
            raise KeyError(
                f"the loss ({type(loss.policy_loss_fn).__name__}"
                f"{', KL ' + type(loss.kl_loss_fn).__name__ if loss.uses_kl else ''}) needs batch "
                f"fields {missing}, which the batch lacks (it has: {', '.join(sorted(available))})"
                + "".join(f"; {k}: {hint[k]}" for k in missing if k in hint)
            )
        out: dict[str, Tensor] = {}
        for key in needed:
            value = available[key].detach().cpu()
            out[key] = value.to(torch.float32) if value.is_floating_point() else value
        return out

    def _global_counts(self, mask: Tensor) -> tuple[float, float]:
        """Trained tokens and sequences with a trained token, over all data-parallel ranks."""
        counts = torch.tensor(
            [float(mask.sum().item()), float((mask.sum(dim=-1) > 0).sum().item())],
            dtype=torch.float64,
        )
        if self.dp_size > 1:
            dist.all_reduce(counts, group=self._engine.get_data_parallel_group())
        return float(counts[0]), float(counts[1])

    # ---------------------------------------------------------------- compute

    def compute_logprobs(
        self,
        batch: Experiences,
        temperature: float = 1.0,
        return_entropy: bool = False,
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """Log-probabilities of the response tokens under the current weights.

        ``log_softmax(logits / T)`` of each response token given everything before it (Trinity's
        logprob convention; ``T = 0`` scores at 1).

        Args:
            batch: a collated batch; ``tokens``, ``attention_mask``, ``position_ids`` and
                ``action_mask`` are read.
            temperature: the sampling temperature the responses were generated with.
            return_entropy: also return the per-token entropy of ``softmax(logits / T)``.

        Returns:
            float32 CPU ``[B, R]`` log-probs, 0 where ``action_mask`` is 0 (padding,
            environment tokens); with ``return_entropy``, ``(logprobs, entropy)`` likewise.
        """
        from verl.workers.utils.padding import no_padding_2_padding

        td = self._build_tensordict(
            batch, {}, temperature, training=False, calculate_entropy=return_entropy
        )
        with self._engine.eval_mode():
            output = self._engine.infer_batch(td)
        model_output = output["model_output"]
        mask = batch.action_mask.to(torch.float32)
        logprobs = no_padding_2_padding(model_output["log_probs"], td).float().cpu() * mask
        if not return_entropy:
            return logprobs
        entropy = no_padding_2_padding(model_output["entropy"], td).float().cpu() * mask
        return logprobs, entropy

    def train_step(
        self,
        batch: Experiences,
        loss: Union[TrinityLoss, ResolvedAlgorithm, Mapping[str, Any]],
        temperature: float = 1.0,
        extra: Optional[Mapping[str, Tensor]] = None,
    ) -> dict[str, float]:
        """One optimizer step on ``batch`` (the whole batch is the mini-batch).

        The engine runs the batch in micro-batches, accumulates the gradients of the Trinity loss
        (module docstring: the result equals one pass over the whole batch), clips the gradient
        norm, steps the optimizer and then the lr schedule.

        Args:
            batch: a collated batch with what the loss reads: by default ``old_logprob`` is
                ``batch.logprobs`` (the rollout's), ``advantages``/``returns`` the batch's,
                ``action_mask`` the batch's; ``batch.custom_fields`` are available by name.
            loss: a :class:`TrinityLoss`, or a resolved algorithm / algorithm mapping to build one
                from (built anew on each call: pass a ``TrinityLoss`` to keep stateful
                components).
            temperature: the rollout temperature (log-probs are ``log_softmax(logits / T)``).
            extra: more ``[B, R]`` (or ``[B]``) fields by loss-argument name, overriding the
                batch's: ``ref_logprob`` for the KL loss, a recomputed ``old_logprob``, ...

        Returns:
            Float metrics: ``actor/loss`` (total), ``actor/pg_loss`` and the policy loss's own
            metrics, ``actor/kl_loss``/``actor/kl_coef`` with a KL term,
            ``actor/entropy_loss``/``actor/entropy`` with entropy, ``actor/grad_norm`` (before
            clipping), ``actor/lr`` (used by this step), ``actor/num_tokens``,
            ``actor/step_time_s``.
        """
        spec = loss if isinstance(loss, TrinityLoss) else TrinityLoss.from_algorithm(loss)
        fields = self._loss_fields(batch, spec, extra)
        totals = self._global_counts(fields["action_mask"])
        td = self._build_tensordict(
            batch,
            fields,
            temperature,
            training=True,
            calculate_entropy=spec.needs_entropy,
            totals=totals,
        )
        lr = self.lr
        started = time.perf_counter()
        callback = _MicroBatchLoss(spec, list(fields), self.dp_size)
        grad_norm, metrics = self._train_batch(td, callback)
        metrics.update(
            {
                "actor/grad_norm": grad_norm,
                "actor/lr": lr,
                "actor/num_tokens": totals[0],
                "actor/step_time_s": time.perf_counter() - started,
            }
        )
        return metrics

    def _train_batch(self, td: Any, callback: Any) -> tuple[float, dict[str, float]]:
        """One optimizer step and lr-schedule step on ``td``; ``(grad_norm, metrics)``.

        The callback's metrics are already weighted by each micro-batch's share of the batch,
        so they are summed over micro-batches and data-parallel ranks.
        """
        with self._engine.train_mode():
            output = self._engine.train_batch(td, loss_function=callback)
        self._engine.lr_scheduler_step()
        self.global_step += 1

        raw = dict(output["metrics"])
        grad_norm = float(raw.pop("grad_norm"))
        names = sorted(raw)
        sums = torch.tensor(
            [
                sum(float(v) for v in raw[k]) if isinstance(raw[k], list) else float(raw[k])
                for k in names
            ],
            dtype=torch.float64,
        )
        if self.dp_size > 1 and names:
            dist.all_reduce(sums, group=self._engine.get_data_parallel_group())
        metrics = {k: float(v) for k, v in zip(names, sums.tolist(), strict=True)}
        if not math.isfinite(grad_norm):
            logger.warning(
                "step %d: gradient norm %s, the update was skipped", self.global_step, grad_norm
            )
        return grad_norm, metrics

    # ---------------------------------------------------------------- weights

    def iter_state_dict(self) -> Iterator[tuple[str, Tensor]]:
        """``(HF parameter name, full tensor)`` one at a time (gathered from the shards; on the
        engine's device). Collective: every rank must consume the whole iterator."""
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
        self._engine.load_checkpoint(str(path), del_local_after_load=False)
        meta_file = path / _CHECKPOINT_META
        if meta_file.is_file():
            self.global_step = int(json.loads(meta_file.read_text()).get("global_step", 0))
        return self.global_step
