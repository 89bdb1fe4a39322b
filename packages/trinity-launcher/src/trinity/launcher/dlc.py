"""``--dlc``: one job on several nodes of Alibaba PAI-DLC, which runs the same command on each.

DLC starts the job's command on every node with ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK`` (the
node's rank) and ``WORLD_SIZE`` (the node count) set. :func:`setup_ray_cluster` turns those
nodes into one Ray cluster, as Trinity-RFT's ``trinity run --dlc`` does:

* Ray already running on this node: it is used (``"auto"``).
* rank 0 starts the Ray head at ``MASTER_ADDR:MASTER_PORT``, waits until ``WORLD_SIZE`` nodes
  have joined and returns the head's address: that node runs the job.
* every other rank joins the head (retried while it comes up), then waits until the job
  reports the end (:func:`stop_ray_cluster`, or the head going away) and exits with status 0:
  it lends its resources and never runs the job itself.

The job's end is a small actor (``ClusterStatus``) in the job's namespace, which both sides
create on first use. Without the DLC variables ``--dlc`` is refused (what to set is named).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Any

from trinity.launcher.errors import LaunchInputError
from trinity.utils.log import get_logger

__all__ = [
    "DLC_ENV_VARS",
    "ClusterStatus",
    "dlc_env",
    "get_dlc_env_vars",
    "is_running",
    "setup_ray_cluster",
    "stop_ray_cluster",
]

logger = get_logger(__name__)

#: what DLC sets on each node of a job
DLC_ENV_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
_STATUS_ACTOR = "cluster_status"
#: how long a worker node retries joining the head, and how often it looks for the job's end
JOIN_TIMEOUT_S = 600.0
POLL_S = 5.0


class ClusterStatus:
    """Whether the job is still running (a Ray actor the worker nodes poll)."""

    def __init__(self) -> None:
        self.finished = False

    def finish(self) -> None:
        self.finished = True

    def running(self) -> bool:
        return not self.finished


def dlc_env() -> dict[str, str]:
    """The DLC variables of this node; :class:`LaunchInputError` names the missing ones."""
    missing = [name for name in DLC_ENV_VARS if not os.environ.get(name)]
    if missing:
        raise LaunchInputError(
            f"--dlc: {', '.join(missing)} not set; DLC sets {', '.join(DLC_ENV_VARS)} on each "
            "node of a job (run without --dlc on a single machine)"
        )
    return {name: os.environ[name] for name in DLC_ENV_VARS}


def get_dlc_env_vars() -> dict[str, Any]:
    """Trinity-RFT's form of :func:`dlc_env`: ``RANK`` and ``WORLD_SIZE`` as ints; a missing
    variable is a ``ValueError`` (:class:`LaunchInputError`) naming it."""
    env: dict[str, Any] = dict(dlc_env())
    for name in ("RANK", "WORLD_SIZE"):
        try:
            env[name] = int(env[name])
        except ValueError:
            raise LaunchInputError(f"--dlc: {name} must be an integer, got {env[name]!r}") from None
    return env


def _ray(*args: str) -> subprocess.CompletedProcess[str]:
    """The ``ray`` command of this environment."""
    local = os.path.join(os.path.dirname(sys.executable), "ray")
    exe = local if os.path.exists(local) else shutil.which("ray") or "ray"
    return subprocess.run([exe, *args], capture_output=True, text=True, check=False)


def is_running() -> bool:
    """Whether ``ray status`` finds a Ray cluster to join from this node."""
    return _ray("status").returncode == 0


_ray_running = is_running


def _status_actor(namespace: str) -> Any:
    import ray

    return (
        ray.remote(ClusterStatus)
        .options(name=_STATUS_ACTOR, namespace=namespace, get_if_exists=True)
        .remote()
    )


def setup_ray_cluster(namespace: str) -> str:
    """Make this DLC job's Ray cluster (see the module docstring); returns the address the
    job joins. On a worker node this returns only by exiting the process (status 0)."""
    if _ray_running():
        return "auto"
    env = dlc_env()
    head = f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    if int(env["RANK"]) == 0:
        started = _ray(
            "start",
            "--head",
            f"--port={env['MASTER_PORT']}",
            f"--node-ip-address={env['MASTER_ADDR']}",
        )
        if started.returncode != 0:
            raise RuntimeError(f"--dlc: `ray start --head` failed:\n{started.stderr[-2000:]}")
        _wait_for_nodes(head, namespace, int(env["WORLD_SIZE"]))
        return head
    _join(head)
    _serve_until_finished(head, namespace)
    sys.exit(0)


def _wait_for_nodes(head: str, namespace: str, world_size: int) -> None:
    import ray

    ray.init(address=head, namespace=namespace, ignore_reinit_error=True)
    try:
        while (alive := sum(1 for node in ray.nodes() if node["Alive"])) < world_size:
            logger.info("--dlc: %d of %d nodes joined; waiting", alive, world_size)
            time.sleep(1)
    finally:
        ray.shutdown()


def _join(head: str) -> None:
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while (joined := _ray("start", f"--address={head}")).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"--dlc: this node could not join the Ray head at {head} within "
                f"{JOIN_TIMEOUT_S:g} s:\n{joined.stderr[-2000:]}"
            )
        logger.warning("--dlc: the Ray head at %s does not answer yet; retrying", head)
        time.sleep(POLL_S)


def _serve_until_finished(head: str, namespace: str) -> None:
    import ray

    ray.init(address=head, namespace=namespace, ignore_reinit_error=True)
    status = _status_actor(namespace)
    try:
        while ray.get(status.running.remote()):
            time.sleep(POLL_S)
    except Exception as exc:  # noqa: BLE001 - the head went away: the job is over as well
        logger.info("--dlc: the Ray head is gone (%s)", type(exc).__name__)
    logger.info("--dlc: the job finished; this node leaves")
    ray.shutdown()


def stop_ray_cluster(namespace: str) -> None:
    """Tell the worker nodes of this DLC job that it finished (they leave and exit)."""
    import ray

    if not ray.is_initialized():
        try:
            ray.init(address="auto", namespace=namespace, ignore_reinit_error=True)
        except ConnectionError:  # no cluster left to tell (the run's own Ray has stopped)
            return
    try:
        ray.get(_status_actor(namespace).finish.remote())
    finally:
        ray.shutdown()
    logger.info("--dlc: the job finished; the worker nodes are told to leave")
