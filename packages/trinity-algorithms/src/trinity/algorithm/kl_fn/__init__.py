"""KL functions (``KL_FN``): a reward penalty (``kl_penalty_fn``) or an actor loss (``kl_loss_fn``).

Registered: ``none``, ``k1``, ``k2``, ``k3``, ``low_var_kl``, ``abs``, ``corrected_k3``.
"""

from trinity.algorithm.kl_fn.kl_fn import (
    KL_FN,
    KL_TYPES,
    AbsFn,
    CorrectedK3Fn,
    DummyKLFn,
    K1Fn,
    K2Fn,
    K3Fn,
    KLFn,
    LowVarKLFn,
    compute_kl,
)

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
