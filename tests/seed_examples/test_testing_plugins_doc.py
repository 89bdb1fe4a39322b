"""docs/testing-plugins.md's own examples pass the contract kit, as printed.

Every fenced ```` ```python ```` block of the page is cut out of it at test time and run
verbatim in a fresh namespace; its ``Test*`` classes become this module's, so pytest runs their
rules. The blocks name the class under test (``MyWorkflow``, ``MyLoss`` ...) without defining
it ("plus the import of your class"): :data:`COMPONENTS` binds each name to a component the
guides teach (cut out of the guide texts, ``seed_guides.py``) or to a built-in of the kind. So
the page's ``WorkflowContract`` example runs on the guide's own ``ExampleWorkflow``, with its
scripted ``responses = ["2", "3"]`` and the concurrent-parity rule.

The guide components register under names the built-ins hold (``"reward_filter"``), or under the
names the page uses (``"my_loss"``): they are registered for the test that checks them only (the
``registered_component`` fixture) and undone after, so the rest of the session sees the
built-ins.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from seed_guides import FENCE, SNIPPETS, run_blocks, unregister_guide_classes

from trinity.algorithm.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.entropy_loss_fn import ENTROPY_LOSS_FN
from trinity.algorithm.kl_fn import KL_FN
from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN
from trinity.algorithm.sample_strategy import SAMPLE_STRATEGY
from trinity.buffer.operators import EXPERIENCE_OPERATORS
from trinity.common.rewards import REWARD_FUNCTIONS
from trinity.common.workflows import WORKFLOWS
from trinity.testing import ComponentContract

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing-plugins.md"


def _guide(snippet: str, attr: str, registry) -> type:
    """A guide component, with the guide's own registrations undone (re-done per test)."""
    module = run_blocks(*SNIPPETS[snippet], name=f"testing_doc_{snippet}")
    for name, obj in list(registry.modules.items()):
        if getattr(obj, "__module__", "") == module.__name__:
            registry.unregister(name)
    return getattr(module, attr)


EXAMPLE_WORKFLOW = _guide("example_workflow_full", "ExampleWorkflow", WORKFLOWS)
REWARD_FILTER = _guide("reward_filter", "RewardFilter", EXPERIENCE_OPERATORS)
OPMD_LOSS = _guide("opmd_policy_loss_000", "OPMDPolicyLossFn", POLICY_LOSS_FN)
unregister_guide_classes()

#: The names the page's blocks use, bound to what they stand for.
COMPONENTS = {
    "MyWorkflow": EXAMPLE_WORKFLOW,  # the guide's, with its scripted replies
    "MyFilter": REWARD_FILTER,  # the operator guide's
    "MyLoss": OPMD_LOSS,  # the algorithm guide's OPMD loss: takes tau
    "MyGroupAdvantage": ADVANTAGE_FN["grpo"],  # takes epsilon
    "MyGAE": ADVANTAGE_FN["ppo"],  # the page's masked-tokens exemption is ppo's
    "MyKL": KL_FN["k3"],
    "MyEntropy": ENTROPY_LOSS_FN["default"],
    "MyStrategy": SAMPLE_STRATEGY["mix"],  # reads experience_buffer and sft_dataset
    "MyReward": REWARD_FUNCTIONS["accuracy_reward"],  # scores <answer>4</answer>
    "POLICY_LOSS_FN": POLICY_LOSS_FN,  # the registry of the make_contract_tests block
}

#: User components registered for their own tests only: class -> (registry, name).
REGISTER = {
    EXAMPLE_WORKFLOW: (WORKFLOWS, "example_workflow"),
    REWARD_FILTER: (EXPERIENCE_OPERATORS, "reward_filter"),
    OPMD_LOSS: (POLICY_LOSS_FN, "my_loss"),  # the name the page's make_contract_tests uses
}


def doc_blocks() -> list[tuple[int, str]]:
    """(line, text) of every Python block of the page."""
    text = DOC.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start()) + 1, m["body"]) for m in FENCE.finditer(text) if m["body"]
    ]


def run_doc_block(line: int, body: str) -> dict[str, type]:
    """Run one block; return the contract classes it defines (by name)."""
    namespace: dict = {"__name__": __name__, **COMPONENTS}
    POLICY_LOSS_FN.register_module("my_loss", OPMD_LOSS)  # make_contract_tests lists it
    try:
        exec(compile(body, f"<{DOC.name} block at line {line}>", "exec"), namespace)
    finally:
        POLICY_LOSS_FN.unregister("my_loss")
    return {
        name: obj
        for name, obj in namespace.items()
        if name.startswith("Test")
        and isinstance(obj, type)
        and issubclass(obj, ComponentContract)
        # of the make_contract_tests block's every registered loss, the page's own one
        and (not name.startswith("TestPolicyLoss_") or name == "TestPolicyLoss_my_loss")
    }


BLOCKS = doc_blocks()
COLLECTED: dict[str, type] = {}
for _line, _body in BLOCKS:
    for _name, _cls in run_doc_block(_line, _body).items():
        COLLECTED[f"TestDocLine{_line}_{_name.removeprefix('Test')}"] = _cls
globals().update(COLLECTED)


@pytest.fixture(autouse=True)
def registered_component(request):
    """Register the test class's guide component under its name for the test."""
    cls = request.cls
    entry = REGISTER.get(getattr(cls, "component", None)) if cls is not None else None
    if entry is None:
        yield
        return
    registry, name = entry
    registry.register_module(name, cls.component)
    try:
        yield
    finally:
        registry.unregister(name)  # a built-in it replaced comes back


def test_every_block_of_the_page_runs_and_defines_contracts():
    assert BLOCKS, f"no python block found in {DOC}"
    for line, body in BLOCKS:
        assert run_doc_block(line, body), f"the block at line {line} defines no contract class"
    assert any(cls.component is EXAMPLE_WORKFLOW for cls in COLLECTED.values())


def test_the_workflow_example_scripts_the_guide_workflow_with_a_list():
    """The page's WorkflowContract example is the one the issue was about: a list of replies
    on the guide's synchronous, single-call ExampleWorkflow, concurrent runs included."""
    (cls,) = [c for c in COLLECTED.values() if c.component is EXAMPLE_WORKFLOW]
    assert list(cls.responses) == ["2", "3"]
    assert cls.task_args["format_args"] == {"prompt_key": "question", "response_key": "answer"}
