"""User code over built-ins with the installed packages, in a fresh interpreter: the order of
imports does not decide which class a name resolves to."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys

    from trinity.common.workflows import WORKFLOWS, Task, Workflow
    from trinity.common.models.testing import FakeModelWrapper

    assert "trinity.workflows" not in sys.modules  # core imports no sibling package

    @WORKFLOWS.register_module("math_workflow")  # trinity-workflows' name, not loaded yet
    class MyMath(Workflow):
        def run(self):
            return []

    assert WORKFLOWS.get("math_workflow") is MyMath
    assert "trinity.workflows" not in sys.modules  # the built-in was not needed

    # the guides' path to the built-in class loads it lazily, from its entry point ...
    from trinity.common.workflows import MathWorkflow
    assert MathWorkflow.__module__.startswith("trinity.workflows.")
    import trinity.workflows  # ... and every other built-in comes after the user's class

    assert WORKFLOWS.get("math_workflow") is MyMath
    assert WORKFLOWS.overridden == {"math_workflow": MathWorkflow}
    task = Task(workflow="math_workflow", raw_task={"question": "1+1=", "answer": "2"})
    assert type(task.to_workflow(FakeModelWrapper(["2"]))) is MyMath

    WORKFLOWS.unregister("math_workflow")
    assert WORKFLOWS.get("math_workflow") is MathWorkflow
    print("resolved as expected")
    """
)


def test_a_lazily_loaded_builtin_does_not_win_back_its_name():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resolved as expected" in done.stdout
    (warning,) = [line for line in done.stderr.splitlines() if "replaces the built-in" in line]
    assert "__main__.MyMath" in warning
    assert "trinity.workflows.single_turn.MathWorkflow" in warning
