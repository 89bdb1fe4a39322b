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
