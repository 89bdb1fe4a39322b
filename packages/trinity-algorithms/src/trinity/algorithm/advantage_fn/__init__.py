"""Advantage functions (``ADVANTAGE_FN``).

Importing this package registers the built-ins: ``ppo``, ``grpo``, ``opmd``, ``rloo``,
``reinforceplusplus``, ``reinforce``, ``remax``, ``asymre``, ``step_wise_grpo``. The math lives
in :mod:`trinity.algorithm.advantage_fn.functional` (pure tensor functions).
"""

from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN, AdvantageFn, GroupAdvantage
from trinity.algorithm.advantage_fn.asymre import ASYMREGroupAdvantage
from trinity.algorithm.advantage_fn.grpo import GRPOGroupedAdvantage
from trinity.algorithm.advantage_fn.opmd import OPMDGroupAdvantage
from trinity.algorithm.advantage_fn.ppo import PPOAdvantageFn
from trinity.algorithm.advantage_fn.reinforce import REINFORCEGroupAdvantage
from trinity.algorithm.advantage_fn.reinforce_plus_plus import REINFORCEPLUSPLUSAdvantageFn
from trinity.algorithm.advantage_fn.remax import REMAXAdvantageFn
from trinity.algorithm.advantage_fn.rloo import RLOOAdvantageFn
from trinity.algorithm.advantage_fn.step_wise_grpo import StepWiseGRPOAdvantageFn

__all__ = [
    "ADVANTAGE_FN",
    "AdvantageFn",
    "GroupAdvantage",
    "ASYMREGroupAdvantage",
    "GRPOGroupedAdvantage",
    "OPMDGroupAdvantage",
    "PPOAdvantageFn",
    "REINFORCEGroupAdvantage",
    "REINFORCEPLUSPLUSAdvantageFn",
    "REMAXAdvantageFn",
    "RLOOAdvantageFn",
    "StepWiseGRPOAdvantageFn",
]
