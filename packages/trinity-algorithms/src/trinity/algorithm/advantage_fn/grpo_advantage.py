"""Trinity-RFT's module path of its GRPO advantages
(``trinity.algorithm.advantage_fn.grpo_advantage``).

``GRPOGroupedAdvantage`` (``"grpo"``, :mod:`trinity.algorithm.advantage_fn.grpo`) and the
trainer-side ``GRPOAdvantageFn`` (``"grpo_verl"``,
:mod:`trinity.algorithm.advantage_fn.verl_batch`); code written for Trinity-RFT imports them
from here.
"""

from trinity.algorithm.advantage_fn.grpo import GRPOGroupedAdvantage
from trinity.algorithm.advantage_fn.verl_batch import GRPOAdvantageFn

__all__ = ["GRPOAdvantageFn", "GRPOGroupedAdvantage"]
