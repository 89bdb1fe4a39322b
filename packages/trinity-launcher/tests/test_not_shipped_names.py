"""The "not supported yet" hint for Trinity-RFT 0.6 names stays true: a name on the list is one
no installed package registers (otherwise a config naming it would get a wrong hint, and the
list would hide what ships)."""

from __future__ import annotations

from trinity.algorithm import ALGORITHM_TYPE
from trinity.common.rewards import REWARD_FUNCTIONS
from trinity.common.workflows import WORKFLOWS
from trinity.launcher.component_checks import (
    TRINITY_RFT_ALGORITHMS_NOT_SHIPPED,
    TRINITY_RFT_REWARDS_NOT_SHIPPED,
    TRINITY_RFT_WORKFLOWS_NOT_SHIPPED,
    not_shipped_hint,
)


def test_no_listed_workflow_is_registered():
    assert not set(TRINITY_RFT_WORKFLOWS_NOT_SHIPPED) & set(WORKFLOWS.list())


def test_no_listed_algorithm_type_is_registered():
    assert not TRINITY_RFT_ALGORITHMS_NOT_SHIPPED & set(ALGORITHM_TYPE.list())


def test_the_hint_names_a_listed_workflow_only_and_says_why():
    field = "buffer.explorer_input.taskset.default_workflow_type"
    for listed, why in TRINITY_RFT_WORKFLOWS_NOT_SHIPPED.items():
        hint = not_shipped_hint(field, listed)
        assert "not supported yet" in hint and why in hint and why.strip()
    assert "MCP SDK 1.x" in not_shipped_hint(field, "agentscope_v1_react_search_workflow")
    assert not_shipped_hint(field, "email_search_workflow") == ""  # ships now


def test_a_listed_reward_is_not_registered_and_its_hint_says_why():
    assert not set(TRINITY_RFT_REWARDS_NOT_SHIPPED) & set(REWARD_FUNCTIONS.list())
    field = "buffer.explorer_input.taskset.default_reward_fn_type"
    hint = not_shipped_hint(field, "rm_gallery_reward")
    assert "not supported yet" in hint and "rm-gallery" in hint
    assert not_shipped_hint(field, "math_reward") == ""
