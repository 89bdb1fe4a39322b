"""Buffer throughput: experiences/s written + read through the queue and SQL storages, against a
bare ``sqlite3`` insert/select loop of the same serialized rows, in the same run.

    .venvs/trinity-buffer/bin/python benchmarks/buffer_bench.py [--n 4000] [--batch 64]

Every storage moves the same experiences (prompt 256 + response 256 tokens with logprobs, about
5 KB serialized) in batches of ``--batch``: one writer thread feeding one reader for the queue,
write-all-then-read-all for SQL. The bare loop is the floor for SQL: it inserts the
pre-serialized bytes with ``executemany`` in one transaction per batch and selects them back,
with no serialization; the storage's ratio to it is its overhead (serialization included). The
queue passes objects without serializing, so its ratio shows how far it is from any database.
Runs in a few seconds.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import threading
import time

import torch

from trinity.buffer.buffer_reader import get_buffer_reader
from trinity.buffer.buffer_writer import get_buffer_writer
from trinity.common.config import ExperienceBufferConfig
from trinity.common.experience import Experience


def make_experiences(n: int) -> list[Experience]:
    gen = torch.Generator().manual_seed(0)
    return [
        Experience(
            tokens=torch.randint(1, 32000, (512,), generator=gen),
            prompt_length=256,
            logprobs=-torch.rand(256, generator=gen),
            reward=float(i % 2),
            info={"task": i // 8},
            model_version=i // 256,
        )
        for i in range(n)
    ]


def bench_queue(exps: list[Experience], batch: int) -> float:
    cfg = ExperienceBufferConfig(
        name="bench_queue", storage_type="queue", capacity=8 * batch, batch_size=batch
    )
    writer = get_buffer_writer(cfg, use_ray=False)
    reader = get_buffer_reader(cfg, use_ray=False)
    writer.acquire()

    def produce() -> None:
        for lo in range(0, len(exps), batch):
            writer.write(exps[lo : lo + batch])
        writer.release()

    start = time.perf_counter()
    t = threading.Thread(target=produce)
    t.start()
    got = 0
    for b in reader:
        got += len(b)
    t.join()
    elapsed = time.perf_counter() - start
    assert got == len(exps)
    return len(exps) / elapsed


def bench_sql(exps: list[Experience], batch: int, db: str) -> float:
    cfg = ExperienceBufferConfig(name="bench_sql", storage_type="sql", path=db, batch_size=batch)
    writer = get_buffer_writer(cfg)
    start = time.perf_counter()
    for lo in range(0, len(exps), batch):
        writer.write(exps[lo : lo + batch])
    got = sum(len(b) for b in get_buffer_reader(cfg))
    elapsed = time.perf_counter() - start
    assert got == len(exps)
    return len(exps) / elapsed


def bench_bare_sqlite(rows: list[bytes], batch: int, db: str) -> float:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, exp BLOB NOT NULL)")
    start = time.perf_counter()
    for lo in range(0, len(rows), batch):
        with conn:
            conn.executemany(
                "INSERT INTO t (exp) VALUES (?)", [(r,) for r in rows[lo : lo + batch]]
            )
    last, got = 0, 0
    while True:
        chunk = conn.execute(
            "SELECT id, exp FROM t WHERE id > ? ORDER BY id LIMIT ?", (last, batch)
        ).fetchall()
        if not chunk:
            break
        got += len(chunk)
        last = chunk[-1][0]
    elapsed = time.perf_counter() - start
    conn.close()
    assert got == len(rows)
    return len(rows) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4000, help="experiences per storage")
    parser.add_argument("--batch", type=int, default=64, help="experiences per write/read")
    args = parser.parse_args()

    exps = make_experiences(args.n)
    start = time.perf_counter()
    rows = [e.serialize() for e in exps]
    ser = args.n / (time.perf_counter() - start)
    start = time.perf_counter()
    for r in rows:
        Experience.deserialize(r)
    de = args.n / (time.perf_counter() - start)
    size = sum(map(len, rows)) / len(rows)

    with tempfile.TemporaryDirectory() as tmp:
        bare = bench_bare_sqlite(rows, args.batch, os.path.join(tmp, "bare.db"))
        sql = bench_sql(exps, args.batch, os.path.join(tmp, "storage.db"))
        queue = bench_queue(exps, args.batch)

    print(
        f"python {sys.version.split()[0]}, torch {torch.__version__}, sqlite {sqlite3.sqlite_version}"
    )
    print(f"{args.n} experiences, {size / 1024:.1f} KiB serialized each, batch {args.batch}")
    print(f"serialize          {ser:12,.0f} exp/s")
    print(f"deserialize        {de:12,.0f} exp/s")
    print(f"bare sqlite3 loop  {bare:12,.0f} exp/s  (write + read, pre-serialized rows)")
    floor = 1 / (1 / bare + 1 / ser + 1 / de)
    print(f"bare + (de)serial. {floor:12,.0f} exp/s  (the SQL floor once bytes must be made)")
    print(
        f"sql storage        {sql:12,.0f} exp/s  (write + read)   ratio {sql / bare:.2f}x bare, "
        f"{sql / floor:.2f}x bare + (de)serialization"
    )
    print(
        f"queue storage      {queue:12,.0f} exp/s  (write + read)   ratio {queue / bare:.2f}x bare"
    )


if __name__ == "__main__":
    main()
