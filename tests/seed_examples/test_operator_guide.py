"""The operator development guide's example, run as written.

``snippets/reward_filter.py`` is the guide's ``RewardFilter`` verbatim (imports added on top);
``snippets/guide_operators.yaml`` is the guide's YAML. The snippet registers under
``reward_filter``, the name the built-in already uses, and registries refuse a second class
under a taken name, so the ``guide`` fixture takes the built-in out for the test and puts it
back after.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from trinity.buffer.operators import EXPERIENCE_OPERATORS, ExperienceOperator
from trinity.buffer.operators import RewardFilter as BuiltinRewardFilter
from trinity.buffer.pipelines import ExperiencePipeline
from trinity.common.config import load_config
from trinity.common.experience import EID, Experience

SNIPPETS = Path(__file__).parent / "snippets"


@pytest.fixture
def guide(load_snippet):
    """Swaps the built-in ``reward_filter`` for the guide's; restores it afterwards."""
    builtin = EXPERIENCE_OPERATORS.get("reward_filter")
    EXPERIENCE_OPERATORS.unregister("reward_filter")
    try:
        yield load_snippet("reward_filter")
    finally:
        EXPERIENCE_OPERATORS.unregister("reward_filter")
        EXPERIENCE_OPERATORS.register_module("reward_filter", builtin, force=True)


class ListWriter:
    def __init__(self):
        self.batches: list[list[Experience]] = []

    async def write_async(self, exps):
        self.batches.append(list(exps))


def _experiences(rewards):
    return [
        Experience(eid=EID(batch=0, task=i // 2, run=i % 2), tokens=torch.arange(4), reward=r)
        for i, r in enumerate(rewards)
    ]


def test_fixture_swaps_in_the_snippet(guide):
    assert EXPERIENCE_OPERATORS.get("reward_filter") is guide.RewardFilter


def test_snippet_operator_filters_by_threshold(guide):
    assert EXPERIENCE_OPERATORS.get("reward_filter") is guide.RewardFilter
    assert issubclass(guide.RewardFilter, ExperienceOperator)
    exps = _experiences([0.0, 0.5, 0.05, 1.0])
    kept, metrics = guide.RewardFilter(threshold=0.1).process(exps)
    assert [e.reward for e in kept] == [0.5, 1.0]
    assert metrics == {"filtered_count": 2}


def test_guide_yaml_builds_a_pipeline_with_the_snippet(guide):
    config = load_config(SNIPPETS / "guide_operators.yaml")
    operators = config.data_processor.experience_pipeline.operators
    assert [(op.name, op.args) for op in operators] == [("reward_filter", {"threshold": 0.1})]
    assert config.synchronizer.sync_style == "dynamic_by_explorer"
    assert config.synchronizer.sync_interval == 2

    writer = ListWriter()
    pipeline = ExperiencePipeline(config, writer=writer)
    assert type(pipeline.operators[0]) is guide.RewardFilter
    assert pipeline.operators[0].threshold == 0.1

    exps = _experiences([0.0, 0.1, 0.09, 0.7, -1.0, 1.0])
    metrics = asyncio.run(pipeline.process(exps))
    assert [[e.reward for e in batch] for batch in writer.batches] == [
        [pytest.approx(0.1), pytest.approx(0.7), 1.0]
    ]
    assert metrics["experience_pipeline/filtered_count"] == 3.0
    assert metrics["experience_pipeline/reward_filter/filtered_count"] == 3.0
    assert metrics["experience_pipeline/experience_count"] == 3.0


def test_builtin_reward_filter_is_back():
    # runs after the guide tests in file order: the fixture put the built-in back
    assert EXPERIENCE_OPERATORS.get("reward_filter") is BuiltinRewardFilter
