"""Core behaviour Trinity-RFT 0.6's unit tests rely on (tests/trinity_rft_compat)."""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from trinity.common.config import TasksetConfig, load_config
from trinity.common.models.utils import tokenize_and_mask_messages_default
from trinity.common.workflows import Task, Workflow
from trinity.utils.log import get_logger
from trinity.utils.registry import UnknownModuleError

HERE = Path(__file__).resolve().parent
MODEL_DIR = str(HERE / "data" / "model")


def _config(**overrides: Any):
    data: dict[str, Any] = {
        "checkpoint_root_dir": "",
        "model": {"model_path": MODEL_DIR, "max_model_len": 2048},
        "buffer": {"batch_size": 4, "explorer_input": {"taskset": {"path": str(HERE)}}},
    }
    data.update(overrides)
    return load_config(data)


def test_check_and_update_reads_trinity_rft_defaults(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    template = tmp_path / "template.j2"
    template.write_text("{{ messages }}")
    config = _config()
    config.model.chat_template_path = str(template)
    config.check_and_update()
    # an empty checkpoint root is the current directory
    assert config.checkpoint_root_dir == str(tmp_path)
    assert config.checkpoint_job_dir == os.path.join(str(tmp_path), "Trinity-RFT", "rft")
    # the chat template file is read into custom_chat_template, which the task set takes
    assert config.model.custom_chat_template == "{{ messages }}"
    assert config.buffer.explorer_input.tasksets[0].format.chat_template == "{{ messages }}"
    # unset sample-strategy arguments read as {} (SAMPLE_STRATEGY.get(name)(**args))
    assert config.algorithm.sample_strategy_args == {}


def test_a_taskset_assigned_after_a_check_replaces_the_mirrored_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = _config()
    config.check_and_update()
    new = TasksetConfig(name="other", path=str(HERE))
    config.buffer.explorer_input.taskset = new
    config.check_and_update()  # tasksets only mirrored the old one: not "both set"
    assert config.buffer.explorer_input.tasksets[0].name == "other"


def test_workflows_may_be_built_without_task_or_model() -> None:
    class Hello(Workflow):
        def run(self):
            return ["hello"]

    assert Hello(task=None, model=None).run() == ["hello"]
    with pytest.raises(TypeError, match="needs task= and model="):
        Hello(task=Task())


def test_get_logger_takes_trinity_rft_0_6_arguments() -> None:
    logger = get_logger("compat_level_test", level=logging.DEBUG)
    assert logger.name == "trinity.compat_level_test" and logger.level == logging.DEBUG
    assert get_logger().name == "trinity"
    # outside a Ray actor in_ray_actor has no effect: later loggers are their own
    get_logger("compat_outside_actor", in_ray_actor=True)
    assert get_logger("compat_other").name == "trinity.compat_other"


def test_unknown_module_error_survives_pickling() -> None:
    error = pickle.loads(pickle.dumps(UnknownModuleError("monitor", "nope", ["tensorboard"])))
    assert isinstance(error, ValueError) and error.known == ["tensorboard"]
    assert "Unknown monitor name 'nope'" in str(error)


class _ChatMLTokenizer:
    """Whitespace 'tokenizer' with a ChatML template: one id per word."""

    chat_template = "chatml"

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def apply_chat_template(self, messages, add_generation_prompt=False, **kwargs):
        text = "".join(f"<s> {m['role']} {m['content']} </s> " for m in messages)
        if add_generation_prompt:
            text += "<s> assistant "
        return [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]


def test_tokenize_and_mask_messages_default_gives_trinity_rft_0_6_dict() -> None:
    tok = _ChatMLTokenizer()
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello there"},
    ]
    out = tokenize_and_mask_messages_default(tok, messages)
    assert out["input_ids"].shape == out["assistant_masks"].shape == (1, 9)
    # the assistant's words and end-of-turn, not its role header (the generation prompt)
    assert out["assistant_masks"][0].tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 1]
    no_assistant = tokenize_and_mask_messages_default(tok, messages[:1])
    assert not no_assistant["assistant_masks"].any()
    with pytest.raises(ValueError):
        tokenize_and_mask_messages_default(tok, [])
