"""``data_processor.task_pipeline`` runs when a run starts, before anything reads its output:
the explorer's task set is the pipeline's output file (Trinity-RFT runs it at the start of
every mode that explores, and of mode train with sft/dpo)."""

from __future__ import annotations

import json

import pytest

from trinity.common.config import load_config

pytest.importorskip("data_juicer")


def test_the_pipeline_writes_the_task_set_the_explorer_then_reads(tmp_path):
    from trinity.launcher.session import RunSession
    from trinity.launcher.tiny_model import build_tiny_model

    model_path = str(tmp_path / "model")
    build_tiny_model(model_path)

    raw = tmp_path / "raw.jsonl"
    rows = [{"question": f"what is {i} + {i}?", "answer": str(2 * i)} for i in range(6)]
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows))
    taskset = tmp_path / "taskset"
    config = load_config(
        {
            "mode": "explore",
            "checkpoint_root_dir": str(tmp_path / "ckpt"),
            "model": {"model_path": model_path},
            "buffer": {
                "batch_size": 2,
                "total_epochs": 1,
                "explorer_input": {
                    "taskset": {
                        "path": str(taskset),
                        "format": {"prompt_key": "question", "response_key": "answer"},
                        "default_workflow_type": "math_workflow",
                    }
                },
            },
            "explorer": {"rollout_model": {"engine_type": "transformers"}},
            "data_processor": {
                "task_pipeline": {
                    "num_process": 1,
                    "inputs": [str(raw)],
                    "operators": [
                        {
                            "name": "text_length_filter",
                            "args": {"min_len": 1, "text_key": "question"},
                        }
                    ],
                    "priority_weights": {"text_len": 1.0},
                    "top_k": 4,
                    "target_fields": ["question", "answer"],
                }
            },
        },
        check=False,
    )
    assert not (taskset / "tasks.jsonl").exists()
    raw.rename(tmp_path / "elsewhere.jsonl")
    with pytest.raises(RuntimeError, match="raw.jsonl"):
        RunSession(config)  # the input is missing: the run stops before anything starts
    (tmp_path / "elsewhere.jsonl").rename(raw)
    session = RunSession(config)
    assert session.task_pipeline_metrics["task_pipeline/output_count"] == 4.0
    written = [json.loads(line) for line in (taskset / "tasks.jsonl").read_text().splitlines()]
    assert len(written) == 4
    assert session.explorer.total_steps == 2  # 4 tasks, batches of 2, one epoch
