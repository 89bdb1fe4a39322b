"""Enumerations shared across packages (Trinity-RFT's ``trinity.common.constants``).

Only the names code written for Trinity-RFT imports from here are provided; see
``docs/compat.md`` for the list.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["OpType", "SELECTOR_METRIC"]

#: Key of the pipeline metric that carries task-selector feedback:
#: ``{SELECTOR_METRIC: {taskset_id: {"indices": [...], "values": [...]}}}`` (an operator
#: returns it; the task set reader passes it to its selector).
SELECTOR_METRIC = "selector_metric"


class OpType(str, Enum):
    """How ``reward_shaping_mapper`` folds a statistic into the reward:
    ``reward = reward <op> weight * info[stats_key]``.

    A ``str`` enum, so ``OpType.ADD == "ADD"`` and YAML configs may write the plain name.
    """

    ADD = "ADD"
    SUB = "SUB"
    MUL = "MUL"
    DIV = "DIV"
