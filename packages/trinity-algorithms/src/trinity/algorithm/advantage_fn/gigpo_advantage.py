"""Trinity-RFT's module path of the GiGPO advantage
(``trinity.algorithm.advantage_fn.gigpo_advantage``).

The class is :class:`trinity.algorithm.advantage_fn.gigpo.GiGPOAdvantageFn` (registered as
``"gigpo"``); code written for Trinity-RFT imports it from here.
"""

from trinity.algorithm.advantage_fn.gigpo import GiGPOAdvantageFn

__all__ = ["GiGPOAdvantageFn"]
