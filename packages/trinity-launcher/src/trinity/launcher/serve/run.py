"""``trinity run`` of a mode ``serve`` config: the rollout engines (vLLM, each with its own
OpenAI server on loopback), the proxy in front of them on ``explorer.listen_address``:
``explorer.proxy_port``, and the loops that pick up a trainer's weights and check the engines.

It runs until SIGINT / SIGTERM (uvicorn's handlers: requests in flight finish), then says what
was committed and what was not, and stops the engines. A rollout engine that dies is taken out
of the rotation (its requests get 502 and the clients retry on the others); with none left the
service stops with exit status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any, Optional

from trinity.common.config import Config

logger = logging.getLogger(__name__)

#: seconds an idle client connection stays open (see :func:`server_config`)
KEEP_ALIVE_S = 75

METRICS_FILE = "serve_metrics.jsonl"


def serve_settings(config: Config) -> dict[str, Any]:
    """The proxy's settings from ``config`` (``explorer.*`` and ``explorer.serve.*``)."""
    explorer = config.explorer
    extra = explorer.serve
    api_key = os.environ.get(extra.api_key_env) if extra.api_key_env else None
    if extra.api_key_env and not api_key:
        raise ValueError(
            f"explorer.serve.api_key_env: the environment variable {extra.api_key_env!r} is not "
            "set (it holds the API key clients must send); set it, or leave api_key_env out"
        )
    rollout = explorer.rollout_model
    temperature = rollout.temperature if rollout.temperature is not None else 1.0
    return {
        "temperature": float(temperature),
        "api_key": api_key,
        "max_request_bytes": int(extra.max_request_bytes),
        "max_concurrent_requests": int(extra.max_concurrent_requests),
        "timeout": float(explorer.max_timeout),
    }


def run_serve(config: Config, settings: Optional[dict[str, Any]] = None) -> dict[str, float]:
    """Serve until stopped; returns the service's last counters. ``settings``: the proxy's
    (default :func:`serve_settings`)."""
    from trinity.launcher.placement import placement_session
    from trinity.launcher.run.ray_session import ray_session

    if settings is None:
        settings = serve_settings(config)  # a missing API key fails before anything starts
    with ray_session(config), placement_session(config) as placement:
        return asyncio.run(_serve(config, placement, settings))


def _output_config(config: Config) -> Any:
    """The storage committed experiences go to."""
    pipeline = config.data_processor.experience_pipeline
    return pipeline.output or config.buffer.trainer_input.experience_buffer


def _monitor(config: Config) -> Any:
    from trinity.launcher.monitor import MultiMonitor, create_monitor
    from trinity.launcher.progress import JsonlMonitor

    path = os.path.join(config.checkpoint_job_dir, METRICS_FILE)
    return MultiMonitor([JsonlMonitor(path), create_monitor(config, with_jsonl=False)])


async def _serve(config: Config, placement: Any, settings: dict[str, Any]) -> dict[str, float]:
    import ray

    from trinity.buffer.operators.experience_operator import create_operators
    from trinity.buffer.storage.sql import SQLStorage
    from trinity.buffer.storage.sql_live import LiveWriterMark
    from trinity.launcher.engines import create_rollout_engines
    from trinity.launcher.explorer import build_experience_pipeline, pipeline_advantage_fn
    from trinity.launcher.serve.app import build_app
    from trinity.launcher.serve.service import ServeService

    explorer = config.explorer
    engines = create_rollout_engines(config, placement=placement)
    pipeline = None
    mark = None
    monitor = None
    tasks: list[asyncio.Task[Any]] = []
    service = None
    try:
        await asyncio.gather(*(h.ready.remote() for h in engines))
        operators = create_operators(config.data_processor.experience_pipeline.operators)
        pipeline = build_experience_pipeline(config, pipeline_advantage_fn(config), operators)
        await pipeline.prepare()
        # a trainer reading the table waits for what this service commits (sql_live)
        mark = LiveWriterMark(SQLStorage(_output_config(config)))
        monitor = _monitor(config)

        async def commit(exps: list[Any]) -> dict[str, Any]:
            return await pipeline.process(exps)

        service = ServeService(
            list(engines),
            commit,
            job_dir=config.checkpoint_job_dir,
            commit_every=explorer.serve.commit_every,
            log_metrics=monitor.log,
        )
        await service.load_new_weights()  # a trainer's checkpoint already there
        app = build_app(service, **settings)
        server = _server_class()(server_config(app, explorer.listen_address, explorer.proxy_port))
        interval = float(explorer.service_status_check_interval)
        serving = asyncio.create_task(server.serve())
        tasks = [
            asyncio.create_task(service.watch_weights(interval, heartbeat=mark.beat)),
            asyncio.create_task(_watch_engines(service, interval, server)),
        ]
        while not server.started and not serving.done():
            await asyncio.sleep(0.05)
        if server.started:
            print(
                f"Serving {config.model.model_path} at "
                f"http://{explorer.listen_address}:{explorer.proxy_port}/v1 "
                f"(feedback: /feedback, commit: /commit); Ctrl-C stops",
                flush=True,
            )
        await serving
        if tasks[1].done() and tasks[1].exception() is None and tasks[1].result():
            raise RuntimeError(tasks[1].result())
        return service.metrics()
    finally:
        for task in tasks:
            task.cancel()
        if service is not None:
            uncommitted = service.recorder.ready + service.recorder.waiting
            (logger.warning if uncommitted else logger.info)(service.shutdown_report())
        if pipeline is not None:
            await pipeline.close()
        if mark is not None:
            mark.close()
        if monitor is not None:
            monitor.close()
        for handle in engines:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # already gone
                pass


def server_config(app: Any, host: str, port: int) -> Any:
    """uvicorn's settings for the service.

    Idle connections stay open ``KEEP_ALIVE_S`` seconds, longer than the 5 s for which httpx
    (under the ``openai`` client) keeps one in its pool: at uvicorn's default of 5 s as well, a
    client could send its next request on a connection the server was closing and read a
    reset (``APIConnectionError``; seen in the end-to-end test after the agent waited for new
    weights), a known race of the two defaults.
    """
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=30,
        timeout_keep_alive=KEEP_ALIVE_S,
    )


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, ended by SIGINT / SIGTERM without raising the signal again once
        it has stopped: for mode serve a signal is the normal end of the run (exit status 0),
        not an interruption."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handled = (signal.SIGINT, signal.SIGTERM)
            original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    return Server


async def _watch_engines(service: Any, interval: float, server: Any) -> str:
    """Take dead engines out of the rotation; with none left, stop the server and return why
    (an empty string never: the loop runs until cancelled or no engine is left)."""
    while True:
        await asyncio.sleep(interval)
        alive = []
        for index, handle in enumerate(service.engines):
            try:
                await asyncio.wait_for(handle.check_health.remote(), timeout=interval)
                alive.append(handle)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.error(
                    "serve: rollout engine %d is down, out of the rotation: %s", index, exc
                )
        if len(alive) != len(service.engines):
            service.engines[:] = alive
            service.reset_addresses()
        if not alive:
            server.should_exit = True
            return "every rollout engine is down; the service stopped"
