# Verbatim: "Step 1: Implement Operator" of the operator development guide
# (seeds/000_4e0d32affe87ddca.txt; seeds/002_3021aacfe2bd8b7e.txt has the same code).
# Only the import lines above the marker are ours: the guide elides them.
from typing import Dict, List, Tuple

# ---- verbatim from the guide ----
from trinity.buffer.operators import EXPERIENCE_OPERATORS, ExperienceOperator
from trinity.common.experience import Experience


@EXPERIENCE_OPERATORS.register_module("reward_filter")
class RewardFilter(ExperienceOperator):

    def __init__(self, threshold: float = 0.0) -> None:
        self.threshold = threshold

    def process(self, exps: List[Experience]) -> Tuple[List[Experience], Dict]:
        filtered_exps = [exp for exp in exps if exp.reward >= self.threshold]
        metrics = {"filtered_count": len(exps) - len(filtered_exps)}
        return filtered_exps, metrics
