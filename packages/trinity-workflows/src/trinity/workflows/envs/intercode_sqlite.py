"""A SQLite stand-in for InterCode's SQL environment, and InterCode's SQL reward.

InterCode-SQL (``intercode.envs.SqlEnv``) runs the agent's statements in a MySQL server inside
a Docker container and, on ``submit``, compares the latest query result with the gold query's.
:class:`SQLiteSqlEnv` offers the same interface — ``SqlEnv(image_name, data_path=...,
preprocess=..., verbose=...)``, ``reset(index) -> (observation, info)``, ``step(action) ->
(observation, reward, done, info)``, ``query`` / ``gold`` / ``record`` — over SQLite, so the
workflow runs the same code path where Docker or MySQL is not available:

* records: InterCode's data file (``.json`` list, ``.jsonl`` or ``.csv`` with ``query`` and
  ``gold`` columns and the database under ``db`` or ``extra.db``) or records handed over;
* databases: a record's own ``setup_sql`` script, or ``<database_dir>/<db>.sqlite`` (also
  ``<db>.db`` and Spider's ``<db>/<db>.sqlite`` layout). Each episode works on an in-memory copy,
  so statements that change data never reach the file or the next episode; ``use <db>``
  switches database, as InterCode's preprocess step ``use {db}`` does on MySQL;
* observation: the rows of a query (a list of tuples), ``None`` for a statement without a
  result, or ``"Error executing query: …"``;
* reward on ``submit`` (:func:`sql_reward`, InterCode's rule): intersection over union of the
  result rows (as multisets, rows compared as text) scaled by the Kendall rank correlation of
  the shared rows' order, rounded to 2 decimals; 1 when both results are empty. The gold query
  runs on a fresh copy of the record's database, so the agent's own changes cannot alter it.

SQLite is not MySQL: gold queries written in MySQL's dialect may fail or differ here.
"""

from __future__ import annotations

import csv
import json
import random
import re
import sqlite3
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import numpy as np

__all__ = [
    "SQLiteSqlEnv",
    "kendall_tau_b",
    "load_records",
    "open_database",
    "record_db",
    "sql_reward",
]

ACTION_EXEC = "action_executed"
_USE = re.compile(r"^\s*use\s+[`\"']?([\w.-]+)[`\"']?\s*;?\s*$", re.I)


def record_db(record: Mapping[str, Any]) -> str:
    """The database a record is about: ``db``, else ``extra.db`` (InterCode's two layouts)."""
    extra = record.get("extra")
    return str(record.get("db") or (extra.get("db") if isinstance(extra, Mapping) else "") or "")


def load_records(path: str) -> list[dict[str, Any]]:
    """The records of an InterCode data file (cached while the file is unchanged)."""
    file = Path(path).expanduser()
    return [dict(r) for r in _load_records(str(file), file.stat().st_mtime_ns)]


@lru_cache(maxsize=8)
def _load_records(path: str, mtime_ns: int) -> tuple[dict[str, Any], ...]:
    suffix = Path(path).suffix.lower()
    with open(path, encoding="utf-8") as handle:
        if suffix == ".jsonl":
            rows = [json.loads(line) for line in handle if line.strip()]
        elif suffix == ".json":
            rows = json.load(handle)
        elif suffix in (".csv", ".tsv"):
            rows = list(csv.DictReader(handle, delimiter="\t" if suffix == ".tsv" else ","))
        else:
            raise ValueError(f"{path}: InterCode data must be .json, .jsonl, .csv or .tsv")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path}: expected a list of records (objects)")
    for i, row in enumerate(rows):
        if "query" not in row or "gold" not in row:
            raise ValueError(f"{path}: record {i} lacks 'query' or 'gold'")
    return tuple(rows)


def open_database(
    db: str, record: Optional[Mapping[str, Any]] = None, database_dir: Optional[str] = None
) -> sqlite3.Connection:
    """A fresh in-memory copy of database ``db``: the record's ``setup_sql`` script when the
    record is about ``db``, else the file found under ``database_dir``."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    setup = (record or {}).get("setup_sql")
    if setup and record_db(record or {}) in ("", db):
        conn.executescript(str(setup))
        return conn
    if database_dir:
        root = Path(database_dir).expanduser()
        for path in (root / f"{db}.sqlite", root / f"{db}.db", root / db / f"{db}.sqlite"):
            if path.is_file():
                source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
                try:
                    source.backup(conn)
                finally:
                    source.close()
                return conn
    conn.close()
    where = f"under {database_dir}" if database_dir else "(no database_dir given)"
    raise FileNotFoundError(
        f"no SQLite database {db!r} {where}: expected {db}.sqlite, {db}.db or "
        f"{db}/{db}.sqlite, or a 'setup_sql' script in the record"
    )


# ---------------------------------------------------------------------- reward
def kendall_tau_b(x: Sequence[Any], y: Sequence[Any]) -> Optional[float]:
    """Kendall's tau-b of two equally long sequences of comparable values (ties counted),
    ``None`` when it is undefined (fewer than two items, or one side all ties).

    Computed over all pairs in row blocks, so memory stays bounded for long results.
    """
    n = len(x)
    if n != len(y):
        raise ValueError(f"kendall_tau_b: lengths differ ({n} and {len(y)})")
    if n < 2:
        return None
    rx = np.unique(np.asarray(x), return_inverse=True)[1].reshape(-1)
    ry = np.unique(np.asarray(y), return_inverse=True)[1].reshape(-1)
    concordance = untied_x = untied_y = 0
    columns = np.arange(n)
    for start in range(0, n, 1024):
        rows = np.arange(start, min(n, start + 1024))
        later = columns[None, :] > rows[:, None]  # each pair once
        sx = np.sign(rx[rows, None] - rx[None, :]) * later
        sy = np.sign(ry[rows, None] - ry[None, :]) * later
        concordance += int((sx * sy).sum())
        untied_x += int(np.count_nonzero(sx))
        untied_y += int(np.count_nonzero(sy))
    if untied_x == 0 or untied_y == 0:
        return None
    return concordance / float(np.sqrt(float(untied_x) * float(untied_y)))


def _shared_in_order(items: list[str], shared: Counter) -> list[str]:
    left = Counter(shared)
    kept = []
    for item in items:
        if left[item] > 0:
            left[item] -= 1
            kept.append(item)
    return kept


def sql_reward(agent_output: Any, gold_output: Any) -> float:
    """InterCode-SQL's reward of a submitted result against the gold result (see the module).

    Anything but two lists of rows (an error message, a statement without result) scores 0.
    """
    if not isinstance(agent_output, list) or not isinstance(gold_output, list):
        return 0.0
    agent = [str(row) for row in agent_output]
    gold = [str(row) for row in gold_output]
    agent_counts, gold_counts = Counter(agent), Counter(gold)
    shared = agent_counts & gold_counts
    union = agent_counts | gold_counts
    if not union:
        return 1.0
    reward = sum(shared.values()) / sum(union.values())
    if shared:
        tau = kendall_tau_b(_shared_in_order(agent, shared), _shared_in_order(gold, shared))
        if tau is not None:
            reward = round(tau * reward, 2)
    return float(reward)


# ---------------------------------------------------------------------- the environment
class SQLiteSqlEnv:
    """InterCode's ``SqlEnv`` interface over SQLite (see the module docstring)."""

    name = "ic_sql_sqlite"

    def __init__(
        self,
        image_name: str = "sqlite",
        *,
        data_path: Optional[str] = None,
        records: Optional[Sequence[Mapping[str, Any]]] = None,
        preprocess: Optional[Callable[[dict], str]] = None,
        verbose: bool = False,
        database_dir: Optional[str] = None,
    ) -> None:
        if records is None and data_path is None:
            raise ValueError("SQLiteSqlEnv needs data_path (an InterCode data file) or records")
        self.image_name = image_name
        self.records = [dict(r) for r in records] if records is not None else None
        self.data_path = data_path
        self.preprocess = preprocess
        self.verbose = verbose
        self.database_dir = database_dir
        self.conn: Optional[sqlite3.Connection] = None
        self.record: dict[str, Any] = {}
        self.query = self.gold = ""
        self.observation: Any = None
        self.info: dict[str, Any] = {}
        self.trajectory: list[tuple[str, Any]] = []

    def _records(self) -> list[dict[str, Any]]:
        return self.records if self.records is not None else load_records(str(self.data_path))

    def reset(self, index: Optional[int] = None) -> tuple[Any, dict[str, Any]]:
        """Load record ``index`` (random when ``None``) on a fresh copy of its database."""
        records = self._records()
        self.query_idx = random.randrange(len(records)) if index is None else int(index)
        self.record = dict(records[self.query_idx])
        self.query, self.gold = str(self.record["query"]), str(self.record["gold"])
        self.info, self.trajectory = {}, []
        self.observation = self.query
        self._switch(record_db(self.record))
        if self.preprocess is not None:
            command = self.preprocess(self.record)
            self.exec_action(command)
            if not self.info[ACTION_EXEC]:
                raise RuntimeError(f"preprocess command failed: {command!r}: {self.observation}")
        return self.observation, self.info

    def step(self, action: str) -> tuple[Any, float, bool, dict[str, Any]]:
        """Run one statement, or score the latest result on ``submit`` (which ends it)."""
        if action == "submit":
            reward, info = self.get_reward()
            info[ACTION_EXEC] = True
            return self.observation, reward, True, info
        self.exec_action(action)
        self.trajectory.append((action, self.observation))
        return self.observation, 0.0, False, self.info

    def exec_action(self, action: str) -> None:
        use = _USE.match(action)
        try:
            if use is not None:
                self._switch(use.group(1))
                self.observation = None
            elif self.conn is None:
                raise sqlite3.OperationalError("no database selected")
            else:
                cursor = self.conn.execute(action)
                self.observation = cursor.fetchall() if cursor.description is not None else None
            self.info[ACTION_EXEC] = True
        except (sqlite3.Error, FileNotFoundError) as exc:
            self.observation = f"Error executing query: {exc}"
            self.info[ACTION_EXEC] = False

    def get_reward(self) -> tuple[float, dict[str, Any]]:
        """The reward of the latest observation against the gold query's result."""
        info: dict[str, Any] = {"agent_obs": self.observation, "corrupt_gold": False}
        gold_rows: Any = []
        try:
            conn = open_database(record_db(self.record), self.record, self.database_dir)
            try:
                cursor = conn.execute(self.gold)
                gold_rows = cursor.fetchall() if cursor.description is not None else []
            finally:
                conn.close()
        except (sqlite3.Error, FileNotFoundError) as exc:
            info["corrupt_gold"] = True
            gold_rows = f"Error executing query: {exc}"
        reward = sql_reward(self.observation, gold_rows)
        info.update(eval_obs=str(gold_rows), agent_obs=str(info["agent_obs"]), reward=reward)
        return reward, info

    def _switch(self, db: str) -> None:
        conn = open_database(db, self.record, self.database_dir)
        self.close()
        self.conn = conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
