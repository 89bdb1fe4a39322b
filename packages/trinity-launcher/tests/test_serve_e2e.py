"""Mode serve end to end, as issue 43 asks: the service (``examples/serve_arithmetic.yaml``:
vLLM's CPU build behind the proxy, an API key) and, beside it, a trainer in mode train
(``examples/serve_train_arithmetic.yaml``) on the SQLite buffer the service commits to.

The plain ``openai`` client is the external agent: it asks the quickstart's addition questions,
16 questions x 8 answers per train step (the quickstart's batch), sends each answer's reward to
``/feedback`` and commits each step's answers; the trainer trains on what arrives and saves
Hugging Face weights at each step, which the service loads and serves as the next model
version. The agent asks a step's questions once the service serves the weights of the step
before (an agent in step with its trainer, as a one-step-off run is; an agent that does not
wait trains on answers of weights many steps old, and how many depends on the machine's
speed). The loop closes and learns: every committed answer carries the version it was asked
on, the last step's weights are served, and their reward is at least 0.15 above the first two
steps' (docs/learning.md: 0.03 -> 0.33). A load check first: 64 concurrent streaming clients,
no error, latency percentiles printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time

import pytest
from ports import free_port
from serve_process import ROOT, service_env, start, stop, wait_healthy

pytest.importorskip("vllm")
pytest.importorskip("verl")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.slow

TRAIN_STEPS = 40
GROUPS = 16  # questions per train step, 8 answers each (the example trainer's batch)
LAG = 1  # a step's questions are asked on the weights of the step before it, at the latest
KEY = "serve-test-key"


async def _load_check(base: str, clients: int, seconds: float) -> list[float]:
    """``clients`` streaming clients asking in a loop for ``seconds``; the latencies."""
    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0)
    model = (await client.models.list()).data[0].id
    latencies: list[float] = []
    end = time.monotonic() + seconds

    async def one() -> None:
        while time.monotonic() < end:
            began = time.monotonic()
            stream = await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "2+2="}],
                stream=True,
                max_tokens=2,
            )
            async for _ in stream:
                pass
            latencies.append(time.monotonic() - began)

    await asyncio.gather(*(one() for _ in range(clients)))
    await client.close()
    return latencies


async def _version(http: httpx.AsyncClient) -> int:
    return int((await http.get("/metrics")).json()["serve/model_version"])


async def _agent(
    base: str, rows: list[dict], rng: random.Random, timeout: float
) -> tuple[list, list]:
    """The trainer's ``TRAIN_STEPS`` batches of ``GROUPS`` questions x 8 answers, rewarded and
    committed, each asked once the service serves the weights of the step ``LAG`` before it
    (an agent in step with its trainer, as a one-step-off run is); then, on the last step's
    weights, ``GROUPS`` more questions scored and not committed. ``(per group (version, mean
    reward) of the committed traffic, the final questions' rewards)``."""
    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0)
    http = httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {KEY}"})
    model = (await client.models.list()).data[0].id
    deadline = time.monotonic() + timeout

    async def wait_for(version: int) -> None:
        while await _version(http) < version:
            assert time.monotonic() < deadline, f"the service never served version {version}"
            await asyncio.sleep(0.1)

    async def ask(row: dict) -> tuple[str, float, int]:
        r = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": row["question"]}], max_tokens=2
        )
        found = re.search(r"-?\d+", r.choices[0].message.content or "")
        reward = float(bool(found) and found.group() == row["answer"])
        return r.id, reward, r.model_extra["model_version"]

    async def group(row: dict, task: str | None) -> tuple[int, float]:
        answers = await asyncio.gather(*(ask(row) for _ in range(8)))
        if task is not None:
            for msg_id, reward, _ in answers:
                fb = await http.post(
                    "/feedback", json={"msg_ids": [msg_id], "reward": reward, "task_id": task}
                )
                assert fb.json()["rewarded"] == [msg_id], fb.text
        return min(a[2] for a in answers), sum(a[1] for a in answers) / 8

    groups: list[tuple[int, float]] = []
    for step in range(TRAIN_STEPS):
        await wait_for(step - LAG)
        picked = rng.sample(rows, GROUPS)
        groups += await asyncio.gather(*(group(r, f"s{step}g{g}") for g, r in enumerate(picked)))
        assert (await http.post("/commit")).json()["committed"] == 8 * GROUPS
    await wait_for(TRAIN_STEPS)
    final = await asyncio.gather(*(group(r, None) for r in rng.sample(rows, GROUPS)))
    await client.close()
    await http.aclose()
    return groups, final


def test_online_rl_from_live_traffic_closes_the_loop(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = service_env(tmp_path, port, KEY, TRINITY_SERVE_TRAIN_STEPS=str(TRAIN_STEPS))
    serve = start(
        "examples/serve_arithmetic.yaml",
        env,
        tmp_path / "serve.log",
        "explorer.serve.api_key_env=TRINITY_TEST_SERVE_KEY",
    )
    trainer = None
    try:
        wait_healthy(serve, base, tmp_path / "serve.log")
        # the key is checked; /health needs none
        no_key = openai.OpenAI(base_url=f"{base}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            no_key.models.list()
        client = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0)
        name = client.models.list().data[0].id
        reply = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "3+4="}], max_tokens=2
        )
        assert reply.model_extra["model_version"] == 0 and reply.choices[0].logprobs

        seconds = float(os.environ.get("TRINITY_SERVE_LOAD_SECONDS", "20"))  # issue 43: 60
        latencies = sorted(asyncio.run(_load_check(base, clients=64, seconds=seconds)))
        pct = {p: latencies[int(p / 100 * (len(latencies) - 1))] for p in (50, 95, 99)}
        print(
            f"load check: {len(latencies)} streamed requests by 64 clients in {seconds:.0f} s, "
            f"latency p50 {pct[50]:.2f} s, p95 {pct[95]:.2f} s, p99 {pct[99]:.2f} s"
        )
        metrics = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {KEY}"}).json()
        assert metrics["serve/failed_requests"] == 0, metrics
        # the load check's answers were never rewarded: they wait, they are not trained on
        assert metrics["serve/waiting_experiences"] == len(latencies) + 1, metrics

        trainer = start("examples/serve_train_arithmetic.yaml", env, tmp_path / "train.log")
        rows = [
            json.loads(line)
            for line in (ROOT / "examples/data/arithmetic/train.jsonl").read_text().splitlines()
        ]
        groups, final = asyncio.run(_agent(base, rows, random.Random(0), timeout=1500))
        assert trainer.wait(600) == 0, (tmp_path / "train.log").read_text()[-5000:]

        first = sum(r for _, r in groups[: 2 * GROUPS]) / (2 * GROUPS)
        last = sum(r for _, r in final) / GROUPS
        print(
            f"reward: first 2 steps {first:.2f} (version {groups[0][0]}), "
            f"on the last step's weights {last:.2f} (version {final[0][0]})"
        )
        assert all(
            v >= step - LAG
            for step in range(TRAIN_STEPS)
            for v, _ in groups[step * GROUPS : (step + 1) * GROUPS]
        )
        assert all(v == TRAIN_STEPS for v, _ in final), final
        assert last >= first + 0.15, (first, last, groups)
        trained = [
            json.loads(x)
            for x in (tmp_path / "ckpt/trinity-serve/arithmetic/metrics.jsonl")
            .read_text()
            .splitlines()
        ]
        assert [r["step"] for r in trained] == list(range(1, TRAIN_STEPS + 1))
    finally:
        if trainer is not None:
            stop(trainer)
        code = stop(serve)
    log = (tmp_path / "serve.log").read_text()
    assert code == 0, log[-5000:]
    # the load check's unrewarded answers are reported as not committed
    assert f"{len(groups) * 8} experiences committed" in log, log[-3000:]
    assert "without feedback" in log
    served = [
        json.loads(x)
        for x in (tmp_path / "ckpt/trinity-serve/arithmetic/serve_metrics.jsonl")
        .read_text()
        .splitlines()
    ]
    # each commit (step s, 0-based) came once the service served the weights of step s - LAG:
    # the last one's record may show TRAIN_STEPS - 1 - LAG (a CI run's showed 38 of 40)
    assert len(served) == TRAIN_STEPS
    assert all(r["serve/model_version"] >= step - LAG for step, r in enumerate(served)), [
        r["serve/model_version"] for r in served
    ]
