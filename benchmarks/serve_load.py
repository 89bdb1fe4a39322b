"""Load check of mode serve: concurrent streaming clients for a while, errors and latencies.

    .venv/bin/python benchmarks/serve_load.py [--clients 64] [--seconds 60] [--out DIR]
        [--config examples/serve_arithmetic.yaml] [--model DIR] [KEY=VALUE ...]

Starts the service (``trinity run`` on ``--config``, the quickstart's tiny model built locally
unless ``--model`` names one; a free port on 127.0.0.1, an API key), then ``--clients`` clients
of the plain ``openai`` async client each ask in a loop for ``--seconds`` seconds: one
streamed chat completion at a time (``max_tokens`` 2, the service's default sampling),
consumed to its end. It prints the requests completed, the errors (any exception or
incomplete stream; the service's own ``serve/failed_requests`` from ``/metrics``) and the
latency percentiles (p50 / p95 / p99 / max: request sent to the stream's last chunk), and
writes them to ``DIR/serve_load.json``. Exit status 1 when any request failed.

Nothing is rewarded or committed: every answer waits in the service's recorder (counted in
``serve/waiting_experiences``, bounded at 100,000 by the recorder), so the check also
shows the recorder holding a minute of traffic.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
KEY = "serve-load-key"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_service(
    config: str, model: str, out: Path, port: int, overrides: list[str]
) -> subprocess.Popen:
    env = dict(
        os.environ,
        TRINITY_QUICKSTART_MODEL=model,
        TRINITY_CHECKPOINT_ROOT_DIR=str(out / "ckpt"),
        TRINITY_SERVE_BUFFER=f"sqlite:///{out / 'served.db'}",
        TRINITY_SERVE_PORT=str(port),
        TRINITY_SERVE_LOAD_KEY=KEY,
        TRINITY_RAY_TMPDIR=tempfile.mkdtemp(prefix="tr-ray-"),
    )
    env.pop("RAY_ADDRESS", None)
    cmd = [
        str(Path(sys.executable).with_name("trinity")),
        "run",
        "--config",
        config,
        "explorer.serve.api_key_env=TRINITY_SERVE_LOAD_KEY",
        *overrides,
    ]
    log = (out / "serve.log").open("w")
    return subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def wait_healthy(proc: subprocess.Popen, base: str, log: Path, timeout: float = 600) -> float:
    """Seconds until ``/health`` answers 200; raises when the service exits or times out."""
    import httpx

    began = time.monotonic()
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"the service did not come up in {timeout:.0f} s")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return time.monotonic() - began
        except httpx.HTTPError:
            pass
        time.sleep(1)


async def load(base: str, clients: int, seconds: float) -> tuple[list[float], list[str]]:
    """``clients`` streaming clients asking in a loop for ``seconds``: (latencies, errors)."""
    import openai

    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0, timeout=120)
    model = (await client.models.list()).data[0].id
    latencies: list[float] = []
    errors: list[str] = []
    end = time.monotonic() + seconds

    async def one(i: int) -> None:
        while time.monotonic() < end:
            began = time.monotonic()
            try:
                stream = await client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": f"{i % 5}+{i % 3}="}],
                    stream=True,
                    max_tokens=2,
                )
                finished = False
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finished = True
                if not finished:
                    raise RuntimeError("the stream ended without a finish_reason")
            except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            latencies.append(time.monotonic() - began)

    await asyncio.gather(*(one(i) for i in range(clients)))
    await client.close()
    return latencies, errors


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    pick = {p: ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] for p in (50, 95, 99)}
    return {"p50": pick[50], "p95": pick[95], "p99": pick[99], "max": ordered[-1]}


def stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            return proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(30)
    return int(proc.returncode)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--config", default="examples/serve_arithmetic.yaml")
    parser.add_argument("--model", default=None, help="model directory (default: build one)")
    parser.add_argument("--out", default=None, help="where the service's run and logs go")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides")
    args = parser.parse_args(argv)
    import httpx

    out = Path(args.out or tempfile.mkdtemp(prefix="serve-load-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    model = args.model
    if model is None:
        from trinity.launcher.tiny_model import PRESETS, build_tiny_model

        model = str(build_tiny_model(out / "tiny-model", PRESETS["arithmetic"]))
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_service(args.config, model, out, port, args.overrides)
    try:
        ready = wait_healthy(proc, base, out / "serve.log")
        print(f"service up in {ready:.1f} s at {base}; {args.clients} clients for {args.seconds} s")
        latencies, errors = asyncio.run(load(base, args.clients, args.seconds))
        headers = {"Authorization": f"Bearer {KEY}"}
        metrics = httpx.get(f"{base}/metrics", headers=headers, timeout=30).json()
    finally:
        code = stop(proc)
    result: dict[str, Any] = {
        "clients": args.clients,
        "seconds": args.seconds,
        "requests": len(latencies),
        "requests_per_s": len(latencies) / args.seconds,
        "errors": len(errors),
        "error_samples": sorted(set(errors))[:5],
        "latency_s": percentiles(latencies),
        "serve/failed_requests": metrics.get("serve/failed_requests"),
        "serve/waiting_experiences": metrics.get("serve/waiting_experiences"),
        "service_exit_code": code,
    }
    (out / "serve_load.json").write_text(json.dumps(result, indent=2))
    lat = result["latency_s"]
    print(
        f"{result['requests']} streamed requests ({result['requests_per_s']:.1f}/s), "
        f"{result['errors']} errors, service failed_requests {result['serve/failed_requests']}; "
        + ", ".join(f"{k} {v:.2f} s" for k, v in lat.items())
    )
    for sample in result["error_samples"]:
        print("  error:", sample)
    print(f"results: {out / 'serve_load.json'}; service exited {code}")
    failed = result["errors"] or result["serve/failed_requests"] or code != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
