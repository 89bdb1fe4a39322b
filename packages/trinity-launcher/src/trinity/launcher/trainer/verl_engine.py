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

import contextlib
import logging
import math
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional, Union

import torch
import torch.distributed as dist
from torch import Tensor

from trinity.common.experience import Experiences
from trinity.launcher.trainer.packed_attention import PACKED_SDPA
from trinity.launcher.trainer.packed_attention import register as register_packed_sdpa
from trinity.launcher.trainer.verl_compat import (
    apply_verl_compat,
)
from trinity.launcher.trainer.verl_lora import (
    adapter_only_optimizer,
    check_adapter,
    lora_model_fields,
    peft_build_error,
)

# The settings, the loss callback and the weights/checkpoint half of the engine live in their
# own modules; their names are re-exported here so that old import paths keep working.
from trinity.launcher.trainer.verl_loss import (  # noqa: F401
    _NUM_SEQS,
    _NUM_TOKENS,
    TrinityLoss,
    _MicroBatchLoss,
    _share,
)
from trinity.launcher.trainer.verl_settings import (  # noqa: F401
    _DTYPES,
    _OPTIMIZERS,
    _SCHEDULERS,
    _TORCH_DTYPES,
    VerlEngineSettings,
)
from trinity.launcher.trainer.verl_weights import _CHECKPOINT_META, VerlWeightsMixin  # noqa: F401

if TYPE_CHECKING:
    from trinity.algorithm.resolve import ResolvedAlgorithm


__all__ = ["TrinityLoss", "VerlEngineSettings", "VerlTrainEngine"]

logger = logging.getLogger(__name__)


# Process-group store created by this module (kept alive for the process's lifetime).
_OWN_STORE: Optional[Any] = None


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
    """flash-attention 2 where its kernels exist (CUDA with ``flash_attn``), else ``sdpa_packed``
    (:mod:`~trinity.launcher.trainer.packed_attention`: sdpa without the packed layout's
    ``T x T`` mask). Both attend within each packed sequence only."""
    if device == "cuda":
        try:
            import flash_attn  # noqa: F401

            return "flash_attention_2"
        except ImportError:
            pass
    return PACKED_SDPA


def _largest_divisor_at_most(n: int, limit: int) -> int:
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1


class VerlTrainEngine(VerlWeightsMixin):
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
        #: a LoRA adapter trains on the frozen base (the policy only: a critic trains in full)
        self.is_lora = bool(settings.lora_rank) and self.MODEL_TYPE == "language_model"
        self._engine = self._build_engine()

    # ---------------------------------------------------------------- construction

    def _engine_config(self) -> Any:
        """verl's ``FSDPEngineConfig`` from the settings (``engine_overrides`` last, each
        checked against its fields)."""
        from verl.workers.config import FSDPEngineConfig

        s = self.settings
        compile_ = self.device != "cpu" if s.use_torch_compile is None else s.use_torch_compile
        # Field-by-field mapping of our settings onto verl's engine and optimizer configs (the two
        # keyword lists look alike but name different verl fields; nothing to fold).
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
        return FSDPEngineConfig(**engine_kwargs)

    def _optimizer_config(self) -> Any:
        """verl's ``FSDPOptimizerConfig`` from the settings (``optimizer_overrides`` win)."""
        from verl.workers.config import FSDPOptimizerConfig

        s = self.settings
        optimizer_args = dict(s.optimizer_overrides)
        if s.optimizer.lower() in ("adam", "adamw"):
            optimizer_args.setdefault("eps", s.eps)
            if self.device == "cpu":
                # torch picks the per-tensor loop off CUDA; with FSDP2's DTensor parameters
                # every op of it is a dispatch (9 of the quickstart's ~60 ms train step)
                optimizer_args.setdefault("foreach", True)
        return FSDPOptimizerConfig(
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

    def _build_engine(self) -> Any:
        from verl.trainer.config import CheckpointConfig
        from verl.workers.config import HFModelConfig
        from verl.workers.engine import EngineRegistry

        s = self.settings
        if self.device == "cpu" and s.cpu_threads:
            torch.set_num_threads(s.cpu_threads)  # see verl_settings.cpu_threads_for
        attn = s.attn_implementation or _default_attn_implementation(self.device)
        if attn == PACKED_SDPA:
            register_packed_sdpa()  # in this process, before verl loads the model
        model_config = HFModelConfig(
            path=s.model_path,
            tokenizer_path=s.tokenizer_path,
            trust_remote_code=s.trust_remote_code,
            override_config={"attn_implementation": attn},
            use_remove_padding=s.use_remove_padding,
            enable_gradient_checkpointing=s.gradient_checkpointing,
            model_type=self.MODEL_TYPE,
            **(lora_model_fields(s) if self.is_lora else {}),
        )
        self._model_config = model_config
        engine = EngineRegistry.new(
            model_type=self.MODEL_TYPE,
            backend="fsdp2",
            model_config=model_config,
            engine_config=self._engine_config(),
            optimizer_config=self._optimizer_config(),
            # a LoRA checkpoint holds the adapter (the frozen base is model_path's)
            checkpoint_config=CheckpointConfig(save_lora_only=self.is_lora),
        )
        started = time.perf_counter()
        if self.is_lora:
            adapter_only_optimizer(engine)
        try:
            engine.initialize()
        except ValueError as exc:
            error = peft_build_error(s, exc) if self.is_lora else None
            if error is None:
                raise
            raise error from exc
        if self.is_lora:
            check_adapter(engine.module, s)
        if hasattr(engine.module.config, "vision_config"):
            from trinity.launcher.trainer.verl_mm import localize_vl_patches

            localize_vl_patches(engine.module)
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
        rows: list[Any] = []
        if batch.multi_modal_inputs:  # image rows: rotary axes and the vision inputs
            from trinity.launcher.trainer.verl_mm import mm_rows, vlm_position_ids

            rows = mm_rows(batch.multi_modal_inputs)
            tensors["position_ids"] = vlm_position_ids(
                tensors["input_ids"],
                attention,
                tensors["position_ids"],
                [row["image_grid_thw"] for row in rows],
                self.tokenizer,
                int(self.hf_config.vision_config.spatial_merge_size),
                p,
            )
        td = TensorDict(tensors, batch_size=[size])
        if rows:
            td = tu.get_tensordict({**td.to_dict(), "multi_modal_inputs": rows})
        td = left_right_2_no_padding(td)
        if rows:
            from trinity.launcher.trainer.verl_mm import nested_mrope_positions

            td["position_ids"] = nested_mrope_positions(tensors["position_ids"], attention)
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
        disable_adapter: bool = False,
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """Log-probabilities of the response tokens under the current weights.

        ``log_softmax(logits / T)`` of each response token given everything before it (Trinity's
        logprob convention; ``T = 0`` scores at 1).

        Args:
            batch: a collated batch; ``tokens``, ``attention_mask``, ``position_ids`` and
                ``action_mask`` are read.
            temperature: the sampling temperature the responses were generated with.
            return_entropy: also return the per-token entropy of ``softmax(logits / T)``.
            disable_adapter: score with the LoRA adapter disabled: the frozen base model, the
                reference of a LoRA run (verl's ``engine.disable_adapter()``); LoRA only.

        Returns:
            float32 CPU ``[B, R]`` log-probs, 0 where ``action_mask`` is 0 (padding,
            environment tokens); with ``return_entropy``, ``(logprobs, entropy)`` likewise.
        """
        from verl.workers.utils.padding import no_padding_2_padding

        if disable_adapter and not self.is_lora:
            raise ValueError("disable_adapter=True needs a LoRA engine (settings.lora_rank > 0)")
        td = self._build_tensordict(
            batch, {}, temperature, training=False, calculate_entropy=return_entropy
        )
        adapter = self._engine.disable_adapter() if disable_adapter else contextlib.nullcontext()
        with self._engine.eval_mode(), adapter:
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
        prepare_started = time.perf_counter()
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
                # where the step's time and tokens went (next to the explorer's time/* keys)
                "time/train/prepare": started - prepare_started,
                "train/real_tokens": float(batch.attention_mask.sum().item()),
                "train/padded_tokens": float(batch.attention_mask.numel()),
            }
        )
        return metrics

    def _train_batch(self, td: Any, callback: Any) -> tuple[float, dict[str, float]]:
        """One optimizer step and lr-schedule step on ``td``; ``(grad_norm, metrics)``.

        The callback's metrics are already weighted by each micro-batch's share of the batch,
        so they are summed over micro-batches and data-parallel ranks.
        """
        from verl.utils.tensordict_utils import maybe_fix_3d_position_ids

        # verl's BaseEngine.train_batch, step by step, so the breakdown can time each part
        with self._engine.train_mode():
            maybe_fix_3d_position_ids(td)
            self._engine.optimizer_zero_grad()
            t0 = time.perf_counter()
            output = self._engine.forward_backward_batch(td, callback, forward_only=False)
            t1 = time.perf_counter()
            grad_norm = self._engine.optimizer_step()
            t2 = time.perf_counter()
        if self._engine.is_mp_src_rank_with_outputs():
            output["metrics"]["grad_norm"] = grad_norm
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
        metrics["time/train/forward_backward"] = t1 - t0
        metrics["time/train/optimizer"] = t2 - t1
        metrics["train/micro_batches"] = float(callback.calls)
        if not math.isfinite(grad_norm):
            logger.warning(
                "step %d: gradient norm %s, the update was skipped", self.global_step, grad_norm
            )
        return grad_norm, metrics
