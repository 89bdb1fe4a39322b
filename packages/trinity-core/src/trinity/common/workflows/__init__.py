"""Workflows: :class:`Task`, :class:`Workflow`, :class:`MultiTurnWorkflow`, ``WORKFLOWS``.

Built-in workflows ship in ``trinity-workflows`` and register through the ``trinity.workflows``
entry-point group. The class names the guides use (``trinity.common.workflows.MathWorkflow``
...) resolve here through those entry points, without this package importing a sibling.
"""

from typing import Any

from trinity.common.workflows.workflow import (
    CONCURRENT_MODES,
    WORKFLOWS,
    MultiTurnWorkflow,
    Task,
    Workflow,
    run_task,
    run_task_async,
)

__all__ = [
    "CONCURRENT_MODES",
    "WORKFLOWS",
    "MultiTurnWorkflow",
    "Task",
    "Workflow",
    "run_task",
    "run_task_async",
]


def __getattr__(name: str) -> Any:
    return WORKFLOWS.module_getattr(__name__, name)
