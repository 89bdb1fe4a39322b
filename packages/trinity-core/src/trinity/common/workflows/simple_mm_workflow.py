"""Trinity-RFT's module path of ``SimpleMMWorkflow`` / ``AsyncSimpleMMWorkflow``: the classes ship
in ``trinity-workflows`` and resolve here through the ``trinity.workflows`` entry points, so core
imports no sibling."""

from typing import Any

from trinity.common.workflows.workflow import WORKFLOWS

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    return WORKFLOWS.module_getattr(__name__, name)
