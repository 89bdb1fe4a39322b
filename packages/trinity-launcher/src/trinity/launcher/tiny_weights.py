"""Random weights from a seed, for the tiny models (:mod:`trinity.launcher.tiny_model` and its
``vlm`` preset, :mod:`trinity.launcher.tiny_vlm`)."""

from __future__ import annotations

from typing import Any

__all__ = ["seeded_model"]


def seeded_model(model_class: Any, config: Any, seed: int) -> Any:
    """``model_class(config)`` with random weights from ``seed``; the global torch generator is
    left as it was."""
    import torch

    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        return model_class(config)
    finally:
        torch.random.set_rng_state(generator_state)
