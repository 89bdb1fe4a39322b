"""Workflows: :class:`Task`, :class:`Workflow`, :class:`MultiTurnWorkflow`, ``WORKFLOWS``.

Built-in workflows ship in ``trinity-workflows`` and register through the ``trinity.workflows``
entry-point group. The class names the guides use (``trinity.common.workflows.MathWorkflow``
...) resolve here through those entry points, without this package importing a sibling.
"""

from typing import Any

from trinity.common.workflows.workflow import (
    _UPSTREAM_ALIASES,
    CONCURRENT_MODES,
    WORKFLOWS,
    MultiTurnWorkflow,
    Task,
    Workflow,
    is_resettable,
    run_task,
    run_task_async,
    run_workflow,
)

__all__ = [
    "CONCURRENT_MODES",
    "WORKFLOWS",
    "MultiTurnWorkflow",
    "Task",
    "Workflow",
    "is_resettable",
    "run_task",
    "run_task_async",
    "run_workflow",
]


def __getattr__(name: str) -> Any:
    return WORKFLOWS.module_getattr(__name__, _UPSTREAM_ALIASES.get(name, name))
