"""The Studio's registry (the guide's CONFIG_GENERATORS API) and its Streamlit-free plumbing."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("streamlit")

from trinity.common.config import ConfigIssue  # noqa: E402
from trinity.manager.config_io import (  # noqa: E402
    YAMLLoadError,
    deep_merge,
    get_path,
    key_for_path,
    parse_yaml,
    pop_path,
    read_metrics,
    reward_curve,
    set_path,
    to_yaml,
    validate,
)
from trinity.manager.config_registry.config_registry import ConfigRegistry  # noqa: E402
from trinity.utils.registry import DuplicateModuleError, UnknownModuleError  # noqa: E402


def test_register_config_binds_the_key_and_records_defaults():
    registry = ConfigRegistry("test_generators")
    seen = {}

    @registry.register_config(default_value=96, other_configs={"_per_gpu": 16})
    def set_train_batch_size(**kwargs):
        seen.update(kwargs)

    registry.get("train_batch_size")()
    assert seen == {"key": "train_batch_size"}
    assert registry.default_config == {"train_batch_size": 96, "_per_gpu": 16}

    @registry.register_check()
    def check_train_batch_size(unfinished_fields: set, key: str):
        unfinished_fields.add(key)

    fields: set = set()
    registry.get_check_func("train_batch_size")(unfinished_fields=fields)
    assert fields == {"train_batch_size"}
    assert registry.get_check_func("_per_gpu") is None


def test_visibility_hides_an_entry():
    registry = ConfigRegistry("test_generators")
    shown = {"on": False}

    @registry.register_config(default_value=1, visible=lambda: shown["on"])
    def set_thing(**kwargs):
        pass

    assert registry.get("thing") is None
    shown["on"] = True
    assert registry.get("thing") is not None


def test_names_are_checked_and_duplicates_refused():
    registry = ConfigRegistry("test_generators")
    with pytest.raises(ValueError, match="must start with 'set_'"):

        @registry.register_config(default_value=1)
        def thing(**kwargs):
            pass

    @registry.register_config(default_value=1, other_configs={"_shared": 0})
    def set_first(**kwargs):
        pass

    with pytest.raises(DuplicateModuleError, match="already taken"):

        @registry.register_config(default_value=2, other_configs={"_shared": 1})
        def set_second(**kwargs):
            pass

    with pytest.raises(ValueError, match="no config entry 'missing'"):

        @registry.register_check()
        def check_missing(unfinished_fields, key):
            pass

    with pytest.raises(UnknownModuleError):
        registry.get("nothing_here")


def test_paths_merge_and_pop():
    data: dict = {}
    set_path(data, "buffer.explorer_input.taskset.path", "x")
    assert get_path(data, "buffer.explorer_input.taskset.path") == "x"
    assert pop_path(data, "buffer.explorer_input.taskset.path") == "x"
    assert data == {}  # emptied parents go too
    merged = deep_merge({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": 3}, "l": [2]})
    assert merged == {"a": {"b": 3, "c": 2}, "l": [2]}
    assert get_path({"l": [{"p": 1}]}, "l[0].p") == 1


def test_issue_paths_map_to_page_keys():
    paths = {"taskset_path": "buffer.explorer_input.taskset.path", "model_path": "model.model_path"}
    keys = set(paths)
    assert key_for_path("model.model_path", paths, keys) == "model_path"
    assert key_for_path("buffer.explorer_input.taskset", paths, keys) == "taskset_path"
    assert key_for_path("model.model_path.x", paths, keys) == "model_path"
    assert key_for_path("model.model_path", paths, {"taskset_path"}) is None
    assert key_for_path("", paths, keys) is None


def test_yaml_parsing_errors_name_the_problem():
    with pytest.raises(YAMLLoadError, match="line 1"):
        parse_yaml("a: [", "x.yaml")
    with pytest.raises(YAMLLoadError, match="must be a mapping"):
        parse_yaml("- 1", "x.yaml")
    assert parse_yaml("") == {}
    assert to_yaml({"model": {}, "mode": "both"}).startswith("mode: both")


def test_validate_reports_located_issues(tmp_path):
    report = validate({"mode": "both", "checkpoint_root_dir": str(tmp_path)})
    assert not report.ok
    assert "model.model_path" in [i.path for i in report.issues]
    assert all(isinstance(i, ConfigIssue) for i in report.issues)
    report = validate({"algorithm": {"algorithm_type": "grpo", "policy_loss_fn": "nope"}})
    paths = [i.path for i in report.issues]
    # the unknown name comes together with the run-level problems, not instead of them
    assert paths.count("algorithm.policy_loss_fn") == 1 and "model.model_path" in paths


def test_metrics_reader_skips_partial_lines(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "rollout/reward/mean": 0.5}\n{"step": 2, "rollout/reward/mean": 1}\n{"st'
    )
    rows = read_metrics(str(tmp_path))
    assert [r["step"] for r in rows] == [1, 2]
    assert reward_curve(rows) == {"rollout/reward/mean": [(1, 0.5), (2, 1.0)]}
    assert read_metrics(str(tmp_path / "missing")) == []


def test_trinity_studio_refuses_a_missing_plugin_dir(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trinity.launcher.cli",
            "studio",
            "--plugin-dir",
            str(tmp_path / "x"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "no such directory" in result.stderr
