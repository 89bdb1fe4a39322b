"""Trinity-RFT's module path of ``RubricJudgeWorkflow`` / ``RubricJudgeWorkflowWithAPI``: the
classes ship in ``trinity-workflows`` (``trinity.workflows.rubric_judge``) and resolve here
through the ``trinity.workflows`` entry points, so core imports no sibling."""

from typing import Any

from trinity.common.workflows.workflow import WORKFLOWS


def __getattr__(name: str) -> Any:
    return WORKFLOWS.module_getattr(__name__, name)
