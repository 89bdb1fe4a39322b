"""simple_mm_workflow / async_simple_mm_workflow (Trinity-RFT 0.6's names): the row's images go
into the user message at the prompt's ``<image>`` tags; the rest is a single-turn workflow."""

from __future__ import annotations

import pytest

from trinity.common.config import FormatConfig
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, run_task
from trinity.workflows.common import MissingTaskFieldError
from trinity.workflows.multimodal import AsyncSimpleMMWorkflow, SimpleMMWorkflow
from trinity.workflows.single_turn import BOXED_THINK_SYSTEM_PROMPT

MM = FormatConfig(prompt_key="problem", response_key="answer", image_key="images")


def _task(row, workflow="simple_mm_workflow", fmt=MM, **kwargs):
    return Task(workflow=workflow, raw_task=row, format_args=fmt, repeat_times=2, **kwargs)


def test_both_names_are_registered():
    assert WORKFLOWS["simple_mm_workflow"] is SimpleMMWorkflow
    assert WORKFLOWS["async_simple_mm_workflow"] is AsyncSimpleMMWorkflow
    assert SimpleMMWorkflow.reads_images


def test_images_go_at_their_tags_and_the_default_reward_scores_the_boxed_answer():
    model = FakeModelWrapper(["<think>two</think>\\boxed{2}", "\\boxed{3}"])
    row = {"problem": "Look: <image> How many?", "answer": "2", "images": ["a.png", "b.png"]}
    exps = run_task(_task(row), model)
    assert [e.reward > 0.5 for e in exps] == [True, False]
    (call,) = model.calls_of("chat")
    assert call.messages == [
        {"role": "system", "content": BOXED_THINK_SYSTEM_PROMPT},
        {
            "role": "user",
            "content": [
                {"type": "image", "image": "b.png"},  # beyond the tags: first
                {"type": "text", "text": "Look: "},
                {"type": "image", "image": "a.png"},
                {"type": "text", "text": " How many?"},
            ],
        },
    ]


def test_a_single_image_value_and_a_task_reward_without_the_math_prompt():
    model = FakeModelWrapper(["3"])
    row = {"problem": "How many squares?", "answer": "3", "images": {"bytes": b"..", "path": None}}
    task = _task(row, workflow="async_simple_mm_workflow", reward_fn="arithmetic_reward")
    exps = run_task(task, model)
    assert [e.reward for e in exps] == [1.0, 1.0]
    (call,) = model.calls_of("chat")
    assert call.messages == [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": {"bytes": b"..", "path": None}},
                {"type": "text", "text": "How many squares?"},
            ],
        }
    ]


def test_a_row_without_its_image_column_is_refused_naming_the_key():
    with pytest.raises(MissingTaskFieldError, match=r"'images' \(set by format.image_key\)"):
        run_task(_task({"problem": "How many?", "answer": "1"}), FakeModelWrapper("1"))


def test_without_image_key_the_prompt_is_plain_text():
    model = FakeModelWrapper(["\\boxed{4}"])
    fmt = FormatConfig(prompt_key="problem", response_key="answer")
    run_task(_task({"problem": "2+2?", "answer": "4"}, fmt=fmt), model)
    (call,) = model.calls_of("chat")
    assert call.messages[-1] == {"role": "user", "content": "2+2?"}
