"""The local Ray a run starts (:func:`trinity.launcher.modes.ray_session`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

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
