"""Advantage functions (``ADVANTAGE_FN``).

Importing this package registers the built-ins: ``ppo``, ``grpo``, ``opmd``, ``rloo``,
``reinforceplusplus``, ``reinforce``, ``remax``, ``asymre``, ``step_wise_grpo``, ``rec``,
``gigpo``, the trainer-side ``grpo_verl``, ``opmd_verl``, ``asymre_verl``, ``clipb``,
``clipv``, and the distillation advantages ``on_policy_distill`` and ``jsd``. The math lives
in :mod:`trinity.algorithm.advantage_fn.functional` and
:mod:`trinity.algorithm.advantage_fn.functional_logprob` (pure tensor functions).
"""

from trinity.algorithm.advantage_fn.advantage_fn import ADVANTAGE_FN, AdvantageFn, GroupAdvantage
from trinity.algorithm.advantage_fn.asymre import ASYMREGroupAdvantage
from trinity.algorithm.advantage_fn.clip_filter import ClipBAdvantageFn, ClipVAdvantageFn
from trinity.algorithm.advantage_fn.distill import JSDAdvantage, OnPolicyDistillAdvantage
from trinity.algorithm.advantage_fn.gigpo import GiGPOAdvantageFn
from trinity.algorithm.advantage_fn.grpo import GRPOGroupedAdvantage
from trinity.algorithm.advantage_fn.opmd import OPMDGroupAdvantage
from trinity.algorithm.advantage_fn.ppo import PPOAdvantageFn
from trinity.algorithm.advantage_fn.rec import RECGroupedAdvantage
from trinity.algorithm.advantage_fn.reinforce import REINFORCEGroupAdvantage
from trinity.algorithm.advantage_fn.reinforce_plus_plus import REINFORCEPLUSPLUSAdvantageFn
from trinity.algorithm.advantage_fn.remax import REMAXAdvantageFn
from trinity.algorithm.advantage_fn.rloo import RLOOAdvantageFn
from trinity.algorithm.advantage_fn.step_wise_grpo import StepWiseGRPOAdvantageFn
from trinity.algorithm.advantage_fn.verl_batch import (
    ASYMREAdvantageFn,
    GRPOAdvantageFn,
    OPMDAdvantageFn,
)

__all__ = [
    "ADVANTAGE_FN",
    "AdvantageFn",
    "GroupAdvantage",
    "ASYMREAdvantageFn",
    "ASYMREGroupAdvantage",
    "ClipBAdvantageFn",
    "ClipVAdvantageFn",
    "GiGPOAdvantageFn",
    "GRPOAdvantageFn",
    "GRPOGroupedAdvantage",
    "JSDAdvantage",
    "OnPolicyDistillAdvantage",
    "OPMDAdvantageFn",
    "OPMDGroupAdvantage",
    "PPOAdvantageFn",
    "RECGroupedAdvantage",
    "REINFORCEGroupAdvantage",
    "REINFORCEPLUSPLUSAdvantageFn",
    "REMAXAdvantageFn",
    "RLOOAdvantageFn",
    "StepWiseGRPOAdvantageFn",
]
