"""KL divergence estimators, used as a reward penalty and as an actor loss.

RL fine-tuning keeps the policy near a reference model in one of two places:

* **reward penalty** (``kl_penalty_fn``, before advantages): ``token_level_rewards =
  token_level_scores - kl_coef * KL`` per response token
  (:meth:`KLFn.apply_kl_penalty_to_reward`), with an optional adaptive coefficient
  (Ziegler et al. 2019, arXiv:1909.08593) as verl's ``AdaptiveKLController``;
* **loss** (``kl_loss_fn``, in the actor update): ``kl_coef * aggregate(KL)`` is added to the
  policy loss (:meth:`KLFn.calculate_kl_loss`).

Estimators (Schulman, "Approximating KL divergence"; ``log_r = ref_logprob - logprob``), all
elementwise on ``[batch, response_len]`` tensors:

* ``k1``: ``logprob - ref_logprob`` (verl ``kl``/``k1``);
* ``k2``: ``0.5 * (logprob - ref_logprob) ** 2`` (verl ``mse``/``k2``);
* ``k3``: ``exp(log_r) - 1 - log_r``, unclamped;
* ``low_var_kl``: ``k3`` with ``log_r`` clamped to ±20 and the result to ±10 (verl
  ``low_var_kl``/``k3``);
* ``abs``: ``|logprob - ref_logprob|`` (verl ``abs``);
* ``corrected_k3``: ``clip(exp(logprob - old_logprob), 0, 2) * k3`` (no verl counterpart).

``k3`` follows Trinity-RFT (no clamping): it equals verl's ``k3`` wherever verl's clamps are
inactive (``|log_r| <= 20`` and a result below 10), which the parity tests check.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Optional

import torch
from torch import Tensor

from trinity.algorithm.args import ComponentArgs, Field, NonNegFloat, PosFloat
from trinity.algorithm.utils import aggregate_loss, masked_mean
from trinity.utils.registry import Registry

__all__ = [
    "KL_FN",
    "KL_TYPES",
    "AbsFn",
    "CorrectedK3Fn",
    "DummyKLFn",
    "K1Fn",
    "K2Fn",
    "K3Fn",
    "KLFn",
    "LowVarKLFn",
    "compute_kl",
]

KL_FN: Registry[type[KLFn]] = Registry("kl_fn")

#: The estimators :func:`compute_kl` knows (verl's aliases ``kl`` and ``mse`` are accepted too).
KL_TYPES = ("k1", "k2", "k3", "low_var_kl", "abs", "corrected_k3")
_ALIASES = {"kl": "k1", "mse": "k2"}

# Field names tried, in order, when reading a batch (verl DataProto names, then Trinity's).
_SCORE_KEYS = ("token_level_scores", "token_level_rewards")
_LOGPROB_KEYS = ("old_log_probs", "old_logprob", "logprobs")
_REF_KEYS = ("ref_log_prob", "ref_logprob")
_MASK_KEYS = ("response_mask", "action_mask")


def compute_kl(
    logprob: Tensor,
    ref_logprob: Tensor,
    kl_type: str,
    old_logprob: Optional[Tensor] = None,
) -> Tensor:
    """Elementwise KL estimate between the policy and the reference (see the module table).

    Args:
        logprob: ``[batch, response_len]`` log-probs of the sampled tokens under the policy.
        ref_logprob: same shape, under the reference model.
        kl_type: one of :data:`KL_TYPES` (or verl's ``kl``/``mse``).
        old_logprob: same shape, under the rollout policy; only ``corrected_k3`` uses it
            (without it, ``corrected_k3`` is ``k3``).

    Returns:
        ``[batch, response_len]`` estimates (not masked).
    """
    kind = _ALIASES.get(kl_type, kl_type)
    if kind == "k1":
        return logprob - ref_logprob
    if kind == "k2":
        return 0.5 * (logprob - ref_logprob).square()
    if kind == "abs":
        return (logprob - ref_logprob).abs()
    if kind == "k3":
        log_r = ref_logprob - logprob
        return torch.exp(log_r) - 1 - log_r
    if kind == "low_var_kl":
        log_r = torch.clamp(ref_logprob - logprob, min=-20, max=20)
        return torch.clamp(torch.exp(log_r) - log_r - 1, min=-10, max=10)
    if kind == "corrected_k3":
        log_r = ref_logprob - logprob
        k3 = torch.exp(log_r) - 1 - log_r
        if old_logprob is None:
            return k3
        # importance weight pi / pi_old: the loss is estimated on samples from pi_old
        return torch.clamp(torch.exp(logprob - old_logprob), min=0.0, max=2.0) * k3
    raise ValueError(f"Unknown kl_type {kl_type!r}; known: {', '.join(KL_TYPES)}, kl, mse")


def _get_field(container: Any, keys: tuple[str, ...]) -> Optional[Tensor]:
    """First of ``keys`` present in a mapping-like (dict, TensorDict) or as an attribute."""
    if hasattr(container, "keys") and hasattr(container, "__getitem__"):
        present = set(container.keys())
        for key in keys:
            if key in present and container[key] is not None:
                return container[key]
        return None
    custom = getattr(container, "custom_fields", None) or {}
    for key in keys:
        value = getattr(container, key, None)
        if value is None:
            value = custom.get(key)
        if value is not None:
            return value
    return None


def _container(experiences: Any) -> Any:
    """Where a batch keeps its tensors: a verl ``DataProto``'s ``.batch``, else the batch."""
    container = getattr(experiences, "batch", None)
    return experiences if container is None else container


def _set_field(container: Any, key: str, value: Tensor) -> None:
    if hasattr(container, "keys") and hasattr(container, "__setitem__"):
        container[key] = value
    else:
        setattr(container, key, value)


class KLFn(ABC):
    """A KL estimator (:meth:`calculate_kl`) with its coefficient.

    Args:
        adaptive: adapt ``kl_coef`` towards ``target_kl`` after each reward penalty.
        kl_coef: the coefficient (initial one if adaptive).
        target_kl / horizon: the adaptive controller's target and horizon.

    Raises:
        ValueError: ``adaptive`` without ``target_kl`` and ``horizon``.
    """

    class Args(ComponentArgs):
        """``kl_loss_fn_args`` / ``kl_penalty_fn_args`` of every KL estimator."""

        adaptive: bool = Field(False, description="Adapt kl_coef towards target_kl.")
        kl_coef: NonNegFloat = Field(0.001, description="KL coefficient.")
        target_kl: Optional[NonNegFloat] = Field(None, description="Target KL (adaptive).")
        horizon: Optional[PosFloat] = Field(None, description="Adaptation horizon (adaptive).")

    #: Estimator name for :func:`compute_kl`; subclasses set it.
    kl_type: ClassVar[str] = ""

    def __init__(
        self,
        adaptive: bool = False,
        kl_coef: float = 0.001,
        target_kl: Optional[float] = None,
        horizon: Optional[float] = None,
    ) -> None:
        if adaptive and (target_kl is None or horizon is None or horizon <= 0):
            raise ValueError("Adaptive KL needs target_kl and a positive horizon.")
        self.adaptive = adaptive
        self.kl_coef = kl_coef
        self.target_kl = target_kl
        self.horizon = horizon

    def update_kl_coef(self, current_kl: float, batch_size: int) -> None:
        """Adaptive update ``kl_coef *= 1 + clip(kl / target - 1, ±0.2) * batch_size / horizon``.

        Same as verl's ``AdaptiveKLController.update``; a no-op unless ``adaptive``.
        """
        if not self.adaptive:
            return
        error = min(max(current_kl / self.target_kl - 1.0, -0.2), 0.2)  # type: ignore[operator]
        self.kl_coef *= 1.0 + error * batch_size / self.horizon  # type: ignore[operator]

    @abstractmethod
    def calculate_kl(
        self,
        logprob: Tensor,
        ref_logprob: Tensor,
        old_logprob: Optional[Tensor] = None,
    ) -> Tensor:
        """Elementwise KL estimate ``[batch, response_len]`` (see :func:`compute_kl`)."""

    def calculate_kl_loss(
        self,
        logprob: Tensor,
        ref_logprob: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str,
        old_logprob: Optional[Tensor] = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """``kl_coef * aggregate_loss(KL, response_mask, loss_agg_mode)``, to add to the loss.

        Args:
            logprob, ref_logprob, response_mask, old_logprob: ``[batch, response_len]``.
            loss_agg_mode: see :func:`trinity.algorithm.utils.aggregate_loss`.

        Returns:
            The weighted scalar loss and ``{"kl_loss": unweighted value, "kl_coef": coef}``.
        """
        kl = self.calculate_kl(logprob, ref_logprob, old_logprob)
        kl_loss = aggregate_loss(kl, response_mask, loss_agg_mode=loss_agg_mode)
        metrics = {"kl_loss": float(kl_loss.detach().item()), "kl_coef": float(self.kl_coef)}
        return kl_loss * self.kl_coef, metrics

    def compute_kl_penalty(
        self,
        token_level_scores: Tensor,
        logprob: Tensor,
        ref_logprob: Optional[Tensor],
        response_mask: Tensor,
    ) -> tuple[Tensor, dict[str, float]]:
        """Token-level rewards ``scores - kl_coef * KL * mask``, then the adaptive update.

        Args:
            token_level_scores: ``[batch, response_len]`` task rewards.
            logprob: ``[batch, response_len]`` rollout-policy log-probs.
            ref_logprob: same, reference model; ``None`` means no penalty (coefficient 0).
            response_mask: ``[batch, response_len]``.

        Returns:
            ``token_level_rewards`` and ``{"kl": mean over rows of the per-row mean KL,
            "kl_coef": the coefficient applied}`` (as verl's ``apply_kl_penalty``).
        """
        mask = response_mask.to(token_level_scores.dtype)
        if ref_logprob is None:
            kl = torch.zeros_like(token_level_scores)
            kl_coef = 0.0
        else:
            kl = self.calculate_kl(logprob, ref_logprob) * mask
            kl_coef = float(self.kl_coef)
        rewards = token_level_scores - kl_coef * kl
        current_kl = float(masked_mean(kl, mask, axis=-1).mean(dim=0).item())
        self.update_kl_coef(current_kl=current_kl, batch_size=token_level_scores.shape[0])
        return rewards, {"kl": current_kl, "kl_coef": kl_coef}

    def apply_kl_penalty_to_reward(self, experiences: Any) -> tuple[Any, dict[str, float]]:
        """Set ``token_level_rewards`` on a batch from its scores and KL to the reference.

        ``experiences`` is a verl-style ``DataProto`` (fields in ``.batch``), a dict-like of
        tensors, or an object with attributes (e.g. :class:`~trinity.common.experience.
        Experiences`, whose ``custom_fields`` are searched too). Fields read, first found:
        scores ``token_level_scores``/``token_level_rewards``; log-probs ``old_log_probs``/
        ``old_logprob``/``logprobs``; reference ``ref_log_prob``/``ref_logprob`` (absent: no
        penalty); mask ``response_mask``/``action_mask``. When only ``token_level_rewards``
        holds the scores, it is overwritten, so apply the penalty once per batch.

        Returns:
            The same batch (modified in place) and the metrics of :meth:`compute_kl_penalty`.

        Raises:
            KeyError: scores, log-probs or the mask are missing.
        """
        container = _container(experiences)
        fields = {}
        for name, keys in (
            ("scores", _SCORE_KEYS),
            ("logprob", _LOGPROB_KEYS),
            ("mask", _MASK_KEYS),
        ):
            fields[name] = _get_field(container, keys)
            if fields[name] is None:
                raise KeyError(f"apply_kl_penalty_to_reward: the batch has none of {keys}")
        ref_logprob = _get_field(container, _REF_KEYS)
        rewards, metrics = self.compute_kl_penalty(
            fields["scores"], fields["logprob"], ref_logprob, fields["mask"]
        )
        _set_field(container, "token_level_rewards", rewards)
        return experiences, metrics

    @classmethod
    def default_args(cls) -> dict:
        """Initialization arguments used where the config gives none."""
        return {"adaptive": False, "kl_coef": 0.001}


class _EstimatorKLFn(KLFn):
    """A :class:`KLFn` whose estimator is :func:`compute_kl` with the class's ``kl_type``."""

    def calculate_kl(
        self,
        logprob: Tensor,
        ref_logprob: Tensor,
        old_logprob: Optional[Tensor] = None,
    ) -> Tensor:
        return compute_kl(logprob, ref_logprob, self.kl_type, old_logprob)


@KL_FN.register_module("none")
class DummyKLFn(KLFn):
    """No KL: rewards pass through unchanged, the KL loss is 0."""

    kl_type = "none"

    def calculate_kl(
        self,
        logprob: Tensor,
        ref_logprob: Tensor,
        old_logprob: Optional[Tensor] = None,
    ) -> Tensor:
        return torch.zeros_like(logprob)

    def compute_kl_penalty(
        self,
        token_level_scores: Tensor,
        logprob: Tensor,
        ref_logprob: Optional[Tensor],
        response_mask: Tensor,
    ) -> tuple[Tensor, dict[str, float]]:
        return token_level_scores, {}

    def calculate_kl_loss(
        self,
        logprob: Tensor,
        ref_logprob: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str,
        old_logprob: Optional[Tensor] = None,
    ) -> tuple[Tensor, dict[str, float]]:
        return logprob.new_zeros(()), {}

    def apply_kl_penalty_to_reward(self, experiences: Any) -> tuple[Any, dict[str, float]]:
        """Copy the scores to ``token_level_rewards`` (when they are stored separately)."""
        container = _container(experiences)
        scores = _get_field(container, _SCORE_KEYS)
        if scores is not None:
            _set_field(container, "token_level_rewards", scores)
        return experiences, {}


# One small class per estimator on purpose (they repeat each other's shape): they are the
# registered names and the class names Trinity-RFT code imports and subclasses; the estimator
# itself is one function, :func:`compute_kl`.
@KL_FN.register_module("k1")
class K1Fn(_EstimatorKLFn):
    """``logprob - ref_logprob``: unbiased for KL(pi || ref) but high variance, can be < 0."""

    kl_type = "k1"


@KL_FN.register_module("k2")
class K2Fn(_EstimatorKLFn):
    """``0.5 * (logprob - ref_logprob)^2``: biased, low variance; its gradient is the KL's."""

    kl_type = "k2"


@KL_FN.register_module("k3")
class K3Fn(_EstimatorKLFn):
    """``exp(log_r) - 1 - log_r`` with ``log_r = ref - logprob``: unbiased, >= 0, unclamped."""

    kl_type = "k3"


@KL_FN.register_module("low_var_kl")
class LowVarKLFn(_EstimatorKLFn):
    """``k3`` with verl's clamps (``log_r`` to ±20, result to ±10) for numerical safety."""

    kl_type = "low_var_kl"


@KL_FN.register_module("abs")
class AbsFn(_EstimatorKLFn):
    """``|logprob - ref_logprob|``."""

    kl_type = "abs"


@KL_FN.register_module("corrected_k3")
class CorrectedK3Fn(_EstimatorKLFn):
    """``k3`` weighted by the clipped importance ratio ``clip(pi / pi_old, 0, 2)``.

    The KL loss is estimated on tokens sampled from the rollout policy ``pi_old``, not from
    ``pi``; the ratio corrects that bias (falls back to ``k3`` without ``old_logprob``).
    """

    kl_type = "corrected_k3"
