"""Policy losses: the :class:`PolicyLossFn` contract and the ``POLICY_LOSS_FN`` registry.

A policy loss declares the batch tensors it needs by naming them in ``__call__``'s parameter
list (``logprob, old_logprob, action_mask, advantages, ...``); the trainer reads that signature
(:attr:`PolicyLossFn.select_keys`) and passes exactly those fields, so a new loss never has to
fish its inputs out of ``**kwargs``.

Calls with the training backend's batch keys work as in Trinity-RFT: ``loss(log_prob=lp,
**verl_batch)`` renames ``log_prob``/``old_log_probs``/``ref_log_prob``/``response_mask`` to
``logprob``/``old_logprob``/``ref_logprob``/``action_mask`` (see
:mod:`trinity.algorithm.key_mapper`) before the subclass's ``__call__`` runs; a ``__call__``
without ``**kwargs`` gets only the fields it names. ``select_keys`` stays in Trinity's names
(our trainer builds the batch in those names).
"""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Optional

from torch import Tensor

from trinity.algorithm.key_mapper import ALL_MAPPERS
from trinity.algorithm.policy_loss_fn.functional import metrics_to_floats
from trinity.utils.registry import Registry

__all__ = ["POLICY_LOSS_FN", "PolicyLossFn", "RatioPolicyLossFn"]

POLICY_LOSS_FN: Registry[type[PolicyLossFn]] = Registry("policy_loss_fn")

# Names in ``__call__`` that are not batch fields.
_NOT_BATCH_FIELDS = {"self", "kwargs", "logprob"}


def _with_backend_keys(call: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a loss's ``__call__`` so keyword arguments in the backend's names are renamed."""
    params = inspect.signature(call).parameters
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    named = set(params) - {"self"}

    @functools.wraps(call)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            mapper = ALL_MAPPERS.get(getattr(self, "backend", "verl"))
            if mapper is not None:
                renamed: dict[str, Any] = {}
                for key, value in kwargs.items():
                    new_key = mapper.to_trinity(key)
                    # An explicit Trinity name wins over the backend's alias of it.
                    if new_key != key and new_key in kwargs:
                        continue
                    renamed[new_key] = value
                kwargs = renamed
            if not takes_kwargs:
                kwargs = {k: v for k, v in kwargs.items() if k in named}
        return call(self, *args, **kwargs)

    wrapper.__trinity_key_mapped__ = True  # type: ignore[attr-defined]
    return wrapper


class PolicyLossFn(ABC):
    """Base class of policy losses.

    ``__call__(self, logprob, <batch fields...>, **kwargs) -> (loss, metrics)``: ``logprob`` is
    the current policy's per-token log-probability ``[batch, response_len]``; the other named
    parameters are batch fields of the same shape unless documented otherwise (e.g.
    ``old_logprob``, ``action_mask``, ``advantages``, ``ref_logprob``, ``is_expert_mask``).

    Class attributes hold settings every loss shares (``loss_agg_mode``), so a subclass whose
    ``__init__`` does not take them still has them (see ``build_component``).
    """

    loss_agg_mode: str = "token-mean"
    _select_keys: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own_call = cls.__dict__.get("__call__")
        if callable(own_call) and not getattr(own_call, "__trinity_key_mapped__", False):
            cls.__call__ = _with_backend_keys(own_call)  # type: ignore[method-assign]
        params = inspect.signature(cls.__call__).parameters
        cls._select_keys = tuple(
            name
            for name, p in params.items()
            if name not in _NOT_BATCH_FIELDS and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )

    def __init__(self, backend: str = "verl", **kwargs: Any) -> None:
        self.backend = backend
        for key, value in kwargs.items():
            setattr(self, key, value)

    @property
    def select_keys(self) -> list[str]:
        """The batch fields ``__call__`` asks for, in signature order."""
        return list(self._select_keys)

    @property
    def accepts_rollout_is_weights(self) -> bool:
        """Whether :meth:`compute` can weight the per-token loss by ``rollout_is_weights``
        (``algorithm.rollout_correction``'s IS weights); the ratio losses can."""
        return False

    @abstractmethod
    def __call__(self, logprob: Tensor, **kwargs: Any) -> tuple[Tensor, dict]:
        """Return the scalar loss and a dict of float metrics."""

    @classmethod
    def default_args(cls) -> dict:
        """Initialization arguments used where the config gives none."""
        return {}

    def compute(
        self,
        logprob: Tensor,
        batch: Mapping[str, Any],
        rollout_is_weights: Optional[Tensor] = None,
    ) -> tuple[Tensor, dict]:
        """Call the loss with exactly the batch fields its signature names.

        ``rollout_is_weights`` (``[batch, response_len]``): per-token weights multiplied into
        the loss before aggregation (rollout correction); only for a loss that
        :attr:`accepts_rollout_is_weights`.

        Raises:
            KeyError: a field the loss asks for is not in the batch (names the loss and the
                fields the batch has).
            ValueError: ``rollout_is_weights`` for a loss that cannot take them.
        """
        missing = [k for k in self._select_keys if k not in batch]
        if missing:
            raise KeyError(
                f"{type(self).__name__} needs batch fields {missing}, which the batch lacks "
                f"(it has: {', '.join(sorted(batch))})"
            )
        extra: dict[str, Tensor] = {}
        if rollout_is_weights is not None:
            if not self.accepts_rollout_is_weights:
                raise ValueError(
                    f"{type(self).__name__} cannot apply rollout-correction IS weights "
                    "(algorithm.rollout_correction.rollout_is); the ratio losses (ppo, gspo, "
                    "cispo, sapo, topr, importance_sampling) can"
                )
            extra["rollout_is_weights"] = rollout_is_weights
        return self(logprob=logprob, **{k: batch[k] for k in self._select_keys}, **extra)


class RatioPolicyLossFn(PolicyLossFn):
    """Shared ``__call__`` of the losses built on the ratio ``pi / pi_old`` (PPO, GSPO, CISPO,
    SAPO, TOPR, importance sampling): they read ``old_logprob``, ``action_mask`` and
    ``advantages`` and differ only in their pure loss function and its settings.

    Subclasses set ``loss_fn`` (``fn(logprob, old_logprob, advantages, mask, *,
    loss_agg_mode, **settings) -> (loss, metric tensors)``) and return the settings from
    :meth:`loss_settings`.
    """

    loss_fn: ClassVar[Callable[..., tuple[Tensor, dict]]]

    def loss_settings(self) -> dict[str, Any]:
        """Keyword arguments of ``loss_fn`` besides the tensors and ``loss_agg_mode``."""
        return {}

    @property
    def accepts_rollout_is_weights(self) -> bool:
        """Whether ``loss_fn`` takes ``rollout_is_weights`` (every built-in one does)."""
        return "rollout_is_weights" in inspect.signature(type(self).loss_fn).parameters

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        old_logprob: Tensor,
        action_mask: Tensor,
        advantages: Tensor,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, float]]:
        """All inputs ``[batch, response_len]``; returns the scalar loss and float metrics.

        ``rollout_is_weights`` (keyword, ``[batch, response_len]``): rollout-correction IS
        weights, passed on to ``loss_fn``.
        """
        weights = kwargs.get("rollout_is_weights")
        extra = {} if weights is None else {"rollout_is_weights": weights}
        loss, metrics = type(self).loss_fn(
            logprob,
            old_logprob,
            advantages,
            action_mask,
            loss_agg_mode=self.loss_agg_mode,
            **self.loss_settings(),
            **extra,
        )
        return loss, metrics_to_floats(metrics)
