"""The guides' example components pass the plugin authors' contract kit (trinity.testing).

What a plugin author gets from ``class TestMine(PolicyLossContract): component = Mine`` must hold
for the code the guides teach: the OPMD advantage and both OPMD policy losses of the algorithm
guide, the operator guide's ``RewardFilter`` and the workflow guide's ``ExampleWorkflow``, each
loaded verbatim from ``snippets/``.

The snippets register under names the built-ins hold ("opmd", "reward_filter"), and registries
refuse a second class under a taken name: they are loaded with the name free and the built-in
put back at once; the ``registered_snippet`` fixture swaps the snippet in for each test (the
registration rule checks it) and restores the built-in after.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

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

SNIPPETS = Path(__file__).parent / "snippets"


def _load(snippet: str, registry, name: str):
    """Import a snippet with ``name`` free in ``registry``; put the previous holder back."""
    previous = registry.modules.get(name)
    registry.unregister(name)
    try:
        module_name = f"seed_kit_{snippet}"
        spec = importlib.util.spec_from_file_location(module_name, SNIPPETS / f"{snippet}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        registry.unregister(name)
        if previous is not None:
            registry.register_module(name, previous, force=True)


OPMD_ADVANTAGE = _load("opmd_advantage_003", ADVANTAGE_FN, "opmd").OPMDGroupAdvantage
OPMD_LOSS_000 = _load("opmd_policy_loss_000", POLICY_LOSS_FN, "opmd").OPMDPolicyLossFn
OPMD_LOSS_003 = _load("opmd_policy_loss_003", POLICY_LOSS_FN, "opmd").OPMDPolicyLossFn
REWARD_FILTER = _load("reward_filter", EXPERIENCE_OPERATORS, "reward_filter").RewardFilter
EXAMPLE_WORKFLOW = _load("example_workflow_full", WORKFLOWS, "example_workflow").ExampleWorkflow

_REGISTRIES = {
    "trinity.algorithm.advantage_fn:ADVANTAGE_FN": ADVANTAGE_FN,
    "trinity.algorithm.policy_loss_fn:POLICY_LOSS_FN": POLICY_LOSS_FN,
    "trinity.buffer.operators:EXPERIENCE_OPERATORS": EXPERIENCE_OPERATORS,
    "trinity.common.workflows.workflow:WORKFLOWS": WORKFLOWS,
}


@pytest.fixture(autouse=True)
def registered_snippet(request):
    """Register the test class's snippet under its guide name for the test; restore after."""
    cls = request.cls
    registry = _REGISTRIES[cls.registry_path]
    name = cls.registered_name
    previous = registry.modules.get(name)
    registry.register_module(name, cls.component, force=True)
    try:
        yield
    finally:
        registry.unregister(name)
        if previous is not None:
            registry.register_module(name, previous, force=True)


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
