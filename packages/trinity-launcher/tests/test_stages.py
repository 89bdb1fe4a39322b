"""``stages:`` through the real command line: an SFT stage (mode train) hands its final Hugging
Face weights to a GRPO stage (mode both), progress is recorded in ``stages.json``, a restart
skips finished stages, and bad stages are refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")


def staged_config(
    tmp_path: Path, model_path: str, both_config, arithmetic_tasks, **base_over
) -> dict:
    sft_data = tmp_path / "sft.jsonl"
    sft_data.write_text(
        "".join(
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": f"{i % 5}+{i // 5}="},
                        {"role": "assistant", "content": str(i % 5 + i // 5)},
                    ]
                }
            )
            + "\n"
            for i in range(16)
        )
    )
    tasks = arithmetic_tasks(tmp_path, 4)
    grpo = both_config(
        tmp_path,
        "grpo",
        tasks,
        algorithm={"repeat_times": 2},
        buffer={"batch_size": 2},
        explorer={"runner_per_model": 2},
    )
    return {
        "project": "stages",
        "name": "sft-grpo",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "model": {"model_path": model_path, "max_prompt_tokens": 32, "max_response_tokens": 4},
        "cluster": {"gpu_per_node": 0},
        "trainer": {"save_interval": 2},
        **base_over,
        "stages": [
            {
                "stage_name": "sft",
                "mode": "train",
                "algorithm": {"algorithm_type": "sft", "optimizer": {"lr": 1e-3}},
                "buffer": {
                    "batch_size": 8,
                    "train_batch_size": 8,
                    "total_epochs": 1,
                    "trainer_input": {
                        "experience_buffer": {
                            "name": "sft",
                            "storage_type": "file",
                            "path": str(sft_data),
                            "format": {"prompt_type": "messages", "messages_key": "messages"},
                        }
                    },
                },
            },
            {
                "stage_name": "grpo",
                "mode": "both",
                # the mode-both sections the other mode-both tests run (conftest.both_config)
                **{key: grpo[key] for key in ("algorithm", "buffer", "explorer")},
            },
        ],
    }


def write(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "staged.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_staged_config_dry_run_checks_every_stage(
    tmp_path, model_path, both_config, run_cli, arithmetic_tasks
):
    config = staged_config(tmp_path, model_path, both_config, arithmetic_tasks)
    done = run_cli(write(tmp_path, config), "--dry-run")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stage 1: sft (mode=train, algorithm=sft)" in done.stdout
    assert "stage 2: grpo (mode=both, algorithm=grpo)" in done.stdout
    assert not (tmp_path / "ckpt").exists()  # nothing ran

    # a bad value only the second stage has is reported as that stage's field
    config["stages"][1]["buffer"]["explorer_input"]["taskset"]["default_workflow_type"] = "nope"
    done = run_cli(write(tmp_path, config), "--dry-run")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "stages[1].buffer.explorer_input.taskset.default_workflow_type" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_sft_then_grpo_hands_weights_on_and_a_restart_skips_finished_stages(
    tmp_path, model_path, both_config, run_cli, arithmetic_tasks
):
    path = write(tmp_path, staged_config(tmp_path, model_path, both_config, arithmetic_tasks))
    done = run_cli(path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "All 2 stages finished" in done.stdout

    job = tmp_path / "ckpt" / "stages" / "sft-grpo"
    state = json.loads((job / "stages.json").read_text())["completed"]
    assert [s["stage_name"] for s in state] == ["sft", "grpo"]
    # SFT: 16 rows / 8 per step = 2 steps, final HF weights in its last checkpoint
    sft_weights = job / "sft" / "global_step_2" / "actor" / "huggingface"
    assert state[0]["model_path"] == str(sft_weights)
    assert any(p.suffix == ".safetensors" for p in sft_weights.iterdir())
    assert (sft_weights / "tokenizer.json").is_file()  # the next stage's engines load it

    # GRPO started from the SFT weights
    assert f"Stage 2/2 (grpo): mode both, model {sft_weights}" in done.stdout + done.stderr
    grpo_weights = job / "grpo" / "global_step_2" / "actor" / "huggingface"
    assert state[1]["model_path"] == str(grpo_weights)
    grpo_rows = [json.loads(x) for x in (job / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in grpo_rows if "actor/loss" in r] == [1, 2]

    # the same command again: both stages are finished, nothing is retrained
    again = run_cli(path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (job / "grpo" / "metrics.jsonl").read_text().count("\n") == len(grpo_rows)
    assert "finished in an earlier run; skipped" in again.stdout + again.stderr


def test_stage_record_of_other_stages_is_refused(
    tmp_path, model_path, both_config, run_cli, arithmetic_tasks
):
    config = staged_config(tmp_path, model_path, both_config, arithmetic_tasks)
    job = tmp_path / "ckpt" / "stages" / "sft-grpo"
    job.mkdir(parents=True)
    (job / "stages.json").write_text(json.dumps({"completed": [{"stage_name": "warmup"}]}))
    done = run_cli(write(tmp_path, config))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "stages.json" in done.stderr and "warmup" in done.stderr
    assert "Traceback" not in done.stderr
