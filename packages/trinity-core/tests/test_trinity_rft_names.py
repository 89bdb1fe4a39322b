"""Core names code written for Trinity-RFT imports (docs/compat.md)."""

from __future__ import annotations

import pytest

from trinity.common.config import RewardShapingConfig
from trinity.common.constants import OpType
from trinity.utils.monitor import MONITOR, Monitor, gather_metrics
from trinity.utils.registry import Registry


def test_reward_shaping_config_normalises_op_type():
    assert RewardShapingConfig("q", "mul", 2).op_type is OpType.MUL
    assert RewardShapingConfig("q").op_type == "ADD"  # a str enum: YAML names compare equal
    with pytest.raises(ValueError, match=r"op_type is 'POW'; expected one of"):
        RewardShapingConfig("q", "POW")


def test_gather_metrics_is_mean_max_min_per_key():
    metrics = gather_metrics([{"a": 1, "b": True}, {"a": 3, "s": "text"}, {}], "p")
    assert metrics == {
        "p/a/mean": 2.0,
        "p/a/max": 3.0,
        "p/a/min": 1.0,
        "p/b/mean": 1.0,
        "p/b/max": 1.0,
        "p/b/min": 1.0,
    }
    assert gather_metrics([], "p") == {}


def test_monitor_contract_and_registry():
    class Sink:
        def log(self, metrics, step):
            pass

        def close(self):
            pass

    assert isinstance(Sink(), Monitor) and issubclass(Sink, Monitor)
    assert MONITOR.name == "monitor" and MONITOR.entry_point_group == "trinity.monitor"


def test_default_mapping_lists_registered_names():
    reg: Registry[type] = Registry("compat_probe", entry_point_group="trinity.compat_probe_none")

    @reg.register_module("thing")
    class Thing:
        pass

    assert reg._default_mapping == {"thing": f"{__name__}.{Thing.__qualname__}"}


def test_constants_enums_of_trinity_rft():
    from trinity.common import constants as c

    # names and values as Trinity-RFT's trinity.common.constants
    assert [m.value for m in c.StorageType][:3] == ["sql", "queue", "file"]
    assert {m.name for m in c.SyncMethod} >= {"NCCL", "CHECKPOINT"}
    assert [m.value for m in c.SyncStyle] == [
        "fixed",
        "dynamic_by_trainer",
        "dynamic_by_explorer",
        "fully_async",
    ]
    assert [m.value for m in c.PromptType] == ["messages", "chatpair", "plaintext"]
    assert (c.TaskType.EXPLORE.value, c.TaskType.EVAL.value) == (0, 1)
    assert c.RunningStatus("require_sync") is c.RunningStatus.REQUIRE_SYNC
    assert c.DataProcessorPipelineType.TASK.value == "task_pipeline"
    assert (c.EXPLORER_NAME, c.TRAINER_NAME) == ("explorer", "trainer")
    # case-insensitive names and values (Trinity-RFT's CaseInsensitiveEnum)
    assert c.StorageType.sql is c.StorageType["Sql"] is c.StorageType("SQL") is c.StorageType.SQL
    assert c.MonitorType("WandB") is c.MonitorType.WANDB
    # Trinity-RFT's deprecated sync method names
    assert c.SyncMethod("online") is c.SyncMethod.NCCL
    assert c.SyncMethod("Offline") is c.SyncMethod.CHECKPOINT
    # str enums: a member and the config string it stands for are interchangeable
    assert c.StorageType.QUEUE == "queue" and {"queue": 1}[c.StorageType.QUEUE] == 1
    assert f"{c.SyncStyle.FIXED}" == "fixed"
    with pytest.raises(ValueError):
        c.StorageType("tape")
    with pytest.raises(AttributeError, match="StorageType has no member 'tape'; members: SQL"):
        c.StorageType.tape  # noqa: B018
    assert not hasattr(c.StorageType, "tape")


def test_constants_of_trinity_rft_0_6():
    """Every public name of Trinity-RFT 0.6's ``trinity.common.constants``, with its values."""
    from trinity.common import constants as c

    assert c.CHECKPOINT_ROOT_DIR_ENV_VAR == "TRINITY_CHECKPOINT_ROOT_DIR"
    assert c.PREVIOUS_STAGE_CHECKPOINT_DIR_ENV_VAR == "TRINITY_PREV_STAGE_CKPT_DIR"
    assert c.MODEL_PATH_ENV_VAR == "TRINITY_MODEL_PATH"
    assert c.TASKSET_PATH_ENV_VAR == "TRINITY_TASKSET_PATH"
    assert c.BUFFER_PATH_ENV_VAR == "TRINITY_BUFFER_PATH"
    assert c.PLUGIN_DIRS_ENV_VAR == "TRINITY_PLUGIN_DIRS"
    assert c.LOG_DIR_ENV_VAR == "TRINITY_LOG_DIR"
    assert c.LOG_LEVEL_ENV_VAR == "TRINITY_LOG_LEVEL"
    assert c.LOG_NODE_IP_ENV_VAR == "TRINITY_LOG_NODE_IP"
    assert c.MAX_EXP_BYTES_ENV_VAR == "TRINITY_MAX_EXP_SIZE"
    assert c.DEBUG_NAMESPACE == "TRINITY_DEBUG_NAMESPACE"
    assert c.MAX_MODEL_LEN == 4096
    assert c.SaveStrategy("SINGLE_NODE") is c.SaveStrategy.single_node
    assert [m.value for m in c.SaveStrategy] == [
        "single_thread",
        "single_process",
        "single_node",
        "unrestricted",
    ]
    # 0.6's names of the dynamic sync styles, as names and as values
    assert c.SyncStyle.EXPLORER_DRIVEN is c.SyncStyle.DYNAMIC_BY_EXPLORER
    assert c.SyncStyle("trainer_driven") is c.SyncStyle.DYNAMIC_BY_TRAINER
    assert c.SyncStyle["Explorer_Driven"] is c.SyncStyle.DYNAMIC_BY_EXPLORER
    assert c.SyncMethod["online"] is c.SyncMethod.NCCL
    assert issubclass(c.SyncMethodEnumMeta, c.CaseInsensitiveEnumMeta)
    assert issubclass(c.SyncStyleEnumMeta, c.CaseInsensitiveEnumMeta)


def test_one_definition_of_each_environment_variable():
    """The config, the logger and the plugin loader read the names constants.py defines."""
    from trinity.common import constants as c
    from trinity.common.config import _base
    from trinity.utils import log, plugin_loader

    assert plugin_loader.PLUGIN_DIRS_ENV is c.PLUGIN_DIRS_ENV_VAR
    assert log.LOG_LEVEL_ENV_VAR is c.LOG_LEVEL_ENV_VAR
    for name in (
        "PLUGIN_DIRS_ENV_VAR",
        "LOG_DIR_ENV_VAR",
        "LOG_LEVEL_ENV_VAR",
        "LOG_NODE_IP_ENV_VAR",
    ):
        assert getattr(_base, name) is getattr(c, name)


def test_a_config_takes_the_0_6_sync_style_members():
    from trinity.common.config import SynchronizerConfig
    from trinity.common.constants import SyncStyle

    sync = SynchronizerConfig(sync_style=SyncStyle.EXPLORER_DRIVEN)
    assert sync.sync_style == "dynamic_by_explorer"
