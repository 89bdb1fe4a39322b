"""A stand-in for a model directory, for tests whose runs never load the model (a FakeEngine
stands in, a dry run, a run refused before it starts).

Validation refuses a model path that is not a local Hugging Face model directory (one holding
``config.json``); this makes one without weights. Tests that load the model build a real tiny
one instead (the ``model_path`` fixture, :mod:`trinity.launcher.tiny_model`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Union


def stand_in_model(path: Union[str, Path], positions: int = 2048) -> str:
    """Make ``path`` a directory holding a ``config.json`` (``max_position_embeddings``:
    ``positions``); returns it as a string."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "qwen2", "max_position_embeddings": positions}
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(path)


def small_config(
    tmp_path: Union[str, Path],
    *,
    workflow: str = "math_workflow",
    repeat_times: int = 4,
    head: str = "",
    buffer: str = "",
    tail: str = "",
) -> Path:
    """``tmp_path/config.yaml``: a valid GRPO config on a stand-in model and a one-task file
    (``head``: top-level lines before the rest, ``buffer``: more ``buffer:`` keys, ``tail``:
    more top-level sections; YAML, indented as at the top level)."""
    tmp_path = Path(tmp_path)
    stand_in_model(tmp_path / "model")
    data = tmp_path / "tasks.jsonl"
    data.write_text('{"question": "1+1=", "answer": "2"}\n')
    lines = [
        *head.splitlines(),
        "project: p",
        "name: n",
        f"checkpoint_root_dir: {tmp_path / 'ckpt'}",
        "algorithm:",
        "  algorithm_type: grpo",
        f"  repeat_times: {repeat_times}",
        "model:",
        f"  model_path: {tmp_path / 'model'}",
        "  max_prompt_tokens: 16",
        "  max_response_tokens: 8",
        "buffer:",
        "  batch_size: 2",
        *("  " + line for line in buffer.splitlines()),
        "  explorer_input:",
        "    taskset:",
        f"      path: {data}",
        f"      default_workflow_type: {workflow}",
        *tail.splitlines(),
    ]
    cfg = tmp_path / "config.yaml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg
