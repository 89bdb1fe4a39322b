"""``--dlc`` (PAI-DLC) helpers: what can be checked without a DLC cluster — the environment it
needs, named when missing, and Trinity-RFT 0.6's import path that AgentScope's tuner uses."""

from __future__ import annotations

import pytest

from trinity.launcher import dlc
from trinity.launcher.errors import LaunchInputError

DLC = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "6379", "RANK": "1", "WORLD_SIZE": "3"}


def test_the_0_6_path_resolves_to_the_launchers_helpers():
    from trinity.utils.dlc_utils import (
        ClusterStatus,
        get_dlc_env_vars,
        is_running,
        setup_ray_cluster,
        stop_ray_cluster,
    )

    assert setup_ray_cluster is dlc.setup_ray_cluster
    assert stop_ray_cluster is dlc.stop_ray_cluster
    assert (ClusterStatus, get_dlc_env_vars, is_running) == (
        dlc.ClusterStatus,
        dlc.get_dlc_env_vars,
        dlc.is_running,
    )


def test_the_dlc_variables_are_read_and_a_missing_one_is_named(monkeypatch):
    for name, value in DLC.items():
        monkeypatch.setenv(name, value)
    assert dlc.dlc_env() == DLC
    assert dlc.get_dlc_env_vars() == {**DLC, "RANK": 1, "WORLD_SIZE": 3}
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setenv("RANK", "")
    with pytest.raises(LaunchInputError, match="RANK, WORLD_SIZE not set") as err:
        dlc.get_dlc_env_vars()
    assert isinstance(err.value, ValueError)  # what Trinity-RFT raises
    monkeypatch.setenv("RANK", "one")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(LaunchInputError, match="RANK must be an integer, got 'one'"):
        dlc.get_dlc_env_vars()


def test_the_cluster_status_says_running_until_the_job_finishes():
    status = dlc.ClusterStatus()
    assert status.running()
    status.finish()
    assert not status.running()
