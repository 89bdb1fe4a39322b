"""trinity.algorithm: the RL algorithm components of Trinity.

An algorithm is assembled from registered parts — a sample strategy (how batches are drawn), an
advantage function, a policy loss, KL terms (reward penalty and/or loss) and an entropy term —
and an :class:`AlgorithmType` names a complete recipe, so ``algorithm_type: grpo`` in YAML is
enough. The math lives in pure tensor functions (``*/functional.py``); every loss aggregates
through :func:`trinity.algorithm.utils.aggregate_loss`.

Importing this package registers every built-in component.
"""

from trinity.algorithm.advantage_fn import ADVANTAGE_FN, AdvantageFn, GroupAdvantage
from trinity.algorithm.algorithm import ALGORITHM_TYPE, AlgorithmType
from trinity.algorithm.entropy_loss_fn import ENTROPY_LOSS_FN, EntropyLossFn
from trinity.algorithm.kl_fn import KL_FN, KLFn
from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn
from trinity.algorithm.resolve import (
    ResolvedAlgorithm,
    apply_algorithm_defaults,
    resolve_algorithm,
)
from trinity.algorithm.sample_strategy import SAMPLE_STRATEGY, SampleStrategy
from trinity.algorithm.utils import aggregate_loss, build_component, masked_loss, masked_mean

__version__ = "0.1.0"

__all__ = [
    "ADVANTAGE_FN",
    "ALGORITHM_TYPE",
    "ENTROPY_LOSS_FN",
    "KL_FN",
    "POLICY_LOSS_FN",
    "SAMPLE_STRATEGY",
    "AdvantageFn",
    "AlgorithmType",
    "EntropyLossFn",
    "GroupAdvantage",
    "KLFn",
    "PolicyLossFn",
    "ResolvedAlgorithm",
    "SampleStrategy",
    "aggregate_loss",
    "apply_algorithm_defaults",
    "build_component",
    "masked_loss",
    "masked_mean",
    "resolve_algorithm",
]
