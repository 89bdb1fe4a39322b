"""A writer process SIGKILLed mid-stream never leaves half a batch visible (sql and file).

A real subprocess writes large batches in a loop (several MB per write, so a kill often lands
inside a write); the test kills it with SIGKILL at a random moment after a few batches, then
reads everything back: every visible experience deserializes and is intact, only whole batches
are visible, and a new writer can carry on appending after the crash. Two crash rounds per
storage: the second writer starts on whatever the first left behind.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import defaultdict

import pytest
import torch

from trinity.buffer.buffer_reader import get_buffer_reader
from trinity.common.config import ExperienceBufferConfig
from trinity.common.experience import Experience

BATCH = 6
TOKENS = 40_000  # ~0.5 MB per experience once tokens and logprobs are serialized

WRITER = textwrap.dedent(
    """
    import json, sys
    import torch
    from trinity.buffer.buffer_writer import get_buffer_writer
    from trinity.common.config import ExperienceBufferConfig
    from trinity.common.experience import Experience

    cfg = ExperienceBufferConfig.model_validate(json.loads(sys.argv[1]))
    run, batch, tokens = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    writer = get_buffer_writer(cfg)
    writer.acquire()
    b = 0
    while True:
        exps = []
        for j in range(batch):
            n = tokens + j
            exps.append(
                Experience(
                    tokens=torch.arange(n) % 50000,
                    prompt_length=10,
                    logprobs=torch.full((n - 10,), -float(b)),
                    reward=float(b),
                    info={"run": run, "batch": b, "j": j},
                    model_version=b,
                )
            )
        writer.write(exps)
        print(b, flush=True)
        b += 1
    """
)


def check_intact(exp: Experience) -> tuple[str, int, int]:
    run, b, j = exp.info["run"], exp.info["batch"], exp.info["j"]
    n = TOKENS + j
    assert exp.tokens.shape[0] == n and exp.prompt_length == 10
    assert torch.equal(exp.tokens, torch.arange(n) % 50000)
    assert torch.all(exp.logprobs == -float(b)) and exp.reward == float(b)
    assert exp.model_version == b
    return run, b, j


def run_and_kill(script: str, cfg: ExperienceBufferConfig, run: str, min_batches: int) -> int:
    """Start a writer, let it write ``min_batches`` batches, SIGKILL it at a random moment
    during the next writes; returns how many batches it reported as written."""
    proc = subprocess.Popen(
        [sys.executable, script, cfg.model_dump_json(), run, str(BATCH), str(TOKENS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        reported = 0
        while reported < min_batches:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"writer died: {proc.stderr.read()[-3000:]}")
            reported += 1
        # the writer is now inside its next write (encoding or writing): kill it there
        time.sleep(random.uniform(0.0, 0.15))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        reported += sum(1 for _ in proc.stdout)  # lines printed before the kill landed
        assert proc.returncode == -signal.SIGKILL
        return reported
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def read_everything(cfg: ExperienceBufferConfig) -> dict[tuple[str, int], list[int]]:
    reader = get_buffer_reader(cfg)
    seen: dict[tuple[str, int], list[int]] = defaultdict(list)
    total = 0
    while True:
        try:
            batch = reader.read(BATCH)
        except StopIteration:
            break
        for exp in batch:
            run, b, j = check_intact(exp)
            seen[(run, b)].append(j)
            total += 1
    assert total % BATCH == 0, f"{total} experiences visible: not whole batches"
    return seen


@pytest.mark.parametrize("kind", ["sql", "jsonl", "parquet"])
def test_killed_writer_leaves_only_whole_batches(tmp_path, kind):
    path = {
        "sql": str(tmp_path / "crash.db"),
        "jsonl": str(tmp_path / "crash.jsonl"),
        "parquet": str(tmp_path / "crash.parquet"),
    }[kind]
    storage_type = "sql" if kind == "sql" else "file"
    cfg = ExperienceBufferConfig(name="crash", storage_type=storage_type, path=path, batch_size=6)
    script = str(tmp_path / "writer.py")
    with open(script, "w") as f:
        f.write(WRITER)

    reported: dict[str, int] = {}
    for run in ("first", "second"):  # the second writer starts on the first one's debris
        reported[run] = run_and_kill(script, cfg, run, min_batches=3)
        seen = read_everything(cfg)
        for run_name, n in reported.items():
            batches = sorted(b for (r, b) in seen if r == run_name)
            # everything reported as written is visible; at most the in-flight batch beyond it
            assert batches == list(range(len(batches))), batches
            assert n <= len(batches) <= n + 1, (run_name, n, len(batches))
        for key, js in seen.items():
            assert sorted(js) == list(range(BATCH)), f"batch {key} is partial: {sorted(js)}"

    if kind == "jsonl":  # every line left in the file after a new writer's repair parses
        from trinity.buffer.storage.file import JsonlFile

        JsonlFile(path).repair()
        with open(path, "rb") as f:
            for line in f:
                json.loads(line)
