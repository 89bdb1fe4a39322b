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
    assert [m.value for m in c.SyncStyle] == ["fixed", "dynamic_by_trainer", "dynamic_by_explorer"]
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
