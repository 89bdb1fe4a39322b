"""Trinity-RFT's module path of ``MathBoxedWorkflow``: the class ships in ``trinity-workflows``
and resolves here through the ``trinity.workflows`` entry points, so core imports no sibling.
``Task`` is importable from here too, as in Trinity-RFT (its examples do so)."""

from typing import Any

from trinity.common.workflows.workflow import WORKFLOWS, Task

__all__ = ["Task"]


def __getattr__(name: str) -> Any:
    return WORKFLOWS.module_getattr(__name__, name)
