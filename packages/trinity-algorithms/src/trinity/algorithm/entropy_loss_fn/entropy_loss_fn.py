"""Entropy regularisation of the policy (``ENTROPY_LOSS_FN``).

An entropy loss returns ``entropy_coef * aggregate_loss(entropy, action_mask, loss_agg_mode)``
— an entropy *bonus*: the actor subtracts it from the policy loss
(``loss = pg_loss - entropy_loss``, as verl's ``pg_loss - entropy_coeff * entropy``), so a
positive coefficient keeps the policy from collapsing early.

Shapes: ``entropy`` and ``action_mask`` ``[batch, response_len]``; ``expert_mask`` ``[batch]``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Optional

import torch
from torch import Tensor

from trinity.algorithm.args import ComponentArgs, Field, NonNegFloat
from trinity.algorithm.utils import aggregate_loss, expert_row_mask
from trinity.utils.registry import Registry

__all__ = [
    "ENTROPY_LOSS_FN",
    "DefaultEntropyLossFn",
    "DummyEntropyLossFn",
    "EntropyLossFn",
    "MixEntropyLossFn",
    "entropy_from_logits",
]

ENTROPY_LOSS_FN: Registry[type[EntropyLossFn]] = Registry("entropy_loss_fn")


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Per-token categorical entropy ``logsumexp(z) - sum(softmax(z) * z)``.

    ``logits`` ``[batch, response_len, vocab]`` -> ``[batch, response_len]``; the same formula
    as verl's ``entropy_from_logits`` (stable for large logits, no ``log(0)``).
    """
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


class EntropyLossFn(ABC):
    """Base class: ``__call__(entropy, action_mask, loss_agg_mode, ...) -> (loss, metrics)``.

    Args:
        entropy_coef: weight of the entropy bonus (0 disables it in effect).
    """

    class Args(ComponentArgs):
        """``entropy_loss_fn_args`` of every entropy term."""

        entropy_coef: NonNegFloat = Field(0.0, description="Entropy bonus coefficient.")

    def __init__(self, entropy_coef: float = 0.0) -> None:
        self.entropy_coef = entropy_coef

    @abstractmethod
    def __call__(
        self,
        entropy: Tensor,
        action_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, float]]:
        """Return the weighted entropy bonus (scalar) and float metrics."""

    @classmethod
    def default_args(cls) -> dict:
        """Initialization arguments used where the config gives none."""
        return {"entropy_coef": 0.0}

    def weighted_bonus(
        self, entropy: Tensor, action_mask: Tensor, loss_agg_mode: str
    ) -> tuple[Tensor, dict[str, float]]:
        """``entropy_coef * aggregate_loss(entropy, action_mask)`` and the unweighted aggregate
        as metric ``entropy_loss``: the term the built-ins compute, over the rows they keep."""
        entropy_loss = aggregate_loss(entropy, action_mask, loss_agg_mode=loss_agg_mode)
        return entropy_loss * self.entropy_coef, {
            "entropy_loss": float(entropy_loss.detach().item())
        }


@ENTROPY_LOSS_FN.register_module("default")
class DefaultEntropyLossFn(EntropyLossFn):
    """``entropy_coef * aggregate_loss(entropy, action_mask, loss_agg_mode)``.

    Equal to ``entropy_coeff * verl.compute_entropy_loss(logits, ...)`` when ``entropy`` is
    :func:`entropy_from_logits` of the same logits (tested). Metric ``entropy_loss`` is the
    unweighted aggregate.
    """

    def __call__(
        self,
        entropy: Tensor,
        action_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, float]]:
        return self.weighted_bonus(entropy, action_mask, loss_agg_mode)


@ENTROPY_LOSS_FN.register_module("mix")
class MixEntropyLossFn(EntropyLossFn):
    """The ``default`` bonus over the non-expert rows only (the ``mix`` algorithm).

    Expert demonstrations are trained with SFT; rewarding entropy on them would fight the
    imitation signal, so only rollout ("usual") rows count. ``expert_mask`` (bool ``[batch]``;
    ``is_expert_mask`` is accepted as well) is required. No usual rows gives 0.

    Raises:
        ValueError: no expert mask, or one whose length is not the batch size.
    """

    def __call__(
        self,
        entropy: Tensor,
        action_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        expert_mask: Optional[Tensor] = None,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, float]]:
        usual = ~expert_row_mask(
            expert_mask,
            entropy.shape[0],
            entropy.device,
            "MixEntropyLossFn",
            is_expert_mask=kwargs.get("is_expert_mask"),
        )
        return self.weighted_bonus(entropy[usual], action_mask[usual], loss_agg_mode)


@ENTROPY_LOSS_FN.register_module("none")
class DummyEntropyLossFn(EntropyLossFn):
    """No entropy bonus: always 0 (on ``entropy``'s device and dtype), no metrics."""

    def __call__(
        self,
        entropy: Tensor,
        action_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, float]]:
        return entropy.new_zeros(()), {}
