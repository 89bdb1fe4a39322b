"""Trinity-RFT 0.6's ``trinity.explorer.workflow_runner`` names (see the package docstring).

:class:`Status` is 0.6's record of a task's runs. :class:`WorkflowRunner` is not reimplemented:
constructing one raises ``NotImplementedError``. Run tasks with
:func:`trinity.common.workflows.run_task_async` (what this implementation's runners do) or a
whole explore step with ``trinity-launch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from trinity.common.models.model import ModelWrapper

__all__ = ["ModelWrapper", "Status", "WorkflowRunner"]


@dataclass
class Status:
    """How the runs of one task went (Trinity-RFT 0.6's fields)."""

    completed_runs: int
    total_runs: int
    metrics: list[dict[str, float]] = field(default_factory=list)
    message: Optional[str] = None


class WorkflowRunner:
    """Trinity-RFT 0.6's runner actor (engines by index, ``run_task`` giving ``(Status,
    bytes)``): not reimplemented here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "trinity.explorer.workflow_runner.WorkflowRunner (Trinity-RFT's runner actor) is not "
            "reimplemented: run a task with trinity.common.workflows.run_task_async(task, model) "
            "or an explore step with trinity-launch (its runners: trinity.launcher.runner)"
        )
