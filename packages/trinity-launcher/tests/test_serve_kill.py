"""Mode serve killed with SIGKILL (issue 43: "nothing lost on a crash"): what was committed
stays committed, readable and whole; answers rewarded but not committed are not written (they
were never in the buffer); a service started again on the same buffer appends to it.

The service is ``examples/serve_arithmetic.yaml`` (vLLM's CPU build: mode serve forwards to
the engine's OpenAI server, which only the vLLM engine runs)."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import pytest
from ports import free_port
from serve_process import service_env, start, stop, wait_healthy

pytest.importorskip("vllm")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.slow

KEY = "serve-kill-key"


def _start(env: dict, log: Path):
    return start(
        "examples/serve_arithmetic.yaml",
        env,
        log,
        "explorer.serve.api_key_env=TRINITY_TEST_SERVE_KEY",
    )


def _answer_and_reward(base: str, n: int, rewarded: int, task: str) -> list[str]:
    """``n`` answers to one question, the first ``rewarded`` of them sent a reward."""
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0)
    model = client.models.list().data[0].id
    ids = []
    for _ in range(n):
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "3+4="}], max_tokens=2
        )
        ids.append(reply.id)
    headers = {"Authorization": f"Bearer {KEY}"}
    for i, msg_id in enumerate(ids[:rewarded]):
        fb = httpx.post(
            f"{base}/feedback",
            json={"msg_ids": [msg_id], "reward": float(i % 2), "task_id": task},
            headers=headers,
        )
        assert fb.json()["rewarded"] == [msg_id], fb.text
    return ids


def _commit(base: str) -> int:
    reply = httpx.post(f"{base}/commit", headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    return reply.json()["committed"]


def _rows(db: Path) -> list[tuple[int, bytes, float]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT id, exp_bytes, reward FROM served ORDER BY id").fetchall()


def test_a_killed_service_keeps_what_it_committed_and_a_restart_appends(tmp_path):
    from trinity.common.experience import Experience

    db = tmp_path / "served.db"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = service_env(tmp_path, port, KEY)

    log = tmp_path / "serve.log"
    serve = _start(env, log)
    try:
        wait_healthy(serve, base, log)
        _answer_and_reward(base, 8, 8, "g0")
        assert _commit(base) == 8
        # rewarded, not committed: never written
        _answer_and_reward(base, 8, 4, "g1")
    finally:
        code = stop(serve, signal.SIGKILL)
    assert code == -signal.SIGKILL

    rows = _rows(db)
    assert len(rows) == 8, rows
    exps = [Experience.deserialize(data) for _, data, _ in rows]
    assert {e.eid.task for e in exps} == {"g0"}  # the committed session, nothing of g1
    assert [r for _, _, r in rows] == [float(i % 2) for i in range(8)]
    assert all(e.response_length >= 1 and e.logprobs is not None for e in exps)

    # started again on the same buffer: it appends; nothing of the first run is doubled
    log2 = tmp_path / "serve2.log"
    serve = _start(env, log2)
    try:
        wait_healthy(serve, base, log2)
        _answer_and_reward(base, 8, 8, "g2")
        assert _commit(base) == 8
    finally:
        code = stop(serve)
    assert code == 0, log2.read_text()[-5000:]
    rows_after = _rows(db)
    assert len(rows_after) == 16 and rows_after[:8] == rows
    later = [Experience.deserialize(data) for _, data, _ in rows_after[8:]]
    assert {e.eid.task for e in later} == {"g2"}
    assert "8 experiences committed" in log2.read_text()
