"""Trinity-RFT's module path of ``MathTrainableRULERWorkflow``: the class ships in
``trinity-workflows`` (``trinity.workflows.ruler``) and resolves here through the
``trinity.workflows`` entry points, so core imports no sibling."""

from typing import Any

from trinity.common.workflows.workflow import WORKFLOWS


def __getattr__(name: str) -> Any:
    return WORKFLOWS.module_getattr(__name__, name)
