"""The value sets of ``monitor.monitor_type``, ``storage_type`` and ``engine_type`` belong to
their registries (issue 37): the schema accepts the built-in names always (``trinity-core``
alone still validates a Trinity-RFT config) and, besides them, whatever is registered in
:data:`trinity.utils.monitor.MONITOR`, :data:`trinity.common.storage.READER` / ``WRITER`` and
:data:`trinity.common.engines.ENGINES` when the config is validated -- a plugin's name included.
An unknown name is refused naming the field, the value and every registered name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, get_args

import pytest

from trinity.common.config import (
    ConfigError,
    EngineType,
    MonitorType,
    StorageConfig,
    StorageTypeName,
    load_config,
)
from trinity.common.engines import BUILTIN_ENGINE_TYPES, ENGINES
from trinity.common.storage import BUILTIN_STORAGE_TYPES, READER, WRITER
from trinity.utils.monitor import BUILTIN_MONITOR_TYPES, MONITOR
from trinity.utils.registry import Registry


def error_of(data: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(data)
    return info.value


def issue_at(error: ConfigError, path: str):
    matches = [issue for issue in error.errors if issue.path == path]
    assert matches, f"no issue at {path!r}; got {[str(i) for i in error.errors]}"
    return matches[0]


def monitor(name: str) -> dict[str, Any]:
    return {"monitor": {"monitor_type": name}}


def experience_storage(name: str) -> dict[str, Any]:
    return {"buffer": {"trainer_input": {"experience_buffer": {"storage_type": name}}}}


def engine(name: str) -> dict[str, Any]:
    return {"explorer": {"rollout_model": {"engine_type": name}}}


class PluginMonitor:
    def __init__(self, config: Any) -> None:
        self.config = config

    def log(self, metrics: dict[str, Any], step: int) -> None:
        pass

    def close(self) -> None:
        pass


class PluginReader:
    def __init__(self, config: Any) -> None:
        self.config = config


class PluginWriter:
    def __init__(self, config: Any) -> None:
        self.config = config


class PluginEngine:
    def __init__(self, settings: Any) -> None:
        self.settings = settings


@pytest.fixture
def registered() -> Iterator[None]:
    """What a plugin directory would register (user code: defined in this test module)."""
    entries = [
        (MONITOR, "Plugin_Monitor", PluginMonitor),
        (READER, "plugin_storage", PluginReader),
        (WRITER, "plugin_storage", PluginWriter),
        (WRITER, "write_only_storage", PluginWriter),
        (ENGINES, "plugin_engine", PluginEngine),
    ]
    for registry, name, cls in entries:
        registry.register_module(name, cls)
    try:
        yield
    finally:
        for registry, name, _ in entries:
            registry.unregister(name)


@pytest.fixture
def nothing_installed(monkeypatch) -> None:
    """As with ``trinity-core`` alone: no package advertises a monitor, storage or engine."""
    for registry in (MONITOR, READER, WRITER, ENGINES):
        monkeypatch.setattr(registry, "_entry_points", {})
        monkeypatch.setattr(registry, "_modules", {})
        monkeypatch.setattr(registry, "_tiers", {})


def test_the_types_stay_the_trinity_rft_literals_of_the_built_in_names() -> None:
    # trinity.common.config.MonitorType & co. keep their import path and their Literal (forms
    # list the built-ins from it); the registries' built-in tuples are the same names
    assert get_args(get_args(MonitorType)[0]) == BUILTIN_MONITOR_TYPES
    assert set(get_args(get_args(StorageTypeName)[0])) == set(BUILTIN_STORAGE_TYPES)
    assert get_args(get_args(EngineType)[0]) == BUILTIN_ENGINE_TYPES


def test_built_in_names_validate_with_no_package_installed(nothing_installed) -> None:
    assert MONITOR.list() == [] and ENGINES.list() == []
    config = load_config(
        {
            "monitor": {"monitor_type": "WandB"},
            "explorer": {"rollout_model": {"engine_type": "sglang"}},
            "buffer": {
                "explorer_input": {"taskset": {"storage_type": "file"}},
                "trainer_input": {"experience_buffer": {"storage_type": " SQL "}},
            },
        }
    )
    assert config.monitor.monitor_type == "wandb"
    assert config.explorer.rollout_model.engine_type == "sglang"
    assert config.buffer.trainer_input.experience_buffer.storage_type == "sql"
    for name in BUILTIN_MONITOR_TYPES:
        assert load_config(monitor(name)).monitor.monitor_type == name
    for name in BUILTIN_ENGINE_TYPES:
        assert load_config(engine(name)).explorer.rollout_model.engine_type == name
    for name in BUILTIN_STORAGE_TYPES:  # the section alone: mode both rewrites a 'file' buffer
        assert StorageConfig.model_validate({"storage_type": name}).storage_type == name


def test_registered_names_validate_case_insensitively_in_their_registered_spelling(
    registered,
) -> None:
    assert load_config(monitor("plugin_monitor")).monitor.monitor_type == "Plugin_Monitor"
    assert load_config(monitor(" PLUGIN_MONITOR")).monitor.monitor_type == "Plugin_Monitor"
    storage = load_config(experience_storage("Plugin_Storage")).buffer.trainer_input
    assert storage.experience_buffer.storage_type == "plugin_storage"
    # a storage with only a writer is a name too (get_buffer_reader says it has no reader)
    taskset = load_config(
        {"buffer": {"explorer_input": {"taskset": {"storage_type": "write_only_storage"}}}}
    )
    assert taskset.buffer.explorer_input.taskset.storage_type == "write_only_storage"
    rollout = load_config(engine("plugin_engine")).explorer.rollout_model
    assert rollout.engine_type == "plugin_engine"


def test_a_name_is_accepted_only_while_it_is_registered() -> None:
    MONITOR.register_module("short_lived_monitor", PluginMonitor)
    try:
        assert load_config(monitor("short_lived_monitor")).monitor.monitor_type
    finally:
        MONITOR.unregister("short_lived_monitor")
    issue_at(error_of(monitor("short_lived_monitor")), "monitor.monitor_type")


@pytest.mark.parametrize(
    "data, path, value, known",
    [
        (monitor("plugin_monitr"), "monitor.monitor_type", "plugin_monitr", "Plugin_Monitor"),
        (
            experience_storage("plugin_storag"),
            "buffer.trainer_input.experience_buffer.storage_type",
            "plugin_storag",
            "plugin_storage",
        ),
        (
            engine("plugin_engin"),
            "explorer.rollout_model.engine_type",
            "plugin_engin",
            "plugin_engine",
        ),
    ],
)
def test_an_unknown_name_lists_the_registered_ones_and_the_closest(
    registered, data, path, value, known
) -> None:
    issue = issue_at(error_of(data), path)
    assert issue.kind == "invalid_choice" and issue.value == value
    assert f"invalid value {value!r}; allowed values: " in issue.message
    assert repr(known) in issue.message
    assert issue.message.endswith(f"did you mean {known!r}?")
    assert issue.message.count("did you mean") == 1


@pytest.mark.parametrize(
    "data, path, builtins",
    [
        (monitor("tensorbord"), "monitor.monitor_type", BUILTIN_MONITOR_TYPES),
        (engine("vlm"), "explorer.rollout_model.engine_type", BUILTIN_ENGINE_TYPES),
        (
            experience_storage("sqll"),
            "buffer.trainer_input.experience_buffer.storage_type",
            BUILTIN_STORAGE_TYPES,
        ),
    ],
)
def test_a_misspelt_built_in_is_suggested_once(registered, data, path, builtins) -> None:
    issue = issue_at(error_of(data), path)
    assert issue.kind == "invalid_choice"
    assert all(repr(name) in issue.message for name in builtins)
    assert issue.message.count("did you mean") == 1


def test_a_non_string_is_refused_with_the_allowed_values() -> None:
    issue = issue_at(error_of(monitor(3)), "monitor.monitor_type")  # type: ignore[arg-type]
    assert issue.kind == "invalid_choice" and "'tensorboard'" in issue.message


def test_registries_live_in_core_with_entry_point_groups() -> None:
    groups = {r.name: r.entry_point_group for r in (MONITOR, READER, WRITER, ENGINES)}
    assert groups == {
        "monitor": "trinity.monitor",
        "buffer_reader": "trinity.buffer_reader",
        "buffer_writer": "trinity.buffer_writer",
        "engines": "trinity.engines",
    }
    assert all(isinstance(r, Registry) for r in (MONITOR, READER, WRITER, ENGINES))


def test_registry_origin_names_a_class_without_importing_it() -> None:
    registry: Registry[type] = Registry("origin_test", entry_point_group="trinity.no_such_group")
    registry.register_module("plugin", PluginEngine)
    assert registry.origin("plugin") == f"{__name__}:PluginEngine"
    with pytest.raises(KeyError, match="Unknown origin_test name 'nope'"):
        registry.origin("nope")
