"""The PPO critic: a value model on verl's FSDP2 engine, trained with Trinity's value loss.

verl 0.9.1 has value-model support in its new engine API: ``EngineRegistry`` model type
``value_model`` (``FSDPEngineWithValueHead``) loads the model as ``AutoModelForTokenClassification``
with one label (a linear ``score`` head on the last hidden state, initialised fresh when the
checkpoint is a causal LM) and returns per-token values instead of log-probs. Everything else
(FSDP2 sharding, packed no-padding micro-batches, AdamW, lr schedule, gradient clipping, sharded
checkpoints) is the actor's machinery, so :class:`VerlCriticEngine` is a
:class:`~trinity.launcher.trainer.verl_engine.VerlTrainEngine` with verl's model type switched and
two methods of its own:

* :meth:`VerlCriticEngine.compute_values` - ``V(s_t)`` for every response token ``[B, R]``:
  the value of the state *before* response token ``t`` (the model output at the previous
  position, verl's ``no_padding_2_padding`` shift), zero where ``action_mask`` is 0;
* :meth:`VerlCriticEngine.update` - one optimizer step on Trinity's clipped value loss
  (:class:`trinity.algorithm.value_loss.ValueLossFn`) against the returns, micro-batched exactly
  as the actor's loss is (each micro-batch's term is scaled by its share of the whole batch's
  aggregation denominator, so micro-batching does not change the step).

Settings come from the config as in Trinity-RFT: the critic starts from ``model.critic_model_path``
(which defaults to ``model.model_path``), and the verl passthrough
``trainer.trainer_config.critic`` (verl's ``critic`` section) tunes it; every key left out takes
the policy engine's value (see :meth:`VerlCriticEngine.from_config`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import torch
from torch import Tensor

from trinity.common.experience import Experiences
from trinity.launcher.trainer.verl_engine import VerlTrainEngine
from trinity.launcher.trainer.verl_loss import _MicroBatchCallback
from trinity.launcher.trainer.verl_settings import _OPTIMIZERS, VerlEngineSettings

if TYPE_CHECKING:
    from trinity.algorithm.value_loss import ValueLossFn
    from trinity.common.config import Config

__all__ = ["VerlCriticEngine", "critic_section", "critic_settings"]

logger = logging.getLogger(__name__)

_CRITIC_PATH = "trainer.trainer_config.critic"


def critic_section(config: Config) -> dict[str, Any]:
    """The verl passthrough ``trainer.trainer_config.critic`` as a plain dict (``{}`` if unset)."""
    section = (config.trainer.trainer_config or {}).get("critic") or {}
    if not isinstance(section, Mapping):
        raise ValueError(f"{_CRITIC_PATH}={section!r} is invalid; allowed: a mapping of settings")
    return dict(section)


def _pick(section: Mapping[str, Any], key: str, cast: type, default: Any, where: str) -> Any:
    """``section[key]`` converted with ``cast`` (``default`` when absent or null)."""
    value = section.get(key)
    if value is None:
        return default
    try:
        if cast is bool and not isinstance(value, bool):
            raise TypeError
        return cast(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"{where}.{key}={value!r} is invalid; allowed: a {cast.__name__}"
        ) from None


#: Critic settings read as they are, each falling back to the policy engine's: (part of
#: ``trainer.trainer_config.critic``, verl's key there, type, :class:`VerlEngineSettings` field)
_CRITIC_KEYS: tuple[tuple[str, str, type, str], ...] = (
    ("optim", "lr", float, "lr"),
    ("optim", "weight_decay", float, "weight_decay"),
    ("optim", "lr_warmup_steps", int, "lr_warmup_steps"),
    ("optim", "lr_warmup_steps_ratio", float, "lr_warmup_steps_ratio"),
    ("optim", "min_lr_ratio", float, "min_lr_ratio"),
    ("", "ppo_micro_batch_size_per_gpu", int, "micro_batch_size"),
    ("", "forward_micro_batch_size_per_gpu", int, "infer_micro_batch_size"),
    ("", "use_dynamic_bsz", bool, "use_dynamic_bsz"),
    ("", "ulysses_sequence_parallel_size", int, "ulysses_sequence_parallel_size"),
    ("model", "enable_gradient_checkpointing", bool, "gradient_checkpointing"),
    ("model.fsdp_config", "param_offload", bool, "param_offload"),
    ("model.fsdp_config", "optimizer_offload", bool, "optimizer_offload"),
)


def critic_settings(config: Config, **overrides: Any) -> tuple[VerlEngineSettings, ValueLossFn]:
    """The critic's engine settings and value loss for a Trinity config (``check_and_update``
    done), without building the engine: :meth:`VerlCriticEngine.from_config` builds from them,
    and the verl view of ``trainer.trainer_config`` shows them (``verl_view``).

    Model: ``model.critic_model_path`` (else ``model.model_path``); the tokenizer is the
    policy's (``model.model_path``), since the critic reads the policy's token ids.

    ``trainer.trainer_config.critic`` (verl's names, as Trinity-RFT reads them), each key
    falling back to the policy engine's setting (:meth:`VerlEngineSettings.from_config`):

    * ``optim.{lr, betas, weight_decay, lr_warmup_steps, lr_warmup_steps_ratio,
      min_lr_ratio, lr_scheduler_type | warmup_style, optimizer, clip_grad}``;
    * ``grad_clip`` (wins over ``optim.clip_grad``);
    * ``ppo_micro_batch_size_per_gpu``, ``forward_micro_batch_size_per_gpu``,
      ``use_dynamic_bsz``, ``ppo_max_token_len_per_gpu``, ``forward_max_token_len_per_gpu``,
      ``ulysses_sequence_parallel_size``;
    * ``model.enable_gradient_checkpointing``,
      ``model.fsdp_config.{param_offload, optimizer_offload}``;
    * the value loss: ``cliprange_value`` (default 0.5) and ``loss_agg_mode`` (default: the
      algorithm's ``loss_agg_mode``);
    * ``ppo_epochs``: only 1 (one critic step per batch, as the actor) is supported.

    ``overrides`` are :class:`VerlEngineSettings` fields and win over everything.
    """
    from trinity.algorithm.resolve import resolve_algorithm
    from trinity.algorithm.value_loss import ValueLossFn

    section = critic_section(config)
    optim = section.get("optim") or {}
    model = section.get("model") or {}
    fsdp = (model.get("fsdp_config") if isinstance(model, Mapping) else None) or {}
    for name, value in (("optim", optim), ("model", model), ("model.fsdp_config", fsdp)):
        if not isinstance(value, Mapping):
            raise ValueError(
                f"{_CRITIC_PATH}.{name}={value!r} is invalid; allowed: a mapping of settings"
            )
    epochs = _pick(section, "ppo_epochs", int, 1, _CRITIC_PATH)
    if epochs != 1:
        raise ValueError(
            f"{_CRITIC_PATH}.ppo_epochs={epochs} is invalid; allowed: 1 (the trainer takes "
            "one critic step per batch, as it does for the actor)"
        )

    base = VerlEngineSettings.from_config(config, **overrides)
    parts = {"": section, "optim": optim, "model": model, "model.fsdp_config": fsdp}
    kwargs: dict[str, Any] = {
        field: _pick(
            parts[part],
            key,
            kind,
            getattr(base, field),
            ".".join(filter(None, (_CRITIC_PATH, part))),
        )
        for part, key, kind, field in _CRITIC_KEYS
    }
    where_optim = f"{_CRITIC_PATH}.optim"
    scheduler = optim.get("warmup_style") or optim.get("lr_scheduler_type")
    optimizer = optim.get("optimizer")
    kwargs.update(
        model_path=config.model.critic_model_path or config.model.model_path,
        tokenizer_path=config.model.model_path,
        betas=tuple(optim["betas"]) if optim.get("betas") is not None else base.betas,
        lr_scheduler_type=str(scheduler) if scheduler else base.lr_scheduler_type,
        optimizer=_OPTIMIZERS.get(str(optimizer).lower(), str(optimizer))
        if optimizer
        else base.optimizer,
        grad_clip=_pick(
            section,
            "grad_clip",
            float,
            _pick(optim, "clip_grad", float, base.grad_clip, where_optim),
            _CRITIC_PATH,
        ),
        # 0 (Trinity-RFT's "unset") keeps the policy's budget
        max_token_len_per_gpu=_pick(section, "ppo_max_token_len_per_gpu", int, 0, _CRITIC_PATH)
        or base.max_token_len_per_gpu,
        infer_max_token_len_per_gpu=_pick(
            section, "forward_max_token_len_per_gpu", int, 0, _CRITIC_PATH
        )
        or base.infer_max_token_len_per_gpu,
    )
    kwargs.update(overrides)
    settings = replace(base, **kwargs)
    value_loss = ValueLossFn(
        cliprange_value=_pick(section, "cliprange_value", float, 0.5, _CRITIC_PATH),
        loss_agg_mode=str(section.get("loss_agg_mode") or resolve_algorithm(config).loss_agg_mode),
    )
    return settings, value_loss


class VerlCriticEngine(VerlTrainEngine):
    """A value model (``V(s_t)`` per token) trained on verl's FSDP2 engine.

    Build it like the policy engine, from :class:`VerlEngineSettings` (``model_path`` is the
    critic's model), plus the value loss; or from a Trinity config with :meth:`from_config`.
    Methods are collective, as the policy engine's. ``save_checkpoint`` / ``load_checkpoint``
    (inherited) resume the critic bit for bit: weights, optimizer, lr schedule, RNG.

    Args:
        settings: engine settings of the critic.
        value_loss: the critic loss; default ``ValueLossFn()`` (clip range 0.5, token-mean).
    """

    MODEL_TYPE = "value_model"

    def __init__(
        self, settings: VerlEngineSettings, value_loss: Optional[ValueLossFn] = None
    ) -> None:
        from trinity.algorithm.value_loss import ValueLossFn

        self.value_loss = value_loss if value_loss is not None else ValueLossFn()
        super().__init__(settings)

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_config(cls, config: Config, **overrides: Any) -> VerlCriticEngine:
        """The critic of a Trinity config (``check_and_update`` done), with the settings and
        value loss of :func:`critic_settings` (``overrides`` are :class:`VerlEngineSettings`
        fields and win over everything)."""
        settings, value_loss = critic_settings(config, **overrides)
        return cls(settings, value_loss)

    # ---------------------------------------------------------------- values

    def compute_values(self, batch: Experiences) -> Tensor:
        """The critic's value of each response token's state under the current weights.

        Args:
            batch: a collated batch (``tokens``, ``attention_mask``, ``position_ids`` and
                ``action_mask`` are read).

        Returns:
            float32 CPU ``[B, R]``: ``V`` of the prefix before response token ``t`` (verl's
            convention, the GAE ``V(s_t)``), 0 where ``action_mask`` is 0 (padding, environment
            tokens).
        """
        from verl.workers.utils.padding import no_padding_2_padding

        td = self._build_tensordict(batch, {}, 1.0, training=False, calculate_entropy=False)
        with self._engine.eval_mode():
            output = self._engine.infer_batch(td)
        values = no_padding_2_padding(output["model_output"]["values"], td)
        return values.float().cpu() * batch.action_mask.to(torch.float32)

    def update(
        self,
        batch: Experiences,
        values: Tensor,
        returns: Optional[Tensor] = None,
        value_loss: Optional[ValueLossFn] = None,
    ) -> dict[str, float]:
        """One optimizer step of the critic on ``batch``.

        Args:
            batch: a collated batch; ``action_mask`` selects the trained tokens.
            values: ``[B, R]`` the critic's values the returns were computed with (``v_old`` of
                the clipped value loss: new predictions are clipped to within
                ``cliprange_value`` of them).
            returns: ``[B, R]`` regression targets; default ``batch.returns`` (GAE sets them).
            value_loss: default :attr:`value_loss`.

        Returns:
            ``critic/vf_loss``, ``critic/vf_clipfrac``, ``critic/vpred_mean`` (the predictions
            during the step, over trained tokens), ``critic/grad_norm`` (before clipping),
            ``critic/lr`` (used by this step), ``critic/step_time_s``.
        """
        loss_fn = value_loss if value_loss is not None else self.value_loss
        targets = batch.returns if returns is None else returns
        if targets is None:
            raise ValueError(
                "the critic update needs returns [B, R]: compute advantages (e.g. the 'ppo' "
                "advantage function) first or pass returns=..."
            )
        fields: dict[str, Tensor] = {"action_mask": batch.action_mask.detach().cpu()}
        for name, value in (("values", values), ("returns", targets)):
            if tuple(value.shape) != tuple(batch.action_mask.shape):
                raise ValueError(
                    f"critic {name} have shape {tuple(value.shape)}, the batch's action_mask "
                    f"{tuple(batch.action_mask.shape)}"
                )
            fields[name] = value.detach().cpu().to(torch.float32)
        totals = self._global_counts(fields["action_mask"])
        td = self._build_tensordict(
            batch, fields, 1.0, training=True, calculate_entropy=False, totals=totals
        )
        lr = self.lr
        started = time.perf_counter()
        grad_norm, raw = self._train_batch(td, _MicroBatchValueLoss(loss_fn, self.dp_size))
        # the shared step timings/counts get critic names, so the actor's step keeps its own
        metrics = {_critic_key(k): v for k, v in raw.items()}
        metrics.update(
            {
                "critic/grad_norm": grad_norm,
                "critic/lr": lr,
                "critic/step_time_s": time.perf_counter() - started,
            }
        )
        return metrics

    # ---------------------------------------------------------------- not a policy

    def compute_logprobs(self, *args: Any, **kwargs: Any) -> Any:
        """A value model has no token distribution; use :meth:`compute_values`."""
        raise TypeError("VerlCriticEngine has no log-probs; use compute_values()")

    def train_step(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """The critic trains on the value loss only; use :meth:`update`."""
        raise TypeError("VerlCriticEngine trains with update(batch, values, returns)")

    def save_hf(
        self, directory: Union[str, os.PathLike], dtype: Optional[torch.dtype] = None
    ) -> Path:
        """A Hugging Face directory of the value model (``*ForTokenClassification``, one label).

        The engine's HF config is the causal LM's it was loaded from; its ``architectures`` is
        rewritten so ``AutoModelForTokenClassification`` (and readers of the config) see what
        the weights are.
        """
        path = super().save_hf(directory, dtype)
        if self.rank == 0:
            config_file = path / "config.json"
            data = json.loads(config_file.read_text())
            inner = getattr(self.module, "_orig_mod", self.module)
            name = type(inner).__name__.removeprefix("FSDP")
            data["architectures"] = [name]
            config_file.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        torch.distributed.barrier()
        return path


def _critic_key(name: str) -> str:
    """``time/train/x`` -> ``time/critic/x``, ``train/micro_batches`` -> ``critic/micro_batches``."""
    if name.startswith("time/train/"):
        return "time/critic/" + name.removeprefix("time/train/")
    if name == "train/micro_batches":
        return "critic/micro_batches"
    return name


class _MicroBatchValueLoss(_MicroBatchCallback):
    """The ``loss_function`` verl's value engine calls per micro-batch.

    ``model_output["values"]`` is nested ``[b, j]`` over the packed sequences; the micro-batch
    TensorDict carries ``values`` (old), ``returns`` and ``action_mask`` ``[b, R]``. The loss is
    weighted by the micro-batch's share of the whole batch's denominator, the metrics by their
    shares; counting, the shares and the data-parallel scaling are :class:`_MicroBatchCallback`'s.
    """

    def __init__(self, value_loss: ValueLossFn, dp_size: int) -> None:
        super().__init__(dp_size)
        self.value_loss = value_loss

    def micro_batch_loss(
        self, model_output: Mapping[str, Tensor], data: Any, share: Callable[[Tensor, str], float]
    ) -> tuple[Tensor, dict[str, float]]:
        from trinity.algorithm.utils import masked_mean

        vpreds = self.padded(model_output, "values", data)  # [b, R]
        mask = data["action_mask"]
        loss, terms = self.value_loss(
            vpreds, data["returns"].to(vpreds.dtype), data["values"].to(vpreds.dtype), mask
        )
        w_loss = share(mask, self.value_loss.loss_agg_mode)
        w_tok = share(mask, "token-mean")
        vpred_mean = float(masked_mean(vpreds.detach(), mask).item()) if mask.any() else 0.0
        metrics = {
            "critic/vf_loss": terms["vf_loss"] * w_loss,
            "critic/vf_clipfrac": terms["vf_clipfrac"] * w_tok,
            "critic/vpred_mean": vpred_mean * w_tok,
        }
        if not math.isfinite(terms["vf_loss"]):
            logger.warning("critic value loss is %s on a micro-batch", terms["vf_loss"])
        return loss * w_loss, metrics
