"""KL functions (``KL_FN``): a reward penalty (``kl_penalty_fn``) or an actor loss (``kl_loss_fn``).

Registered: ``none``, ``k1``, ``k2``, ``k3``, ``low_var_kl``, ``abs``, ``corrected_k3``.
"""

# The package is its module: the names (and ``__all__``) are those of ``kl_fn.py``, stated once.
from trinity.algorithm.kl_fn import kl_fn as _module
from trinity.algorithm.kl_fn.kl_fn import *  # noqa: F403

__all__ = list(_module.__all__)
