"""What the trainer reads: an auxiliary data set of rows (``mix``'s expert data) is formatted
and read for its own ``total_epochs``, batches crossing epochs."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SFT_ROWS = REPO / "examples" / "data" / "arithmetic_sft"


def _config(tmp_path: Path, model_path: str, **aux_extra):
    from trinity.common.config import load_config

    return load_config(
        {
            "mode": "both",
            "checkpoint_root_dir": str(tmp_path / "ckpt"),
            "model": {"model_path": model_path, "max_model_len": 64},
            "algorithm": {"algorithm_type": "mix"},
            "buffer": {
                "batch_size": 4,
                "train_batch_size": 64,
                "total_epochs": 2,
                "explorer_input": {
                    "taskset": {"path": str(REPO / "examples" / "data" / "arithmetic")}
                },
                "trainer_input": {
                    "auxiliary_buffers": {
                        "sft_dataset": {
                            "storage_type": "file",
                            "schema_type": "sft",
                            "path": str(SFT_ROWS),
                            "split": "train",
                            "format": {
                                "prompt_type": "plaintext",
                                "prompt_key": "question",
                                "response_key": "answer",
                            },
                            **aux_extra,
                        }
                    }
                },
            },
        },
        check=True,
    )


@pytest.mark.parametrize("own_epochs", [None, 3])
def test_an_auxiliary_data_set_is_read_for_its_epochs(tmp_path, model_path, own_epochs):
    from trinity.launcher.trainer.data import (
        DatasetExperienceReader,
        EndOfData,
        build_trainer_readers,
    )

    extra = {} if own_epochs is None else {"total_epochs": own_epochs}
    config = _config(tmp_path, model_path, **extra)
    readers = build_trainer_readers(config, "experience", model_path)
    aux = readers["sft_dataset"]
    assert isinstance(aux, DatasetExperienceReader)  # rows formatted, not an experience file
    rows = len(aux)
    assert rows == 44
    epochs = own_epochs or config.buffer.total_epochs
    seen = 0
    while True:  # 64-row batches cross epoch ends; a short last batch is dropped
        try:
            batch = aux.read(64)
        except EndOfData:
            break
        assert len(batch) == 64 and all(int(e.action_mask.sum()) > 0 for e in batch)
        seen += len(batch)
    assert seen == (epochs * rows) // 64 * 64


def test_a_cpt_data_set_is_raw_text_trained_after_its_first_token(tmp_path, model_path):
    """``cpt`` (mode train): the experience buffer's rows are plain text, tokenized without
    the chat template; the loss covers every token after the first, and the trainer's step
    count comes from the rows."""
    from transformers import AutoTokenizer

    from trinity.common.config import load_config
    from trinity.launcher.trainer.build import _total_steps
    from trinity.launcher.trainer.data import DatasetExperienceReader, build_trainer_readers

    config = load_config(
        {
            "mode": "train",
            "checkpoint_root_dir": str(tmp_path / "ckpt"),
            "model": {"model_path": model_path, "max_model_len": 64},
            "algorithm": {"algorithm_type": "cpt"},
            "buffer": {
                "train_batch_size": 8,
                "total_epochs": 1,
                "trainer_input": {
                    "experience_buffer": {
                        "storage_type": "file",
                        "path": str(REPO / "examples" / "data" / "arithmetic_cpt"),
                        "split": "train",
                        "format": {"prompt_type": "plaintext", "prompt_key": "text"},
                    }
                },
            },
        },
        check=True,
    )
    reader = build_trainer_readers(config, "cpt", model_path)["experience_buffer"]
    assert isinstance(reader, DatasetExperienceReader) and len(reader) == 44
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    exp = reader.read(8)[0]
    assert tokenizer.decode(exp.tokens) == "0+0=0\n"  # no chat template around it
    assert exp.prompt_length == 1 and int(exp.action_mask.sum()) == len(exp.tokens) - 1
    assert _total_steps(config, "cpt") == 44 // 8
