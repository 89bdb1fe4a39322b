# Verbatim: "Step 2: Register Your Algorithm" of the algorithm development guide
# (seeds/003_ffd9336c2deb6a15.txt; seeds/000_4e0d32affe87ddca.txt has the same code).
# Only the import lines above the marker are ours: the guide elides them.
from typing import Dict

from trinity.algorithm import ALGORITHM_TYPE, AlgorithmType

# ---- verbatim from the guide ----
@ALGORITHM_TYPE.register_module("opmd")
class OPMDAlgorithm(AlgorithmType):
    """OPMD algorithm."""

    use_critic: bool = False
    use_reference: bool = True
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> Dict:
        return {
            "repeat_times": 2,
            "advantage_fn": "opmd",
            "sample_strategy": "warmup",
            "policy_loss_fn": "opmd",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }
