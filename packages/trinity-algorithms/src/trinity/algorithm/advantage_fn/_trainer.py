"""Helpers of the trainer-side advantages (PPO/GAE, REINFORCE++, ReMax) on a collated batch."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from trinity.algorithm.advantage_fn.functional import check_finite
from trinity.common.experience import Experiences

__all__ = [
    "batch_field",
    "batch_token_level_rewards",
    "masked_stats",
    "require_batch_field",
    "require_token_field",
    "set_batch_advantages",
]


def batch_field(batch: Any, name: str, override: Optional[Tensor] = None) -> Optional[Tensor]:
    """``override`` if given, else ``batch.<name>``, else ``batch.custom_fields[name]``.

    Trainer-computed tensors that :class:`Experiences` has no field for (critic ``values``,
    ReMax ``reward_baselines``) reach the advantage function as a keyword argument, an attribute
    set on the batch, or a custom field.
    """
    if override is not None:
        return override
    value = getattr(batch, name, None)
    if value is None:
        value = (getattr(batch, "custom_fields", None) or {}).get(name)
    return value


def require_batch_field(
    batch: Experiences, name: str, override: Optional[Tensor], *, what: str, missing: str
) -> Tensor:
    """:func:`batch_field`, which must be there (``ValueError(missing)`` if not) and finite
    (``ValueError`` naming the first non-finite row's eid, the values being ``what``s)."""
    value = batch_field(batch, name, override)
    if value is None:
        raise ValueError(missing)
    check_finite(value, batch.eids, what=what)
    return value


def require_token_field(
    batch: Experiences,
    names: tuple[str, ...],
    override: Optional[Tensor],
    *,
    what: str,
    missing: str,
) -> Tensor:
    """A per-token ``[B, R]`` input of a trainer-side advantage: ``override``, else the first of
    ``names`` the batch has (attribute or custom field, :func:`batch_field`).

    Raises ``ValueError(missing)`` when there is none, when its shape is not the action mask's,
    or when a *trained* token holds NaN / inf (the error names the row's eid; padding and
    environment tokens are not checked, since nothing reads them).
    """
    value = override
    for name in names:
        if value is not None:
            break
        value = batch_field(batch, name)
    if value is None:
        raise ValueError(missing)
    if tuple(value.shape) != tuple(batch.action_mask.shape):
        raise ValueError(
            f"{what} has shape {tuple(value.shape)}, expected the action mask's "
            f"{tuple(batch.action_mask.shape)} [B, R]; {missing}"
        )
    trained = torch.where(batch.action_mask.to(torch.bool), value, torch.zeros_like(value))
    check_finite(trained, batch.eids, what=what)
    return value


def set_batch_advantages(
    batch: Experiences, advantages: Tensor, returns: Tensor
) -> tuple[Experiences, dict[str, float]]:
    """Set ``batch.advantages`` / ``batch.returns`` and return the batch with the returns'
    ``returns_mean|max|min`` over the action mask (the trainer-side functions' metrics)."""
    batch.advantages = advantages
    batch.returns = returns
    return batch, masked_stats(returns, batch.action_mask, "returns")


def batch_token_level_rewards(batch: Experiences) -> Tensor:
    """``[B, R]`` token-level rewards of the batch.

    ``batch.token_level_rewards`` when the trainer set them (scores minus a KL penalty, or
    process rewards); otherwise the outcome ``rewards [B]`` placed on each row's last response
    token, as verl's reward manager does. Non-finite values raise, naming the row's eid.
    """
    if batch.token_level_rewards is not None:
        check_finite(batch.token_level_rewards, batch.eids, what="token-level reward")
        return batch.token_level_rewards
    if batch.rewards is None:
        raise ValueError("the batch has neither token_level_rewards nor rewards")
    rewards = batch.rewards
    check_finite(rewards, batch.eids)
    b, r = batch.action_mask.shape
    out = torch.zeros((b, r), dtype=rewards.dtype if rewards.is_floating_point() else torch.float32)
    if r == 0:
        return out
    lengths = batch.attention_mask[:, batch.prompt_length :].sum(dim=-1)
    rows = torch.nonzero(lengths > 0).flatten()
    out[rows, lengths[rows] - 1] = rewards[rows].to(out.dtype)
    return out


def masked_stats(values: Tensor, mask: Tensor, prefix: str) -> dict[str, float]:
    """Mean / max / min of ``values`` over ``mask`` as floats (empty mask: nothing)."""
    m = mask.to(torch.bool)
    if not bool(m.any()):
        return {}
    sel = values[m]
    return {
        f"{prefix}_mean": float(sel.mean()),
        f"{prefix}_max": float(sel.max()),
        f"{prefix}_min": float(sel.min()),
    }
