"""The operator development guide's example, run as written.

The guide's ``RewardFilter`` block is cut out of the guide text at test time (``seed_guides.py``)
and run verbatim; ``snippets/guide_operators.yaml`` is the guide's YAML. The block registers
under ``reward_filter``, the name the built-in uses: user code replaces a built-in of its name,
as in Trinity-RFT, and the built-in is back once the test has unregistered the guide's class.
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
    """The guide's block, run; its registration is undone after the test."""
    return load_snippet("reward_filter")


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


def test_the_guide_class_replaces_the_builtin(guide):
    assert EXPERIENCE_OPERATORS.get("reward_filter") is guide.RewardFilter
    assert EXPERIENCE_OPERATORS.overridden["reward_filter"] is BuiltinRewardFilter


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
    # runs after the guide tests in file order: unregistering the guide's class brought it back
    assert EXPERIENCE_OPERATORS.get("reward_filter") is BuiltinRewardFilter
