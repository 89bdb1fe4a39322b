"""Workflows: :class:`Task`, :class:`Workflow`, :class:`MultiTurnWorkflow`, ``WORKFLOWS``.

Built-in workflows ship in ``trinity-workflows`` and register through the ``trinity.workflows``
entry-point group. The class names the guides use (``trinity.common.workflows.MathWorkflow``
...) resolve here through those entry points, without this package importing a sibling.
"""

from typing import Any

from trinity.common.workflows.workflow import (
    WORKFLOWS,
    MultiTurnWorkflow,
    Task,
    Workflow,
    run_task,
    run_task_async,
)

__all__ = ["WORKFLOWS", "MultiTurnWorkflow", "Task", "Workflow", "run_task", "run_task_async"]


def __getattr__(name: str) -> Any:
    if not name.startswith("_") and name[:1].isupper():
        found = WORKFLOWS.find_by_attr(name)
        if found is not None:
            return found
    raise AttributeError(
        f"module {__name__!r} has no attribute {name!r} "
        f"(installed workflows: {', '.join(WORKFLOWS.list()) or 'none'}; "
        "built-in ones come with the trinity-workflows package)"
    )
