"""docs/writing-components.md runs as printed.

Every Python block of the page is a file of a plugin directory (its first line names it,
``# my_plugins/<file>.py``): they are written into a fresh ``my_plugins/`` and

* ``pytest my_plugins/`` runs the page's contract tests (``RewardFnContract``,
  ``WorkflowContract``, ``ExperienceOperatorContract``) on the page's components, in a fresh
  interpreter, as a plugin author would;
* the page's YAML blocks, merged into a minimal config, pass ``trinity-launch --dry-run
  --plugin-dir my_plugins`` (the run imports the components, skips the test files, and checks
  ``workflow_args`` against the workflow's ``Args``, ``reward_fn_args`` and the operator's
  ``args`` against their typed ``__init__``); a typo or an out-of-range value in them is refused.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

DOC = Path(__file__).resolve().parents[1] / "docs" / "writing-components.md"
BIN = Path(sys.executable).parent
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)
FILE_LINE = re.compile(r"\A# my_plugins/(?P<name>[A-Za-z_]\w*\.py)\n")


def _blocks(lang: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return [m["body"] for m in FENCE.finditer(text) if m["lang"] == lang]


PYTHON = _blocks("python")
YAML = _blocks("yaml")


def _deep_merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """``my_plugins/`` with the page's files, a task file and a model directory."""
    root = tmp_path_factory.mktemp("writing_components")
    plugins = root / "my_plugins"
    plugins.mkdir()
    for body in PYTHON:
        match = FILE_LINE.match(body)
        assert match, f"a Python block of {DOC.name} does not start with '# my_plugins/<file>.py'"
        (plugins / match["name"]).write_text(body)
    (root / "qa.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in [{"question": "2+2=", "answer": "4"}] * 4)
    )
    model = root / "model"  # validation wants a model directory; nothing loads it
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2", "max_position_embeddings": 2048}')
    return root


def _config(workdir: Path, **overrides) -> Path:
    """A minimal GRPO config with the page's YAML blocks merged in (the task file replaced)."""
    config: dict = {
        "project": "p",
        "name": "n",
        "checkpoint_root_dir": str(workdir / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {
            "model_path": str(workdir / "model"),
            "max_prompt_tokens": 64,
            "max_response_tokens": 256,
        },
        "buffer": {"batch_size": 2},
    }
    for body in YAML:
        config = _deep_merge(config, yaml.safe_load(body))
    config = _deep_merge(config, {"buffer": {"explorer_input": {"taskset": {}}}})
    config["buffer"]["explorer_input"]["taskset"]["path"] = str(workdir / "qa.jsonl")
    config = _deep_merge(config, overrides)
    path = workdir / f"config_{len(list(workdir.glob('config_*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _launch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "trinity-launch"), *args], capture_output=True, text=True, timeout=180
    )


def test_the_page_has_the_three_components_and_their_tests():
    names = [FILE_LINE.match(body)["name"] for body in PYTHON if FILE_LINE.match(body)]
    assert len(names) == len(PYTHON), "every Python block is a file of my_plugins/"
    assert names == [
        "tagged_answer_reward.py",
        "test_tagged_answer_reward.py",
        "tagged_qa_workflow.py",
        "test_tagged_qa_workflow.py",
        "length_penalty.py",
        "test_length_penalty.py",
    ]
    for contract in ("RewardFnContract", "WorkflowContract", "ExperienceOperatorContract"):
        assert any(f"({contract})" in body for body in PYTHON), contract
    assert len(YAML) == 2


def test_the_contract_tests_of_the_page_pass_under_pytest(workdir):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "my_plugins", "-v", "-p", "no:cacheprovider"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    for cls in ("TestTaggedAnswerReward", "TestTaggedQAWorkflow", "TestLengthPenalty"):
        assert f"::{cls}::" in out, f"{cls} did not run:\n{out[-3000:]}"
    assert " FAILED" not in out and " ERROR" not in out
    # every rule of each contract ran (none skipped: the components are all installed)
    assert "SKIPPED" not in out, out[-3000:]


def test_the_page_config_validates_with_the_plugin_directory(workdir):
    config = _config(workdir)
    done = _launch(str(config), "--plugin-dir", str(workdir / "my_plugins"), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "Dry run: the config is valid" in done.stdout
    # the loader imported the three components and skipped the test files
    assert "test_tagged" not in done.stderr and "test_length" not in done.stderr


def test_the_declared_arguments_are_checked(workdir):
    config = _config(
        workdir,
        buffer={
            "explorer_input": {
                "taskset": {
                    "workflow_args": {"max_tokns": 256},  # a typo: the Args model refuses it
                    "reward_fn_args": {"format_bonus": -1.0},  # below the Field(ge=0.0)
                }
            }
        },
        data_processor={
            "experience_pipeline": {
                "operators": [{"name": "length_penalty", "args": {"free_tokens": "128"}}]
            }
        },
    )
    done = _launch(str(config), "--plugin-dir", str(workdir / "my_plugins"), "--dry-run")
    assert done.returncode == 2, done.stdout
    err = done.stderr
    assert "Traceback" not in err
    assert "workflow_args.max_tokns: unknown key 'max_tokns'; did you mean 'max_tokens'?" in err
    assert "reward_fn_args.format_bonus: must be >= 0.0" in err
    assert "operators[0].args.free_tokens: expected an integer" in err


def test_without_the_plugin_directory_the_names_say_what_to_pass(workdir):
    done = _launch(str(_config(workdir)), "--dry-run")
    assert done.returncode == 2, done.stdout
    assert "Unknown workflows name 'tagged_qa_workflow'" in done.stderr
    assert "--plugin-dir DIR" in done.stderr and "plugin directories loaded: none" in done.stderr
