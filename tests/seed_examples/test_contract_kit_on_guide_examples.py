"""The guides' example components pass the plugin authors' contract kit (trinity.testing).

What a plugin author gets from ``class TestMine(PolicyLossContract): component = Mine`` must hold
for the code the guides teach: the OPMD advantage and both OPMD policy losses of the algorithm
guide, the operator guide's ``RewardFilter`` and the workflow guide's ``ExampleWorkflow``, each
cut out of the guide texts and run verbatim (``seed_guides.py``).

The blocks register under names the built-ins hold ("opmd", "reward_filter"): as user code they
replace the built-in (the registry's override rule). They are loaded once, their registrations
undone at once (the built-ins come back); the ``registered_snippet`` fixture registers the
class under test for each test (the registration rule checks it) and undoes it after.
"""

from __future__ import annotations

import pytest
from seed_guides import SNIPPETS, run_blocks, unregister_guide_classes

from trinity.algorithm.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN
from trinity.buffer.operators import EXPERIENCE_OPERATORS
from trinity.common.workflows import WORKFLOWS
from trinity.testing import (
    AdvantageFnContract,
    ExperienceOperatorContract,
    PolicyLossContract,
    WorkflowContract,
)

_REGISTRIES = {
    "trinity.algorithm.advantage_fn:ADVANTAGE_FN": ADVANTAGE_FN,
    "trinity.algorithm.policy_loss_fn:POLICY_LOSS_FN": POLICY_LOSS_FN,
    "trinity.buffer.operators:EXPERIENCE_OPERATORS": EXPERIENCE_OPERATORS,
    "trinity.common.workflows.workflow:WORKFLOWS": WORKFLOWS,
}


def _load(snippet: str):
    """Run the guide blocks of ``snippet`` in a module of their own (kept for the classes),
    then undo its registrations (two guide versions register "opmd")."""
    module = run_blocks(*SNIPPETS[snippet], name=f"guide_kit_{snippet}")
    for registry in _REGISTRIES.values():
        for name, obj in list(registry.modules.items()):
            if getattr(obj, "__module__", "") == module.__name__:
                registry.unregister(name)
    return module


OPMD_ADVANTAGE = _load("opmd_advantage_003").OPMDGroupAdvantage
OPMD_LOSS_000 = _load("opmd_policy_loss_000").OPMDPolicyLossFn
OPMD_LOSS_003 = _load("opmd_policy_loss_003").OPMDPolicyLossFn
REWARD_FILTER = _load("reward_filter").RewardFilter
EXAMPLE_WORKFLOW = _load("example_workflow_full").ExampleWorkflow

unregister_guide_classes()


@pytest.fixture(autouse=True)
def registered_snippet(request):
    """Register the test class's guide component under its guide name for the test."""
    cls = request.cls
    registry = _REGISTRIES[cls.registry_path]
    name = cls.registered_name
    registry.register_module(name, cls.component)
    try:
        yield
    finally:
        registry.unregister(name)  # a built-in it replaced comes back


class TestGuideOPMDAdvantage(AdvantageFnContract):
    component = OPMD_ADVANTAGE
    registered_name = "opmd"


class TestGuideOPMDLossMaskedMean(PolicyLossContract):
    component = OPMD_LOSS_000
    registered_name = "opmd"


class TestGuideOPMDLossMaskedLoss(PolicyLossContract):
    """The version whose ``__init__`` does not take ``loss_agg_mode`` (set as an attribute)."""

    component = OPMD_LOSS_003
    registered_name = "opmd"


class TestGuideRewardFilter(ExperienceOperatorContract):
    component = REWARD_FILTER
    registered_name = "reward_filter"
    component_args = {"threshold": 0.5}


def _answers(messages, sample_index):
    question = messages[-1]["content"].removeprefix("Question:\n")
    return {"1+1=": ["2", "3"], "2+2=": ["4", "5"]}[question][sample_index % 2]


class TestGuideExampleWorkflow(WorkflowContract):
    component = EXAMPLE_WORKFLOW
    registered_name = "example_workflow"
    task_args = {"raw_task": {"question": "1+1=", "answer": "2"}}
    other_task_args = {"raw_task": {"question": "2+2=", "answer": "4"}}
    responses = _answers
