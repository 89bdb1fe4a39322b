"""Buffer names code written for Trinity-RFT imports (docs/compat.md)."""

from __future__ import annotations

import pytest
import torch

from trinity.buffer.buffer_reader import BufferReader
from trinity.buffer.operators import ExperienceOperator
from trinity.buffer.reader import READER
from trinity.buffer.schema import FORMATTER, SQL_SCHEMA
from trinity.buffer.schema.sql_schema import ExperienceModel
from trinity.buffer.selector import SELECTORS, BaseSelector
from trinity.buffer.storage import PRIORITY_FN, PRIORITY_FUNC
from trinity.common.config import OperatorConfig, RewardShapingConfig
from trinity.common.constants import OpType
from trinity.common.experience import EID, Experience, from_hf_datasets, to_hf_datasets


def test_registries_under_trinity_rft_names():
    assert set(READER.list()) == {"queue", "priority_queue", "sql", "file"}
    assert all(issubclass(READER.get(n), BufferReader) for n in READER.list())
    assert {"sft", "dpo"} <= set(FORMATTER.list())
    assert SQL_SCHEMA.get("experience") is ExperienceModel
    assert all(issubclass(SELECTORS.get(n), BaseSelector) for n in SELECTORS.list())
    assert PRIORITY_FUNC is PRIORITY_FN


def test_selectors_under_trinity_rft_module_paths():
    from trinity.buffer.selector import selector
    from trinity.common.constants import SELECTOR_METRIC

    assert selector.SELECTORS is SELECTORS and selector.BaseSelector is BaseSelector
    # the key the task set reader takes selector feedback under is core's constant
    from trinity.buffer.taskset import SELECTOR_METRIC as buffer_key

    assert buffer_key is SELECTOR_METRIC == "selector_metric"


def _exp(**kw) -> Experience:
    return Experience(
        eid=EID(batch=1, task=2, run=3),
        tokens=torch.tensor([1, 2, 3, 4]),
        prompt_length=2,
        reward=0.5,
        logprobs=torch.tensor([-0.1, -0.2]),
        info={"k": [1, 2]},
        metrics={"acc": 1.0},
        **kw,
    )


def _same(a: Experience, b: Experience) -> None:
    # uid: a SQL storage gives eid.task back as a string, as 0.6's does
    assert a.eid.uid == b.eid.uid and a.reward == b.reward and a.info == b.info
    assert a.metrics == b.metrics and a.prompt_length == b.prompt_length
    for name in ("tokens", "logprobs", "action_mask", "advantages"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None and y is None) or (x.dtype == y.dtype and torch.equal(x, y)), name


def test_experience_model_and_hf_datasets_round_trip():
    exps = [_exp(), _exp(advantages=torch.tensor([0.3, 0.4]))]
    _same(ExperienceModel.from_experience(exps[0]).to_experience(), exps[0])
    ds = to_hf_datasets(exps)
    assert ds.column_names[0] == "experience" and ds["reward"] == [0.5, 0.5]
    for a, b in zip(exps, from_hf_datasets(ds), strict=True):
        _same(a, b)
    with pytest.raises(ValueError, match="no 'experience' column"):
        from_hf_datasets(ds.remove_columns("experience"))


def test_reward_shaping_mapper_takes_reward_shaping_configs():
    (op,) = ExperienceOperator.create_operators(
        [
            OperatorConfig(
                name="reward_shaping_mapper",
                args={
                    "reward_shaping_configs": [
                        RewardShapingConfig(stats_key="q", op_type=OpType.ADD, weight=1.0),
                        RewardShapingConfig(stats_key="d", op_type="mul", weight=0.5),
                    ]
                },
            )
        ]
    )
    exp = Experience(tokens=[1, 2], reward=1.0, info={"q": 3, "d": 2})
    (out,), metrics = op.process([exp])
    assert out.reward == (1.0 + 3) * 0.5 * 2 and exp.reward == 1.0
    assert metrics == {"reward_diff/mean": 3.0, "reward_diff/min": 3.0, "reward_diff/max": 3.0}


def test_guide_s_trinity_data_paths_are_the_buffer_s_objects():
    # the developer guide names trinity.data.operators.{EXPERIENCE_OPERATORS,
    # ExperienceOperator, DataJuicerOperator} and trinity.data.pipelines.ExperiencePipeline
    import trinity.buffer.operators as ops
    import trinity.buffer.pipelines as pipes
    from trinity.data.operators import EXPERIENCE_OPERATORS, DataJuicerOperator
    from trinity.data.operators import ExperienceOperator as GuideOperator
    from trinity.data.pipelines import ExperiencePipeline

    assert EXPERIENCE_OPERATORS is ops.EXPERIENCE_OPERATORS
    assert GuideOperator is ops.ExperienceOperator
    assert DataJuicerOperator is ops.DataJuicerOperator
    assert ExperiencePipeline is pipes.ExperiencePipeline

    # an operator registered through the guide's path is found by name in the one registry
    @EXPERIENCE_OPERATORS.register_module("guide_path_reward_floor")
    class RewardFloor(GuideOperator):
        def __init__(self, threshold: float = 0.0) -> None:
            self.threshold = threshold

        def process(self, exps):
            kept = [e for e in exps if e.reward >= self.threshold]
            return kept, {"filtered_count": len(exps) - len(kept)}

    try:
        (op,) = ops.build_operators(
            [OperatorConfig(name="guide_path_reward_floor", args={"threshold": 0.5})]
        )
        assert isinstance(op, RewardFloor)
        kept, metrics = op.process([_exp(), Experience(tokens=[1, 2], reward=0.1)])
        assert [e.reward for e in kept] == [0.5] and metrics == {"filtered_count": 1}
    finally:
        EXPERIENCE_OPERATORS.unregister("guide_path_reward_floor")


@pytest.mark.parametrize("storage_type,suffix", [("sql", "buffer.db"), ("file", "exps.jsonl")])
def test_per_storage_module_paths_write_and_read(tmp_path, storage_type, suffix):
    """Trinity-RFT 0.6's per-storage modules (``trinity.buffer.{reader,writer}.<storage>_*``):
    a writer and a reader built from those paths, as its code builds them
    (``Class(storage_config)``), round-trip experiences."""
    from trinity.buffer.reader.file_reader import FileReader
    from trinity.buffer.reader.sql_reader import SQLReader
    from trinity.buffer.writer.file_writer import JSONWriter
    from trinity.buffer.writer.sql_writer import SQLWriter
    from trinity.common.config import ExperienceBufferConfig

    writer_cls, reader_cls = {"sql": (SQLWriter, SQLReader), "file": (JSONWriter, FileReader)}[
        storage_type
    ]
    config = ExperienceBufferConfig(
        name="exps", storage_type=storage_type, path=str(tmp_path / suffix), batch_size=2
    )
    written = [_exp(), _exp()]
    writer = writer_cls(config)
    writer.write(written)
    writer.release()
    got = reader_cls(config).read()
    assert len(got) == 2
    assert got[0].eid.task == ("2" if storage_type == "sql" else 2)  # 0.6's SQL storage: text
    for a, b in zip(got, written, strict=True):
        _same(a, b)


def test_per_storage_module_paths_name_the_registered_classes():
    from trinity.buffer.reader import file_reader, queue_reader, sql_reader
    from trinity.buffer.writer import WRITER, file_writer, queue_writer, sql_writer

    assert READER.get("queue") is queue_reader.QueueReader
    assert (
        READER.get("sql") is sql_reader.SQLReader and READER.get("file") is file_reader.FileReader
    )
    assert WRITER.get("queue") is queue_writer.QueueWriter
    assert (
        WRITER.get("sql") is sql_writer.SQLWriter and WRITER.get("file") is file_writer.JSONWriter
    )
