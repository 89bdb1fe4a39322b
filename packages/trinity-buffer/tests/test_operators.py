"""Built-in experience operators, the registry and the operator factory."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from trinity.buffer.operators import (
    EXPERIENCE_OPERATORS,
    TASKSET_SCHEDULE_METRIC,
    DAPODynamicSamplingFilter,
    ExperienceOperator,
    ExperienceOperatorError,
    ExperienceOperatorV1,
    ExperienceOperatorV1Wrapper,
    InvalidRewardFilter,
    MaskResponseTruncatedOperator,
    PassRateCalculator,
    RewardFilter,
    RewardShapingMapper,
    RewardSTDFilter,
    build_operators,
    create_operators,
)
from trinity.buffer.pipelines import ExperiencePipeline
from trinity.common.config import OperatorConfig
from trinity.common.constants import SELECTOR_METRIC
from trinity.common.experience import EID, Experience

BUILTINS = {
    "reward_filter": RewardFilter,
    "reward_std_filter": RewardSTDFilter,
    "dapo_dynamic_sampling": DAPODynamicSamplingFilter,
    "invalid_reward_filter": InvalidRewardFilter,
    "mask_response_truncated": MaskResponseTruncatedOperator,
    "reward_shaping_mapper": RewardShapingMapper,
    "pass_rate_calculator": PassRateCalculator,
}


def exp(task=0, run=0, reward=1.0, batch=0, **kw) -> Experience:
    return Experience(
        eid=EID(batch=batch, task=task, run=run),
        tokens=torch.arange(6),
        prompt_length=2,
        reward=reward,
        **kw,
    )


def group(task, rewards, batch=0):
    return [exp(task=task, run=i, reward=r, batch=batch) for i, r in enumerate(rewards)]


def test_builtins_are_registered():
    for name, cls in BUILTINS.items():
        assert EXPERIENCE_OPERATORS.get(name) is cls
        assert issubclass(cls, ExperienceOperator)
    assert "data_juicer" in EXPERIENCE_OPERATORS


def test_create_operators_from_every_spelling():
    ops = build_operators(
        [
            OperatorConfig(name="reward_filter", args={"threshold": 0.5}),
            {"name": "reward_std_filter", "args": {"threshold": 0.1}},
            "invalid_reward_filter",
        ]
    )
    assert [type(o) for o in ops] == [RewardFilter, RewardSTDFilter, InvalidRewardFilter]
    assert ops[0].threshold == 0.5 and ops[1].threshold == 0.1
    assert ExperienceOperator.create_operators(["mask_response_truncated"])[0].process([]) == (
        [],
        {"masked_truncated_count": 0},
    )


def test_create_operators_gives_trinity_rft_0_6_async_operators():
    """0.6's factory: every operator is an ExperienceOperatorV1 (``await op.process``), a
    synchronous one wrapped (its attributes read through), each given the auxiliary models."""
    import asyncio

    (op,) = create_operators([OperatorConfig(name="reward_filter", args={"threshold": 0.5})])
    assert isinstance(op, ExperienceOperatorV1Wrapper) and isinstance(op, ExperienceOperatorV1)
    assert isinstance(op.operator, RewardFilter) and op.threshold == 0.5
    assert op.auxiliary_models == {}
    kept, metrics = asyncio.run(op.process([exp(reward=1.0), exp(reward=0.0)]))
    assert [e.reward for e in kept] == [1.0] and metrics["filtered_count"] == 1

    class Doubler(ExperienceOperatorV1):
        async def process(self, exps):
            return exps + exps, {"doubled": len(exps)}

    EXPERIENCE_OPERATORS.register_module("test_doubler", Doubler)
    try:
        models = {0: ["client"]}
        (v1,) = create_operators(["test_doubler"], auxiliary_models=models)
        assert type(v1) is Doubler and v1.auxiliary_models == models
        # the pipeline awaits it, and runs a wrapped synchronous operator as itself
        pipeline = ExperiencePipeline(
            ["test_doubler", "reward_filter"],
            operators=[v1, *create_operators(["reward_filter"])],
        )
        assert isinstance(pipeline.operators[1], RewardFilter)
        out, _ = asyncio.run(pipeline.apply_async([exp(reward=1.0)]))
        assert len(out) == 2
    finally:
        EXPERIENCE_OPERATORS.unregister("test_doubler")


def test_create_operators_names_the_bad_entry():
    with pytest.raises(ExperienceOperatorError, match=r"operators\[1\].*'reward_filtr'") as info:
        create_operators(["invalid_reward_filter", "reward_filtr"])
    assert "Did you mean 'reward_filter'" in str(info.value)
    assert (info.value.index, info.value.name) == (1, "reward_filtr")
    with pytest.raises(ExperienceOperatorError, match=r"operators\[0\].*RewardFilter.*bogus"):
        create_operators([{"name": "reward_filter", "args": {"bogus": 1}}])
    with pytest.raises(ExperienceOperatorError, match="op_type"):
        create_operators(
            [
                {
                    "name": "reward_shaping_mapper",
                    "args": {"reward_shaping_configs": [{"op_type": "POW"}]},
                }
            ]
        )


def test_reward_filter_drops_low_and_missing_rewards():
    exps = [exp(reward=0.0), exp(reward=0.5), exp(reward=None), exp(reward=math.nan), exp(reward=2)]
    kept, metrics = RewardFilter(threshold=0.1).process(exps)
    assert [e.reward for e in kept] == [0.5, 2.0]
    assert metrics == {"filtered_count": 3}


def test_reward_std_filter_keeps_only_varied_groups():
    exps = group(0, [1, 1, 1]) + group(1, [0, 1, 1]) + group(2, [1]) + group(3, [0.5, 0.6])
    kept, metrics = RewardSTDFilter(threshold=0.1).process(exps)
    assert {e.eid.task for e in kept} == {1}  # std(0.5, 0.6) = 0.05 <= 0.1
    assert metrics == {"filtered_count": 6, "dropped_group_count": 3}
    kept, _ = RewardSTDFilter().process(group(0, [1.0, math.nan]))
    assert kept == []


def test_invalid_reward_filter_counts_each_kind():
    exps = [
        exp(reward=1.0),
        exp(reward=None),
        exp(reward=math.nan),
        exp(reward=math.inf),
        exp(reward=-math.inf),
        exp(reward=0.0),
    ]
    kept, metrics = InvalidRewardFilter().process(exps)
    assert [e.reward for e in kept] == [1.0, 0.0]
    assert metrics == {
        "filtered_count": 4,
        "none_reward_count": 1,
        "nan_reward_count": 1,
        "inf_reward_count": 2,
    }


def test_mask_response_truncated_zeros_mask_and_keeps_reward():
    truncated = exp(reward=0.7, truncate_status="response_truncated")
    normal = exp(reward=0.3)
    multi = exp(
        reward=1.0,
        truncate_status="response_truncated",
        action_mask=torch.tensor([1, 0, 1, 1], dtype=torch.bool),
    )
    out, metrics = MaskResponseTruncatedOperator().process([truncated, normal, multi])
    assert out == [truncated, normal, multi]
    assert metrics == {"masked_truncated_count": 2}
    assert not truncated.action_mask.any() and not multi.action_mask.any()
    assert truncated.action_mask.shape == (4,) and truncated.action_mask.dtype == torch.bool
    assert normal.action_mask.all()
    assert (truncated.reward, multi.reward) == (0.7, 1.0)


class TestDAPODynamicSampling:
    def test_drops_groups_with_all_equal_rewards(self):
        exps = (
            group(0, [1, 1, 1, 1])
            + group(1, [0, 1, 0, 0])
            + group(2, [0, 0, 0, 0])
            + group(3, [0.2])
        )
        kept, metrics = DAPODynamicSamplingFilter().process(exps)
        assert [e.eid.task for e in kept] == [1, 1, 1, 1]
        assert metrics == {"filtered_count": 9, "dropped_group_count": 3, "kept_group_count": 1}

    def test_metric_key_overrides_shaped_reward(self):
        # rewards differ only through a length penalty; accuracy says all correct
        exps = group(0, [1.0, 0.9, 0.8])
        for e in exps:
            e.metrics["accuracy"] = 1.0
        kept, _ = DAPODynamicSamplingFilter(metric_key="accuracy").process(exps)
        assert kept == []
        kept, _ = DAPODynamicSamplingFilter().process(exps)
        assert len(kept) == 3

    def test_missing_reward_is_an_error_with_a_hint(self):
        with pytest.raises(ValueError, match="invalid_reward_filter"):
            DAPODynamicSamplingFilter().process(group(0, [None, 1.0]))

    def test_keeps_sampling_until_the_batch_is_full(self):
        op = DAPODynamicSamplingFilter(batch_size=6)

        def explore_step(step):  # 3 groups of 2; only group 1 is informative
            return group(0, [1, 1], step) + group(1, [0, 1], step) + group(2, [0, 0], step)

        out, metrics = op.process(explore_step(0))
        assert out == [] and metrics["pending_count"] == 2 and metrics["batch_full"] == 0
        out, metrics = op.process(explore_step(1))
        assert out == [] and metrics["pending_count"] == 4 and metrics["num_gen_batches"] == 2
        out, metrics = op.process(explore_step(2))
        assert len(out) == 6 and metrics["batch_full"] == 1 and metrics["pending_count"] == 0
        assert [e.eid.batch for e in out] == [0, 0, 1, 1, 2, 2]  # arrival order, whole groups
        assert metrics["num_gen_batches"] == 3

    def test_surplus_groups_wait_for_the_next_batch(self):
        op = DAPODynamicSamplingFilter(batch_size=4)
        step = group(0, [0, 1], 0) + group(1, [0, 1], 0) + group(2, [1, 0], 0)
        out, metrics = op.process(step)
        assert [e.eid.task for e in out] == [0, 0, 1, 1]
        assert metrics["pending_count"] == 2 and op.pending_count == 2
        out, _ = op.process(group(5, [0, 1], 1))
        assert [(e.eid.batch, e.eid.task) for e in out] == [(0, 2), (0, 2), (1, 5), (1, 5)]

    def test_gives_up_after_max_num_gen_batches(self):
        op = DAPODynamicSamplingFilter(batch_size=4, max_num_gen_batches=2)
        op.process(group(0, [1, 1]))
        with pytest.raises(RuntimeError, match="max_num_gen_batches=2"):
            op.process(group(1, [1, 1], batch=1))

    def test_rejects_bad_arguments(self):
        with pytest.raises(ValueError):
            DAPODynamicSamplingFilter(batch_size=-1)
        with pytest.raises(ValueError):
            DAPODynamicSamplingFilter(max_num_gen_batches=-1)


def test_reward_shaping_mapper_applies_configs_in_order():
    a = exp(reward=1.0, info={"quality": 0.5, "len": 2.0})
    b = exp(reward=None, info={"quality": 1.0})
    c = exp(reward=2.0, info={})
    op = RewardShapingMapper(
        reward_shaping_configs=[
            {"stats_key": "quality", "op_type": "ADD", "weight": 2.0},
            {"stats_key": "len", "op_type": "div"},
            {"stats_key": "missing", "op_type": "MUL", "weight": 3.0},
        ],
        report_reward_diff=True,
    )
    out, metrics = op.process([a, b, c])
    assert len(out) == 3 and out[1] is b  # mappers never drop; rewardless ones pass as is
    assert out[0].reward == pytest.approx(1.0)  # (1 + 2 * 0.5) / 2
    assert out[0].tokens is a.tokens and a.reward == 1.0  # shaped copies, inputs untouched
    assert out[1].reward is None and out[2].reward == 2.0
    assert metrics == {"reward_diff/mean": 0.0, "reward_diff/min": 0.0, "reward_diff/max": 0.0}
    d = exp(reward=1.0, info={"quality": 0.25})
    out, metrics = RewardShapingMapper([{"stats_key": "quality", "op_type": "SUB"}]).process([d])
    # reward_diff/* by default, as Trinity-RFT 0.6 reports them (all 0 for an empty step)
    assert out[0].reward == 0.75 and metrics["reward_diff/mean"] == pytest.approx(-0.25)
    zeros = {"reward_diff/mean": 0.0, "reward_diff/min": 0.0, "reward_diff/max": 0.0}
    assert RewardShapingMapper().process([]) == ([], zeros)
    out, metrics = RewardShapingMapper(
        [{"stats_key": "quality"}], report_reward_diff=False
    ).process([d])
    assert out[0].reward == 1.25 and metrics == {}


def test_pass_rate_calculator_reports_per_task_rates():
    exps = group(0, [1, 0, 1, 1]) + group(1, [0, 0])
    exps.append(exp(task=7, reward=0.5, info={"task_index": {"taskset_id": 1, "index": 42}}))
    out, metrics = PassRateCalculator().process(exps)
    assert out is exps
    assert metrics[TASKSET_SCHEDULE_METRIC] == {0: 0.75, 1: 0.0}
    # a task that carries its task set is reported in Trinity-RFT 0.6's shape instead
    assert metrics[SELECTOR_METRIC] == {1: {"indices": [42], "values": [0.5]}}
    assert metrics["task_count"] == 3
    _, metrics = PassRateCalculator(success_threshold=0.6).process(group(0, [0.5, 0.7]))
    assert metrics[TASKSET_SCHEDULE_METRIC] == {0: 0.5}


def test_data_juicer_operator_explains_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "data_juicer", None)  # "not installed"
    with pytest.raises(
        ExperienceOperatorError, match=r"pip install 'trinity-buffer\[data-juicer\]'"
    ):
        create_operators([{"name": "data_juicer", "args": {"operators": ["text_length_filter"]}}])
