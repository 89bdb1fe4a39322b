"""The local Ray a run starts (:func:`trinity.launcher.modes.ray_session`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

from ports import free_port

# Runs in a fresh interpreter: the tests' shared Ray instance must not be the one inspected.
_PROBE = textwrap.dedent(
    """
    import json, os, time

    import psutil
    import ray

    from trinity.common.config import load_config
    from trinity.launcher.modes import ray_session

    config = load_config({"model": {"model_path": "tiny"}, "checkpoint_root_dir": os.getcwd()})
    with ray_session(config):
        @ray.remote(num_cpus=0)
        class Probe:
            def env(self):
                return os.environ.get("TRINITY_LOG_LEVEL")

        probe = Probe.remote()
        log_level = ray.get(probe.env.remote(), timeout=120)
        time.sleep(1.0)  # a prestarted worker is spawned when the driver registers
        workers = [
            p.name()
            for p in psutil.Process().children(recursive=True)
            if p.name().startswith("ray::")
        ]
        print(json.dumps({"log_level": log_level, "workers": workers}))
    """
)


def test_a_local_ray_runs_only_the_workers_its_actors_need(tmp_path):
    """Ray would prestart one idle worker per CPU without the job's runtime env: no Trinity
    actor can use one, and starting them cost the first step ~0.8 s on two cores."""
    ray_tmp = tempfile.mkdtemp(prefix="tr-ray-")
    env = dict(os.environ, TRINITY_RAY_TMPDIR=ray_tmp, OMP_NUM_THREADS="1")
    env.pop("RAY_ADDRESS", None)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=tmp_path,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["log_level"], "the actor runs with the job's runtime env"
    helpers = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")
    workers = [name for name in seen["workers"] if name not in helpers]
    assert workers == ["ray::Probe"], workers


class _FlakyRay:
    """Stands for the ``ray`` module in the retry policy: its first ``fails`` starts time out
    as Ray's own node start does on a busy machine."""

    def __init__(
        self,
        fails: int,
        message: str = "The current node timed out during startup.",
        spawn: bool = False,
    ):
        self.fails, self.message, self.spawn = fails, message, spawn
        self.inits = self.shutdowns = 0
        self.started: list = []

    def init(self, **kwargs):
        self.inits += 1
        if self.spawn:  # as Ray's local start does: its node's processes, children of ours
            import subprocess
            import sys

            self.started.append(
                subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            )
        if self.inits <= self.fails:
            raise Exception(self.message)  # Ray raises a bare Exception here

    def shutdown(self):
        self.shutdowns += 1


def test_a_local_start_that_times_out_is_tried_again():
    import pytest

    from trinity.launcher.run.ray_session import STARTUP_ATTEMPTS, _init_with_retries

    ray = _FlakyRay(fails=STARTUP_ATTEMPTS - 1)
    _init_with_retries(ray, {"num_cpus": 2})
    assert (ray.inits, ray.shutdowns) == (STARTUP_ATTEMPTS, STARTUP_ATTEMPTS - 1)

    ray = _FlakyRay(fails=STARTUP_ATTEMPTS)  # never starts: the last error is raised
    with pytest.raises(Exception, match="timed out during startup"):
        _init_with_retries(ray, {"num_cpus": 2})
    assert ray.inits == STARTUP_ATTEMPTS

    ray = _FlakyRay(fails=1)  # joining a cluster: its failure is about that cluster
    with pytest.raises(Exception, match="timed out"):
        _init_with_retries(ray, {"address": "10.0.0.1:6379"})
    assert ray.inits == 1

    ray = _FlakyRay(fails=1, message="GCS address is invalid")  # another error: not retried
    with pytest.raises(Exception, match="GCS"):
        _init_with_retries(ray, {"num_cpus": 2})
    assert (ray.inits, ray.shutdowns) == (1, 0)


def test_a_failed_local_start_leaves_no_process_running():
    """The processes a timed-out start left (Ray's GCS, raylet, dashboard...) are stopped
    before the next attempt; the successful attempt's stay."""
    from trinity.launcher.run.ray_session import _init_with_retries

    ray = _FlakyRay(fails=1, spawn=True)
    try:
        _init_with_retries(ray, {"num_cpus": 2})
        failed, started = ray.started
        assert failed.wait(timeout=10) is not None  # stopped
        assert started.poll() is None  # still running
    finally:
        for proc in ray.started:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------- a Ray head that is not there


def test_ray_addresses_name_the_port_the_probe_connects_to():
    from trinity.launcher.run.ray_session import _host_port

    assert _host_port("auto") is None and _host_port("local") is None
    assert _host_port("127.0.0.1:6399") == ("127.0.0.1", 6399)
    assert _host_port("head.example") == ("head.example", 6379)
    assert _host_port("ray://head.example") == ("head.example", 10001)
    assert _host_port("ray://head.example:2345") == ("head.example", 2345)
    assert _host_port("[::1]:6380") == ("::1", 6380)


def test_a_dead_head_is_refused_at_once_and_a_live_port_passes():
    """Without the probe, ``ray.init`` to a dead address retried for many minutes, silent."""
    import socket
    import time

    import pytest

    from trinity.launcher.errors import LaunchInputError
    from trinity.launcher.run.ray_session import RayHeadUnreachableError, check_head_reachable

    port = free_port()
    start = time.monotonic()
    with pytest.raises(RayHeadUnreachableError) as info:
        check_head_reachable(f"127.0.0.1:{port}", "RAY_ADDRESS")
    assert time.monotonic() - start < 6
    assert isinstance(info.value, LaunchInputError)  # exit 2, no traceback
    message = str(info.value)
    assert f"RAY_ADDRESS is '127.0.0.1:{port}'" in message and "refused" in message.lower()
    assert f"ray start --head --port={port}" in message
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        check_head_reachable(f"127.0.0.1:{listener.getsockname()[1]}")  # no error


def test_a_run_told_to_join_a_dead_head_exits_2_within_seconds(tmp_path):
    """The issue's case: a job whose Ray head is gone says so and exits, instead of retrying
    the address for minutes with nothing on the console."""
    import time

    from stand_in_model import small_config

    config = small_config(
        tmp_path,
        repeat_times=2,
        head="mode: explore",
        buffer="total_steps: 2",
        tail="explorer:\n  rollout_model:\n    engine_type: transformers",
    )
    port = free_port()
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    start = time.monotonic()
    out = subprocess.run(
        [
            str(os.path.join(os.path.dirname(sys.executable), "trinity-launch")),
            str(config),
            f"cluster.ray_address=127.0.0.1:{port}",
            "buffer.explorer_input.taskset.format.prompt_key=question",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    took = time.monotonic() - start
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"no Ray head answers at 127.0.0.1:{port}" in out.stderr
    assert "cluster.ray_address" in out.stderr and "Traceback" not in out.stderr
    assert took < 60, took  # the CLI's own start-up included; Ray would have retried minutes
