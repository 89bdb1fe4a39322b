"""``validate_config`` / ``trinity-launch --dry-run``: every problem of a file in one answer,
component arguments of workflows, reward functions and operators checked, nothing heavy
started (no Ray, no engine, no model).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from stand_in_model import stand_in_model

from trinity.common.config import ConfigError
from trinity.launcher.validation import validate_config

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "examples" / "quickstart.yaml"
DATA = "examples/data/arithmetic"


@pytest.fixture
def at_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    for var in ("TRINITY_CHECKPOINT_ROOT_DIR", "TRINITY_QUICKSTART_MODEL", "TRINITY_PLUGIN_DIRS"):
        monkeypatch.delenv(var, raising=False)


def base(tmp_path: Path, **extra: object) -> dict:
    data: dict = {
        "mode": "both",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {
            "model_path": stand_in_model(tmp_path / "model"),
            "max_prompt_tokens": 16,
            "max_response_tokens": 8,
        },
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {
            "batch_size": 2,
            "explorer_input": {
                "taskset": {
                    "path": DATA,
                    "default_workflow_type": "arithmetic_workflow",
                    "default_reward_fn_type": "arithmetic_reward",
                }
            },
        },
        "synchronizer": {"sync_method": "checkpoint"},
    }
    for key, value in extra.items():
        section = data.setdefault(key, {})
        if isinstance(value, dict) and isinstance(section, dict):
            section.update(value)
        else:
            data[key] = value
    return data


def paths_of(data: object) -> set[str]:
    with pytest.raises(ConfigError) as info:
        validate_config(data)  # type: ignore[arg-type]
    return {issue.path for issue in info.value.errors}


def test_the_base_config_is_valid(tmp_path: Path, at_repo: None) -> None:
    validate_config(base(tmp_path))


def test_schema_and_component_argument_problems_come_together(
    tmp_path: Path, at_repo: None
) -> None:
    path = tmp_path / "bad.yaml"
    data = base(tmp_path)
    data["algorithm"].update(
        {"optimizer": {"lr": float("nan")}, "policy_loss_fn_args": {"clip_rnage": 0.2}}
    )
    data["buffer"]["batch_size"] = True
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        validate_config(path)
    issues = {i.path: i for i in info.value.errors}
    assert set(issues) == {
        "algorithm.optimizer.lr",
        "algorithm.policy_loss_fn_args.clip_rnage",
        "buffer.batch_size",
    }
    assert (
        "did you mean 'clip_range'?" in issues["algorithm.policy_loss_fn_args.clip_rnage"].message
    )
    assert "finite" in issues["algorithm.optimizer.lr"].message
    assert all(i.file == str(path) for i in info.value.errors)


def test_argument_run_level_and_name_problems_come_together(tmp_path: Path, at_repo: None) -> None:
    data = base(tmp_path)
    data["algorithm"]["kl_loss_fn_args"] = {"kl_coef": "0.1"}
    data["buffer"]["explorer_input"]["taskset"]["path"] = "./no/such/data"
    data["buffer"]["explorer_input"]["eval_tasksets"] = [
        {"path": DATA, "default_workflow_type": "arithmetic_workflw"}
    ]
    assert paths_of(data) == {
        "algorithm.kl_loss_fn_args.kl_coef",
        "buffer.explorer_input.taskset.path",
        "buffer.explorer_input.eval_tasksets[0].default_workflow_type",
    }


def test_an_unknown_algorithm_type_is_a_located_config_error(tmp_path: Path, at_repo: None) -> None:
    data = base(tmp_path)
    data["algorithm"]["algorithm_type"] = "grp"
    assert paths_of(data) == {"algorithm.algorithm_type"}


def test_reward_function_arguments_are_checked(tmp_path: Path, at_repo: None) -> None:
    data = base(tmp_path)
    data["buffer"]["explorer_input"]["taskset"]["reward_fn_args"] = {"partial_credt": True}
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    [issue] = info.value.errors
    assert issue.path == "buffer.explorer_input.taskset.reward_fn_args.partial_credt"
    assert "did you mean 'partial_credit'?" in issue.message
    data["buffer"]["explorer_input"]["taskset"]["reward_fn_args"] = {"partial_credit": "yes"}
    assert paths_of(data) == {"buffer.explorer_input.taskset.reward_fn_args.partial_credit"}


def test_experience_operator_names_and_arguments_are_checked(tmp_path: Path, at_repo: None) -> None:
    data = base(tmp_path)
    data["data_processor"] = {
        "experience_pipeline": {
            "operators": [
                {"name": "reward_filter", "args": {"threshold": "0.5"}},
                {"name": "reward_std_filtr", "args": {}},
                {"name": "reward_filter", "args": {"treshold": 0.5}},
            ]
        }
    }
    assert paths_of(data) == {
        "data_processor.experience_pipeline.operators[0].args.threshold",
        "data_processor.experience_pipeline.operators[1].name",
        "data_processor.experience_pipeline.operators[2].args.treshold",
    }


HEAVY = ("ray", "vllm", "verl", "transformers", "sglang", "tinker")


def test_dry_run_starts_no_ray_and_loads_no_model(at_repo: None, tmp_path: Path) -> None:
    """Structural, not timed: after ``trinity-launch X --dry-run`` in a fresh interpreter, none
    of Ray, the engines or transformers has been imported (so no cluster, no model)."""
    code = textwrap.dedent(
        f"""
        import json, sys
        from trinity.launcher.cli import launch_main
        rc = launch_main([{str(QUICKSTART)!r}, "--dry-run"])
        print(json.dumps({{"rc": rc, "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRINITY_")}
    # scripts/quickstart.sh builds the model before it launches; a stand-in here
    env["TRINITY_QUICKSTART_MODEL"] = stand_in_model(tmp_path / "tiny-model")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "Dry run: the config is valid" in done.stdout
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"rc": 0, "heavy": []}


def test_the_component_docs_are_generated_from_the_declarations() -> None:
    """docs/components.md is what the declarations say (regenerate it after changing one)."""
    from trinity.launcher.component_docs import render

    page = (REPO / "docs" / "components.md").read_text(encoding="utf-8")
    assert page == render(), "run: python -m trinity.launcher.component_docs > docs/components.md"
    assert "| `clip_ratio_c` | a number or null | `3.0` | > 1.0 |" in page


def test_the_studio_form_help_reads_the_same_declaration() -> None:
    from trinity.algorithm.resolve import component_registry
    from trinity.common.config import args_model
    from trinity.manager.config_registry._common import args_help

    registry = component_registry("advantage_fn")
    text = args_help(registry, "grpo")
    for name in args_model(registry.get("grpo")).model_fields:
        assert f"- `{name}` (" in text
    assert "`std_cal_level` (one of 'group', 'batch', 'none'; default 'group')" in text
    assert args_help(registry, "no-such-advantage") == ""


def test_selector_and_priority_function_names_are_checked(tmp_path: Path, at_repo: None) -> None:
    data = base(tmp_path)
    data["buffer"]["explorer_input"]["taskset"]["data_selector"] = {"selector_type": "shufle"}
    data["buffer"]["trainer_input"] = {
        "experience_buffer": {"replay_buffer": {"enable": True, "priority_fn": "linear_decy"}}
    }
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    issues = {i.path: i.message for i in info.value.errors}
    assert set(issues) == {
        "buffer.explorer_input.taskset.data_selector.selector_type",
        "buffer.trainer_input.experience_buffer.replay_buffer.priority_fn",
    }
    assert "shuffle" in issues["buffer.explorer_input.taskset.data_selector.selector_type"]
    assert (
        "linear_decay" in issues["buffer.trainer_input.experience_buffer.replay_buffer.priority_fn"]
    )


def test_problems_found_after_loading_get_their_line(tmp_path: Path, at_repo: None) -> None:
    path = tmp_path / "bad.yaml"
    data = base(tmp_path)
    data["algorithm"]["entropy_loss_fn_args"] = {"entropy_cof": 0.1}
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        validate_config(path)
    [issue] = info.value.errors
    lines = path.read_text(encoding="utf-8").splitlines()
    assert issue.line is not None and "entropy_cof" in lines[issue.line - 1]
    assert f"{path}:{issue.line}: algorithm.entropy_loss_fn_args.entropy_cof" in str(info.value)
