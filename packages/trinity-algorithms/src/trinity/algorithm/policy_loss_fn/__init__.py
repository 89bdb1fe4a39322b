"""Policy losses (``POLICY_LOSS_FN``).

Importing this package registers every built-in loss: ``ppo``, ``opmd``, ``gspo``, ``cispo``,
``topr``, ``sapo``, ``dpo``, ``sft``, ``mix``, ``importance_sampling``, ``sft_is``,
``sft_phi``, ``mix_chord``, ``sppo``, ``rec``, ``m2po``. The math lives in
:mod:`trinity.algorithm.policy_loss_fn.functional`.
"""

from trinity.algorithm.policy_loss_fn.chord import (
    MIXCHORDPolicyLossFn,
    SFTISLossFn,
    SFTPhiLossFn,
)
from trinity.algorithm.policy_loss_fn.cispo import CISPOPolicyLossFn
from trinity.algorithm.policy_loss_fn.dpo import DPOLossFn
from trinity.algorithm.policy_loss_fn.gspo import GSPOLossFn
from trinity.algorithm.policy_loss_fn.importance_sampling import ImportanceSamplingLossFn
from trinity.algorithm.policy_loss_fn.m2po import M2POPolicyLossFn
from trinity.algorithm.policy_loss_fn.mix import MIXPolicyLossFn
from trinity.algorithm.policy_loss_fn.opmd import OPMDPolicyLossFn
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn
from trinity.algorithm.policy_loss_fn.ppo import PPOPolicyLossFn
from trinity.algorithm.policy_loss_fn.rec import RECPolicyLossFn
from trinity.algorithm.policy_loss_fn.sapo import SAPOPolicyLossFn
from trinity.algorithm.policy_loss_fn.sft import SFTLossFn
from trinity.algorithm.policy_loss_fn.sppo import SPPOPolicyLossFn
from trinity.algorithm.policy_loss_fn.topr import TOPRPolicyLossFn

__all__ = [
    "POLICY_LOSS_FN",
    "PolicyLossFn",
    "CISPOPolicyLossFn",
    "DPOLossFn",
    "GSPOLossFn",
    "ImportanceSamplingLossFn",
    "M2POPolicyLossFn",
    "MIXCHORDPolicyLossFn",
    "MIXPolicyLossFn",
    "OPMDPolicyLossFn",
    "PPOPolicyLossFn",
    "RECPolicyLossFn",
    "SAPOPolicyLossFn",
    "SFTISLossFn",
    "SFTLossFn",
    "SFTPhiLossFn",
    "SPPOPolicyLossFn",
    "TOPRPolicyLossFn",
]
