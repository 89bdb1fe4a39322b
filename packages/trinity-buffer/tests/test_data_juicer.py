"""Real Data-Juicer operators (no models) on a few experiences and a small task set.

Only operators that need neither a model nor an extra package are used: text_length_filter,
words_num_filter (tokenization off), special_characters_filter, whitespace_normalization_mapper.
Data-Juicer's caches are pointed at a temporary directory before it is first imported.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
import yaml

from trinity.common.config import TaskPipelineConfig, load_config
from trinity.common.experience import EID, Experience


@pytest.fixture(scope="module")
def dj(tmp_path_factory):
    """Imports Data-Juicer once for the module, with every cache under a temp dir."""
    cache = tmp_path_factory.mktemp("dj_cache")
    with pytest.MonkeyPatch.context() as mp:
        for var in (
            "DATA_JUICER_CACHE_HOME",
            "DATA_JUICER_ASSETS_CACHE",
            "DATA_JUICER_MODELS_CACHE",
            "CACHE_HOME",
            "HF_HOME",
            "HF_DATASETS_CACHE",
        ):
            mp.setenv(var, str(cache / var.lower()))
        mp.setenv("HF_HUB_OFFLINE", "1")
        pytest.importorskip("data_juicer")
        from trinity.buffer.operators import DataJuicerOperator, create_operators
        from trinity.buffer.pipelines import ExperiencePipeline, TaskPipeline

        yield type(
            "DJ",
            (),
            {
                "DataJuicerOperator": DataJuicerOperator,
                "create_operators": staticmethod(create_operators),
                "ExperiencePipeline": ExperiencePipeline,
                "TaskPipeline": TaskPipeline,
            },
        )


def exp(response: str, reward: float = 1.0, prompt: str = "What is 2 + 2?", task: int = 0):
    return Experience(
        eid=EID(batch=0, task=task),
        tokens=torch.arange(5),
        prompt_length=2,
        reward=reward,
        prompt_text=prompt,
        response_text=response,
    )


class ListWriter:
    def __init__(self):
        self.batches = []

    def write(self, exps):
        self.batches.append(list(exps))


def test_filters_drop_short_responses_and_record_stats(dj):
    op = dj.DataJuicerOperator(
        operators=[
            {"text_length_filter": {"min_len": 12}},
            {"name": "words_num_filter", "args": {"min_num": 3, "tokenization": False}},
        ]
    )
    exps = [
        exp("4"),
        exp("The answer is 4."),
        exp("fourfourfourfour"),  # long enough, but one word
        exp("Two plus two equals four."),
        Experience(tokens=torch.arange(4), prompt_length=2, reward=0.0),  # no text at all
    ]
    kept, metrics = op.process(exps)
    assert [e.response_text for e in kept] == ["The answer is 4.", "Two plus two equals four."]
    assert kept[0] is exps[1]
    assert (
        kept[0].info["text_len"] == 16 and kept[0].info["num_words"] == 3
    )  # digits do not count as words
    assert metrics["filtered_count"] == 3
    assert metrics["text_len/mean"] == pytest.approx((16 + 25) / 2)
    assert op.process([]) == ([], {"filtered_count": 0})


def test_operators_can_read_the_prompt_and_map_text(dj):
    op = dj.DataJuicerOperator(
        operators=[
            {"text_length_filter": {"min_len": 10, "text_key": "prompt"}},
            {"whitespace_normalization_mapper": {}},
        ]
    )
    exps = [exp("keep\u2003me ", prompt="a long enough prompt"), exp("dropped", prompt="short")]
    kept, metrics = op.process(exps)
    assert len(kept) == 1 and metrics["filtered_count"] == 1
    assert kept[0].response_text == "keep me"  # normalized whitespace, trimmed
    assert kept[0].prompt_text == "a long enough prompt"


def test_unknown_data_juicer_operator_is_named(dj):
    with pytest.raises(Exception, match=r"text_length_filtr.*Did you mean 'text_length_filter'"):
        dj.create_operators([{"name": "data_juicer", "args": {"operators": ["text_length_filtr"]}}])


def test_data_juicer_in_an_experience_pipeline_config(dj, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump({"np": 1, "process": [{"text_length_filter": {"min_len": 5}}]})
    )
    config = load_config(
        {
            "data_processor": {
                "experience_pipeline": {
                    "operators": [
                        {"name": "data_juicer", "args": {"config_path": str(recipe)}},
                        {
                            "name": "reward_shaping_mapper",
                            "args": {
                                "reward_shaping_configs": [
                                    {"stats_key": "text_len", "op_type": "ADD", "weight": 0.01}
                                ],
                                "report_reward_diff": True,
                            },
                        },
                    ]
                }
            }
        }
    )
    writer = ListWriter()
    pipeline = dj.ExperiencePipeline(config, writer=writer)
    metrics = asyncio.run(pipeline.process([exp("ok"), exp("long enough", reward=1.0)]))
    (written,) = writer.batches
    assert [e.response_text for e in written] == ["long enough"]
    assert written[0].reward == pytest.approx(1.0 + 0.01 * 11)
    assert metrics["experience_pipeline/data_juicer/filtered_count"] == 1.0
    assert metrics["experience_pipeline/reward_diff/mean"] == pytest.approx(0.11)


def test_task_pipeline_processes_a_task_set_file(dj, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    rows = [
        {"question": "What is 1 + 1?", "answer": "2", "source": "a"},
        {"question": "2+2", "answer": "4", "source": "b"},  # too short
        {"question": "$$$ ### @@@ !!! %%%", "answer": "?", "source": "c"},  # special chars
        {"question": "Compute the sum of 17 and 25.", "answer": "42", "source": "d"},
        {"question": "How many legs does a spider have?", "answer": "8", "source": "e"},
    ]
    (raw / "part1.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:3]) + "\n")
    (raw / "part2.jsonl").write_text("\n".join(json.dumps(r) for r in rows[3:]) + "\n")
    config = load_config(
        {
            "mode": "explore",
            "buffer": {"explorer_input": {"taskset": {"path": str(tmp_path / "taskset")}}},
            "data_processor": {
                "task_pipeline": {
                    "num_process": 1,
                    "inputs": [str(raw)],
                    "operators": [
                        {
                            "name": "text_length_filter",
                            "args": {"min_len": 8, "text_key": "question"},
                        },
                        {
                            "name": "special_characters_filter",
                            "args": {"max_ratio": 0.6, "text_key": "question"},
                        },
                    ],
                    "priority_weights": {"text_len": 1.0},
                    "top_k": 2,
                    "target_fields": ["question", "answer"],
                }
            },
        },
        check=False,
    )
    pipeline = dj.TaskPipeline(config)
    metrics = pipeline.process()
    assert metrics == {
        "task_pipeline/input_count": 5.0,
        "task_pipeline/output_count": 2.0,
        "task_pipeline/filtered_count": 2.0,
    }
    assert pipeline.output_file == (tmp_path / "taskset" / "tasks.jsonl").resolve()
    written = [json.loads(line) for line in pipeline.output_file.read_text().splitlines()]
    # ranked by question length, cut to top_k, only the target fields
    assert written == [
        {"question": "How many legs does a spider have?", "answer": "8"},
        {"question": "Compute the sum of 17 and 25.", "answer": "42"},
    ]


def test_task_pipeline_keeps_fields_and_refuses_to_overwrite_inputs(dj, tmp_path):
    src = tmp_path / "tasks.jsonl"
    src.write_text(
        json.dumps({"text": "long enough text", "id": 1}) + "\n" + json.dumps({"text": "x"})
    )
    config = TaskPipelineConfig(
        inputs=[str(src)],
        num_process=1,
        operators=[{"name": "text_length_filter", "args": {"min_len": 5}}],
    )
    out = tmp_path / "out.jsonl"
    metrics = dj.TaskPipeline(config, output_path=str(out)).process()
    assert metrics["task_pipeline/output_count"] == 1.0
    assert [json.loads(x) for x in out.read_text().splitlines()] == [
        {"text": "long enough text", "id": 1}  # Data-Juicer's internal columns dropped
    ]
    with pytest.raises(ValueError, match="beside or replace"):
        dj.TaskPipeline(config, output_path=str(tmp_path)).process()
