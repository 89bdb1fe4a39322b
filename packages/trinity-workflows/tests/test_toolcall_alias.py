"""``toolcall_workflow`` -- Trinity-RFT's name of the tool-call workflow in its earlier releases
and in its examples/grpo_toolcall/toolace.yaml -- resolves to ``tool_call_workflow``."""

from __future__ import annotations

import subprocess
import sys

from trinity.common.workflows import WORKFLOWS


def test_both_names_resolve_to_one_class_and_are_listed() -> None:
    from trinity.workflows.agent import ToolCallWorkflow

    assert WORKFLOWS.get("toolcall_workflow") is ToolCallWorkflow
    assert WORKFLOWS.get("tool_call_workflow") is ToolCallWorkflow
    assert {"toolcall_workflow", "tool_call_workflow"} <= set(WORKFLOWS.list())


def test_the_old_name_resolves_with_nothing_imported_by_hand() -> None:
    """Through the entry point, as a config naming it is resolved in a fresh process."""
    code = (
        "from trinity.common.workflows import WORKFLOWS; "
        "print(WORKFLOWS['toolcall_workflow'].__qualname__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "ToolCallWorkflow"
