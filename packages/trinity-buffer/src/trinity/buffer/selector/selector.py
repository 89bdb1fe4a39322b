"""Task selectors (Trinity-RFT's ``trinity.buffer.selector``).

Aliases of :mod:`trinity.buffer.taskset.selectors`: :data:`SELECTORS` is
:data:`~trinity.buffer.taskset.selectors.TASK_SELECTORS` and :class:`BaseSelector` is
:class:`~trinity.buffer.taskset.selectors.TaskSelector`.
"""

from trinity.buffer.taskset.selectors import TASK_SELECTORS, TaskSelector

SELECTORS = TASK_SELECTORS
BaseSelector = TaskSelector

__all__ = ["SELECTORS", "BaseSelector"]
