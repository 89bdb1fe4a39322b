"""ExperiencePipeline: operator order, metrics, errors, injected advantage fn and writers."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from trinity.buffer.operators import (
    EXPERIENCE_OPERATORS,
    ExperienceOperator,
    ExperienceOperatorError,
    RewardFilter,
)
from trinity.buffer.pipelines import ExperiencePipeline, TaskPipeline, check_and_run_task_pipeline
from trinity.common.config import (
    DataProcessorConfig,
    ExperiencePipelineConfig,
    TaskPipelineConfig,
    load_config,
)
from trinity.common.experience import EID, Experience


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


class ListWriter:
    """A synchronous writer (file/SQL style)."""

    def __init__(self):
        self.batches: list[list[Experience]] = []
        self.acquired = self.released = 0

    def write(self, exps):
        self.batches.append(list(exps))

    def acquire(self):
        self.acquired += 1

    def release(self):
        self.released += 1


class AsyncWriter:
    """A writer with only write_async (queue style)."""

    def __init__(self):
        self.batches: list[list[Experience]] = []

    async def write_async(self, exps):
        await asyncio.sleep(0)
        self.batches.append(list(exps))


class Boom(ExperienceOperator):
    def process(self, exps):
        raise ZeroDivisionError("boom")


class Record(ExperienceOperator):
    """Appends its tag to every experience's info['trace'] (checks the order)."""

    def __init__(self, tag: str = "x"):
        self.tag = tag
        self.closed = False

    def process(self, exps):
        for e in exps:
            e.info.setdefault("trace", []).append(self.tag)
        return exps, {"seen_count": len(exps), "tag_len": len(self.tag), "note": {"tag": self.tag}}

    def close(self):
        self.closed = True


class AsyncDouble(ExperienceOperator):
    async def process(self, exps):  # type: ignore[override]
        await asyncio.sleep(0)
        for e in exps:
            e.reward *= 2
        return exps, {}


@pytest.fixture
def test_ops():
    names = {"test_boom": Boom, "test_record": Record, "test_async_double": AsyncDouble}
    for name, cls in names.items():
        EXPERIENCE_OPERATORS.register_module(name, cls)
    yield
    for name in names:
        EXPERIENCE_OPERATORS.unregister(name)


def test_runs_operators_in_order_and_writes(test_ops):
    writer = ListWriter()
    pipeline = ExperiencePipeline(
        [
            {"name": "test_record", "args": {"tag": "a"}},
            {"name": "invalid_reward_filter"},
            {"name": "test_record", "args": {"tag": "bb"}},
            {"name": "reward_filter", "args": {"threshold": 0.5}},
        ],
        writer=writer,
    )
    exps = [
        exp(reward=1.0),
        exp(reward=math.nan),
        exp(reward=0.1),
        exp(reward=None),
        exp(reward=0.9),
    ]
    metrics = asyncio.run(pipeline.process(exps))
    assert [[e.reward for e in b] for b in writer.batches] == [[1.0, 0.9]]
    assert writer.batches[0][0].info["trace"] == ["a", "bb"]
    # per-operator keys; repeated names get the index
    assert metrics["experience_pipeline/invalid_reward_filter/filtered_count"] == 2.0
    assert metrics["experience_pipeline/reward_filter/filtered_count"] == 1.0
    assert metrics["experience_pipeline/test_record_0/seen_count"] == 5.0
    assert metrics["experience_pipeline/test_record_2/seen_count"] == 3.0
    # flat keys: counts summed over operators, other values: last one wins
    assert metrics["experience_pipeline/filtered_count"] == 3.0
    assert metrics["experience_pipeline/seen_count"] == 8.0
    assert metrics["experience_pipeline/tag_len"] == 2.0
    assert metrics["experience_pipeline/input_count"] == 5.0
    assert metrics["experience_pipeline/experience_count"] == 2.0
    assert metrics["note"] == {"tag": "bb"}  # non-numeric: passed through unprefixed
    for key in (
        "time/experience_pipeline/operator/0_test_record",
        "time/experience_pipeline/operator/3_reward_filter",
        "time/experience_pipeline/write",
        "time/experience_pipeline/total",
    ):
        assert metrics[key] >= 0.0
    assert "ExperiencePipeline([test_record_0, invalid_reward_filter" in repr(pipeline)


def test_failing_operator_is_named_with_its_index(test_ops):
    pipeline = ExperiencePipeline(["reward_filter", "test_boom"], writer=ListWriter())
    with pytest.raises(ExperienceOperatorError) as info:
        pipeline.process_sync([exp()])
    message = str(info.value)
    assert "experience_pipeline.operators[1] ('test_boom')" in message
    assert "ZeroDivisionError: boom" in message
    assert (info.value.index, info.value.name) == (1, "test_boom")
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_malformed_operator_result_is_an_error():
    class NoTuple(ExperienceOperator):
        def process(self, exps):
            return exps

    pipeline = ExperiencePipeline(operators=[RewardFilter(), NoTuple()])
    with pytest.raises(ExperienceOperatorError, match=r"operators\[1\] \('NoTuple'\).*tuple"):
        pipeline.apply([exp()])


class FakeGroupAdvantage:
    """Stands in for trinity-algorithms' GroupAdvantage: reward minus group mean."""

    def __init__(self):
        self.calls: list[int] = []

    def __call__(self, exps):
        self.calls.append(len(exps))
        groups: dict[str, list[Experience]] = {}
        for e in exps:
            groups.setdefault(e.eid.tid, []).append(e)
        for g in groups.values():
            mean = sum(e.reward for e in g) / len(g)
            for e in g:
                e.advantages = torch.full((e.response_length,), e.reward - mean)
        return exps, {"group_count": len(groups)}

    @classmethod
    def compute_in_trainer(cls):
        return False


def test_advantage_fn_runs_after_the_operators():
    adv = FakeGroupAdvantage()
    writer = AsyncWriter()
    pipeline = ExperiencePipeline(
        DataProcessorConfig.model_validate(
            {"experience_pipeline": {"operators": [{"name": "reward_std_filter"}]}}
        ),
        writer=writer,
        advantage_fn=adv,
    )
    exps = group(0, [1.0, 0.0]) + group(1, [1.0, 1.0])
    metrics = asyncio.run(pipeline.process(exps))
    assert adv.calls == [2]  # after the filter removed the uniform group
    (written,) = writer.batches
    assert [e.advantages[0].item() for e in written] == [0.5, -0.5]
    assert metrics["experience_pipeline/advantage_fn/group_count"] == 1.0
    assert "time/experience_pipeline/operator/1_advantage_fn" in metrics


def test_advantage_fn_is_skipped_on_an_empty_step_and_nothing_is_written():
    adv = FakeGroupAdvantage()
    writer = ListWriter()
    pipeline = ExperiencePipeline(["reward_std_filter"], writer=writer, advantage_fn=adv)
    metrics = pipeline.process_sync(group(0, [1.0, 1.0]))
    assert adv.calls == [] and writer.batches == []
    assert metrics["experience_pipeline/experience_count"] == 0.0


def test_advantage_fn_errors():
    class InTrainer(FakeGroupAdvantage):
        @classmethod
        def compute_in_trainer(cls):
            return True

    with pytest.raises(ValueError, match="compute_in_trainer"):
        ExperiencePipeline(advantage_fn=InTrainer())

    def broken(exps):
        raise KeyError("no baseline")

    pipeline = ExperiencePipeline(writer=ListWriter(), advantage_fn=broken)
    with pytest.raises(ExperienceOperatorError, match="advantage function.*KeyError"):
        pipeline.process_sync([exp()])


def test_dynamic_sampling_keeps_sampling_across_explore_steps():
    writer = ListWriter()
    adv = FakeGroupAdvantage()
    pipeline = ExperiencePipeline(
        [{"name": "dapo_dynamic_sampling", "args": {"batch_size": 8}}],
        writer=writer,
        advantage_fn=adv,
    )

    def explorer():  # each step: 4 groups of 2, only one mixed
        step = 0
        while True:
            yield (
                group(0, [1, 1], step)
                + group(1, [1, 0], step)
                + group(2, [0, 0], step)
                + group(3, [0.5, 0.5], step)
            )
            step += 1

    steps = 0
    for exps in explorer():
        metrics = pipeline.process_sync(exps)
        steps += 1
        if writer.batches:
            break
    assert steps == 4
    assert [len(b) for b in writer.batches] == [8]
    assert metrics["experience_pipeline/dapo_dynamic_sampling/num_gen_batches"] == 4.0
    assert metrics["experience_pipeline/filtered_count"] == 6.0
    assert adv.calls == [8]  # advantages once, on the full batch


def test_async_operators_writers_input_writer_and_lifecycle(test_ops):
    writer, raw = ListWriter(), AsyncWriter()
    pipeline = ExperiencePipeline(
        ExperiencePipelineConfig.model_validate(
            {"operators": [{"name": "test_async_double"}, {"name": "test_record"}]}
        ),
        writer=writer,
        input_writer=raw,
    )

    async def run():
        await pipeline.prepare()
        metrics = await pipeline.process([exp(reward=1.0), exp(reward=2.0)])
        await pipeline.close()
        return metrics

    metrics = asyncio.run(run())
    assert [e.reward for e in writer.batches[0]] == [2.0, 4.0]
    assert len(raw.batches) == 1 and len(raw.batches[0]) == 2
    assert writer.acquired == 1 and writer.released == 1
    assert pipeline.operators[1].closed
    assert metrics["experience_pipeline/experience_count"] == 2.0
    # the sync API runs async operators too, and writes to an async-only writer
    sync_pipeline = ExperiencePipeline(["test_async_double"], writer=AsyncWriter())
    sync_pipeline.process_sync([exp(reward=1.5)])
    assert sync_pipeline.writer.batches[0][0].reward == 3.0


def test_process_needs_a_writer_apply_does_not():
    pipeline = ExperiencePipeline(["invalid_reward_filter"])
    kept, metrics = pipeline.apply([exp(reward=None), exp()])
    assert len(kept) == 1 and metrics["experience_pipeline/filtered_count"] == 1.0
    with pytest.raises(RuntimeError, match="no writer"):
        pipeline.process_sync([exp()])


def test_builds_from_a_whole_config():
    config = load_config(
        {
            "data_processor": {
                "experience_pipeline": {
                    "operators": [
                        {"name": "mask_response_truncated"},
                        {"name": "reward_filter", "args": {"threshold": 0.1}},
                    ]
                }
            }
        }
    )
    pipeline = ExperiencePipeline(config)
    out, metrics = pipeline.apply(
        [exp(reward=0.0), exp(reward=1.0, truncate_status="response_truncated")]
    )
    assert len(out) == 1 and not out[0].action_mask.any()
    assert metrics["experience_pipeline/masked_truncated_count"] == 1.0
    assert metrics["experience_pipeline/filtered_count"] == 1.0


def test_unknown_operator_fails_at_build_time():
    with pytest.raises(ExperienceOperatorError, match=r"operators\[0\] \('nope'\)"):
        ExperiencePipeline(["nope"])


def test_task_pipeline_configuration_errors(tmp_path):
    with pytest.raises(ValueError, match="output"):
        TaskPipeline(TaskPipelineConfig(inputs=[str(tmp_path)]))
    pipeline = TaskPipeline(TaskPipelineConfig(), output_path=str(tmp_path / "out"))
    with pytest.raises(ValueError, match="inputs"):
        pipeline.process()
    missing = TaskPipeline(
        TaskPipelineConfig(inputs=[str(tmp_path / "nope.jsonl")]), output_path=str(tmp_path / "o")
    )
    with pytest.raises(FileNotFoundError):
        missing.process()
    # not exploring, or no task pipeline: nothing to do
    assert check_and_run_task_pipeline(load_config({"mode": "train"})) == {}
    assert check_and_run_task_pipeline(load_config({"mode": "explore"})) == {}


def test_a_whole_config_writes_to_the_trainers_input_buffer(tmp_path):
    """No writer given: the pipeline opens buffer.trainer_input.experience_buffer itself."""
    from trinity.buffer.buffer_reader import get_buffer_reader
    from trinity.buffer.pipelines import ExperiencePipeline
    from trinity.common.config import Config
    from trinity.common.experience import Experience

    db = tmp_path / "exps.db"
    config = Config.from_dict(
        {
            "mode": "train",
            "buffer": {
                "train_batch_size": 2,
                "trainer_input": {
                    "experience_buffer": {"name": "exps", "storage_type": "sql", "path": str(db)}
                },
            },
            "data_processor": {
                "experience_pipeline": {
                    "operators": [{"name": "reward_filter", "args": {"threshold": 0.5}}]
                }
            },
        }
    )
    pipeline = ExperiencePipeline(config)
    exps = [Experience(tokens=[1, 2, 3], prompt_length=1, reward=r) for r in (0.0, 1.0, 0.9)]
    metrics = pipeline.process_sync(exps)
    pipeline.writer.release()
    assert metrics["experience_pipeline/filtered_count"] == 1
    read = get_buffer_reader(config.buffer.trainer_input.experience_buffer).read(2)
    assert sorted(e.reward for e in read) == [0.9, 1.0]
