"""The Ray a run uses: joined when one is running or named, else started for the run."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator
from typing import Any, Optional
from urllib.parse import urlsplit

from trinity.common.config import Config
from trinity.launcher.errors import LaunchInputError
from trinity.launcher.logs import worker_runtime_env
from trinity.utils.log import get_logger

__all__ = [
    "HEAD_PROBE_TIMEOUT_S",
    "RAY_TMPDIR_ENV",
    "RayHeadUnreachableError",
    "check_head_reachable",
    "ray_init_kwargs",
    "ray_session",
]

logger = get_logger(__name__)

#: Set it to choose Ray's session directory (``_temp_dir``) when a local Ray is started.
RAY_TMPDIR_ENV = "TRINITY_RAY_TMPDIR"


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def ray_init_kwargs(config: Config) -> dict[str, Any]:
    """Arguments of ``ray.init`` for ``config``.

    ``cluster.ray_address`` other than ``auto`` joins that cluster; ``auto`` joins the cluster
    in ``RAY_ADDRESS`` when set, else starts a local Ray with this machine's CPUs (its session
    directory in ``TRINITY_RAY_TMPDIR`` when set, no idle workers prestarted). Every Ray
    process gets the run's environment and log set-up
    (:func:`trinity.launcher.logs.worker_runtime_env`); worker output is sent to the driver,
    which writes it to the run's log file (the console with ``--verbose``).
    """
    kwargs: dict[str, Any] = {
        "namespace": config.ray_namespace or None,
        "runtime_env": worker_runtime_env(config),
        "log_to_driver": True,
    }
    address = (config.cluster.ray_address or "auto").strip()
    if address != "auto":
        kwargs["address"] = address
    elif os.environ.get("RAY_ADDRESS"):
        kwargs["address"] = os.environ["RAY_ADDRESS"]
    else:
        kwargs["num_cpus"] = _cpu_count()
        kwargs["include_dashboard"] = False
        # Ray prestarts one idle worker per CPU for the first driver, with no runtime env; every
        # Trinity actor runs with the job's runtime env, so none of them could be used, and their
        # start-up took ~0.8 s of the two cores on the way to the first step (quickstart).
        kwargs["_system_config"] = {"prestart_worker_first_driver": False}
        tmp = os.environ.get(RAY_TMPDIR_ENV)
        if tmp:
            kwargs["_temp_dir"] = os.path.abspath(tmp)
    return kwargs


@contextlib.contextmanager
def ray_session(config: Config) -> Iterator[None]:
    """Ray for the duration of a run: started (and shut down) here unless the caller has
    already initialised it (tests, notebooks), in which case it is used and left running."""
    import ray

    if ray.is_initialized():
        yield
        return
    kwargs = ray_init_kwargs(config)
    if "address" in kwargs:
        source = (
            "cluster.ray_address"
            if (config.cluster.ray_address or "auto").strip() != "auto"
            else "RAY_ADDRESS"
        )
        check_head_reachable(kwargs["address"], source)
    logger.info(
        "Starting Ray (%s)",
        f"joining {kwargs['address']}" if "address" in kwargs else f"{kwargs['num_cpus']} CPUs",
    )
    _init_with_retries(ray, kwargs)
    try:
        yield
    finally:
        ray.shutdown()


#: how long the TCP probe of a Ray head (:func:`check_head_reachable`) waits for an answer
HEAD_PROBE_TIMEOUT_S = 5.0
#: Ray's default ports: the GCS of ``host:port`` addresses, the client server of ``ray://``
_GCS_PORT = 6379
_CLIENT_PORT = 10001


class RayHeadUnreachableError(LaunchInputError):
    """The Ray cluster a run was told to join does not answer (exit status 2, no traceback)."""


def _host_port(address: str) -> Optional[tuple[str, int]]:
    """``(host, port)`` of a Ray address (``None``: one Ray resolves itself, ``auto`` or
    ``local``)."""
    address = address.strip()
    if address in ("auto", "local", ""):
        return None
    if "://" in address:
        parts = urlsplit(address)
        default = _CLIENT_PORT if parts.scheme == "ray" else _GCS_PORT
        return parts.hostname or "127.0.0.1", parts.port or default
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return address.strip("[]"), _GCS_PORT
    return host.strip("[]") or "127.0.0.1", int(port)


def check_head_reachable(
    address: str, source: str = "cluster.ray_address", timeout: float = HEAD_PROBE_TIMEOUT_S
) -> None:
    """Refuse, within ``timeout`` seconds, an address where no Ray head listens.

    ``ray.init(address=...)`` to a head that is gone (or never came up) does not fail: its
    GCS client retries for many minutes, printing nothing on the run's console, and the run
    cannot be stopped by SIGTERM meanwhile. A TCP connection to the head's port answers at once
    (refused) or not at all (timeout), so that case is told apart before Ray is asked.

    Raises:
        RayHeadUnreachableError: nothing accepts a connection at the address's host and port;
            the message names the address, where it came from and what to do.
    """
    target = _host_port(address)
    if target is None:
        return
    host, port = target
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as exc:
        reason = (
            f"no answer within {timeout:g} s"
            if isinstance(exc, socket.timeout)
            else (exc.strerror or str(exc))
        )
    raise RayHeadUnreachableError(
        f"{source} is {address!r}, but no Ray head answers at {host}:{port} ({reason}): the "
        "cluster is down or the address is wrong. Start it (`ray start "
        f"--head --port={port}`), correct the address, or set cluster.ray_address: auto with "
        "RAY_ADDRESS unset to start a local Ray for this run"
    )


#: how often a local Ray start that timed out is tried again
STARTUP_ATTEMPTS = 3
_STARTUP_TIMEOUT = "timed out during startup"


def _init_with_retries(ray: Any, kwargs: dict[str, Any]) -> None:
    """``ray.init(**kwargs)``; a local start that times out is tried again.

    Ray waits a fixed 30 s for a new node's raylet to register and then gives up with
    "The current node timed out during startup"; on a machine whose cores are busy (other runs,
    a test suite's parallel workers) that happens although nothing is wrong. Joining an
    existing cluster is not retried: its failure says something about that cluster.
    """
    for attempt in range(1, STARTUP_ATTEMPTS + 1):
        before = _child_pids()
        try:
            with _sigterm_handler_kept():
                ray.init(**kwargs)
            return
        except Exception as exc:  # Ray raises a bare Exception for this
            if "address" in kwargs or _STARTUP_TIMEOUT not in str(exc):
                raise
            _release_failed_start(ray, before)
            if attempt == STARTUP_ATTEMPTS:
                raise
            logger.warning(
                "Ray's local start timed out (attempt %d of %d, the machine may be busy): "
                "starting it again",
                attempt,
                STARTUP_ATTEMPTS,
            )
        except BaseException:  # a signal while Ray started (a preemption, Ctrl-C)
            _release_failed_start(ray, before)
            raise


def _release_failed_start(ray: Any, before: set[int]) -> None:
    """Shut down what a ``ray.init`` that did not return had started."""
    ray.shutdown()
    # ray.shutdown() does not stop the processes of a node that never registered: the failed
    # start's GCS, raylet, dashboard and log monitor (~330 MB) would run until this process
    # exits
    stopped = _stop_new_children(before)
    if stopped:
        logger.info("stopped %d process(es) of the failed Ray start", stopped)


@contextlib.contextmanager
def _sigterm_handler_kept() -> Iterator[None]:
    """Keep the process's SIGTERM handler while ``ray.init`` runs and after it.

    ``ray.init`` sets its own first thing (``sys.exit(15)``). The handler a run had set is its
    preemption guard (:meth:`~trinity.launcher.run.preemption.StopRequest.guarded`: exit
    status 75, and the same command resumes); Ray's does not even stand in meanwhile: its
    ``SystemExit``, raised where the signal finds the main thread, is lost when that is an
    at-fork hook of Ray's process starts (Python ignores exceptions there), and the run went
    on as if no signal had come. Should a Ray version set it another way, a ``SystemExit(15)``
    from it is handed to the run's handler, and the handler is put back once Ray has started.
    Where the process had no handler of its own (the default action), Ray's is left alone.
    """
    before = signal.getsignal(signal.SIGTERM)
    if not callable(before) or threading.current_thread() is not threading.main_thread():
        yield
        return
    from ray._private import utils as ray_utils

    setter = getattr(ray_utils, "set_sigterm_handler", None)
    if setter is not None:
        ray_utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    except SystemExit as exc:
        if exc.code == signal.SIGTERM:
            before(signal.SIGTERM, None)  # raises Preempted (or exits at once)
        raise
    finally:
        if setter is not None:
            ray_utils.set_sigterm_handler = setter
        signal.signal(signal.SIGTERM, before)


def _child_pids() -> set[int]:
    """The pids of this process's descendants."""
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def _stop_new_children(before: set[int], grace: float = 5.0) -> int:
    """Terminate (then kill, after ``grace`` seconds) this process's descendants not in
    ``before``: what a failed ``ray.init`` started. Returns how many there were."""
    import psutil

    new = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    for proc in new:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(new, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    return len(new)
