"""InterCode-SQL: the workflow on the SQLite stand-in, InterCode's reward, and the real-env path.

The real environment (``intercode.envs.SqlEnv``) needs Docker and a MySQL image, so the tests
run the workflow on :class:`SQLiteSqlEnv` (same interface) with databases the tests build, and
check the real-environment path with a double of ``intercode.envs`` that asserts what InterCode
asserts about the constructor's arguments.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import sys
import types
from typing import Any, Dict

import pytest

from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import Task, run_task
from trinity.workflows.common import MissingTaskFieldError
from trinity.workflows.envs.base import EnvironmentNotInstalledError
from trinity.workflows.envs.intercode_sqlite import (
    SQLiteSqlEnv,
    kendall_tau_b,
    sql_reward,
)

SETUP = """
CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, country TEXT);
INSERT INTO singer VALUES (1, 'Ann', 30, 'France'), (2, 'Bob', 25, 'Spain'),
                          (3, 'Cid', 41, 'France');
"""
GOLD = "SELECT name FROM singer WHERE country = 'France' ORDER BY age"
ROW = {
    "query": "Names of the French singers, youngest first?",
    "gold": GOLD,
    "db": "concert",
    "setup_sql": SETUP,
}


def sql_task(row: dict | None = None, repeat_times: int = 1, **args: Any) -> Task:
    args.setdefault("backend", "sqlite")
    return Task(
        workflow="intercode_sql_workflow",
        raw_task=dict(row or ROW),
        repeat_times=repeat_times,
        workflow_args=args,
    )


def agent(*actions: str):
    """Replies ``actions`` in order within each episode (counting its assistant turns)."""

    def reply(messages: list[dict], sample_index: int) -> str:
        turn = sum(m["role"] == "assistant" for m in messages)
        return f"<think>step {turn}</think><action>{actions[min(turn, len(actions) - 1)]}</action>"

    return reply


# ====================================================================== the workflow
def test_right_query_then_submit_scores_one():
    model = FakeModelWrapper(agent(GOLD, "submit"))
    exps = run_task(sql_task(repeat_times=2), model)
    assert [e.eid.run for e in exps] == [0, 1]
    exp = exps[0]
    assert exp.reward == 1.0 and exp.info["success"] == 1.0
    assert exp.info["terminate_reason"] == "submitted" and exp.info["backend"] == "sqlite"
    assert exp.info["final_reward"] == 1.0 and exp.info["action_executed"] == 1
    first = exp.messages[1]["content"]
    assert "Question: Names of the French singers" in first and "Database: concert" in first
    assert "SQLite" in exp.messages[0]["content"]
    assert "2 row(s): [('Ann',), ('Cid',)]" in exp.messages[3]["content"]


def test_partial_and_misordered_answers_follow_intercodes_reward():
    model = FakeModelWrapper(agent("SELECT name FROM singer ORDER BY age", "submit"))
    [exp] = run_task(sql_task(), model)
    assert exp.reward == 0.67 and exp.info["success"] == 0.0  # 2 of 3 rows, order agrees
    reversed_order = f"{GOLD} DESC"
    [exp] = run_task(sql_task(), FakeModelWrapper(agent(reversed_order, "submit")))
    assert exp.reward == -1.0  # all rows, opposite order: IoU 1 scaled by Kendall tau -1


def test_turn_limit_submits_the_latest_result_unless_told_not_to():
    model = FakeModelWrapper(agent("SELECT 1", GOLD))
    [exp] = run_task(sql_task(max_env_steps=2), model)  # 0.6's name for the limit
    assert exp.reward == 1.0 and exp.info["terminate_reason"] == "auto_submit"
    assert exp.info["steps"] == 2 and exp.info["env_rounds"] == 2
    [exp] = run_task(sql_task(max_env_steps=2, auto_submit=False), model)
    assert exp.reward == 0.0 and exp.info["terminate_reason"] == "max_steps"


def test_errors_and_replies_without_action_are_observations():
    replies = iter(["Let me think.", "<action>SELECT nope FROM singer</action>", "<action>submit"])
    model = FakeModelWrapper(lambda m, i: next(replies, "<action>submit</action>"))
    [exp] = run_task(sql_task(), model)
    contents = [m["content"] for m in exp.messages if m["role"] == "user"]
    assert "no action found" in contents[1]
    assert "Error executing query: no such column: nope" in contents[2]
    assert exp.reward == 0.0 and exp.info["invalid_actions"] == 2
    assert exp.info["terminate_reason"] == "submitted"


def test_data_file_and_database_folder_as_spider_lays_them_out(tmp_path):
    folder = tmp_path / "database" / "concert"
    folder.mkdir(parents=True)
    db_file = folder / "concert.sqlite"
    conn = sqlite3.connect(db_file)
    conn.executescript(SETUP)
    conn.close()
    data = tmp_path / "ic_spider_dev.json"
    records = [
        {"query": "How many singers?", "gold": "SELECT count(*) FROM singer", "db": "x"},
        {
            "query": "Oldest singer?",
            "gold": "SELECT max(age) FROM singer",
            "extra": {"db": "concert"},
        },
    ]
    data.write_text(json.dumps(records))
    model = FakeModelWrapper(agent("DELETE FROM singer", "SELECT max(age) FROM singer", "submit"))
    row = {"prompt": "1"}  # 0.6 reads query_idx from the prompt column
    args = {"data_path": str(data), "sqlite_dir": str(tmp_path / "database")}
    exps = run_task(sql_task(row, repeat_times=2, **args), model)
    # each episode works on its own copy: the DELETE reached neither the file nor the other run
    assert [e.reward for e in exps] == [0.0, 0.0]  # max(age) of an emptied table: (None,)
    assert "Database: concert" in exps[0].messages[1]["content"]
    assert exps[0].info["query_idx"] == 1
    assert sqlite3.connect(db_file).execute("SELECT count(*) FROM singer").fetchone() == (3,)
    model = FakeModelWrapper(agent("SELECT max(age) FROM singer", "submit"))
    [exp] = run_task(sql_task(row, **args), model)
    assert exp.reward == 1.0


def test_missing_pieces_are_named():
    no_db = {k: v for k, v in ROW.items() if k != "setup_sql"}
    with pytest.raises(MissingTaskFieldError, match="sqlite_dir"):
        sql_task(no_db).to_workflow(FakeModelWrapper())
    with pytest.raises(MissingTaskFieldError, match="data_path"):
        sql_task({"query_idx": 3}).to_workflow(FakeModelWrapper())
    with pytest.raises(ValueError, match="backend must be one of"):
        sql_task(backend="mysql").to_workflow(FakeModelWrapper())
    if importlib.util.find_spec("intercode") is None:
        with pytest.raises(EnvironmentNotInstalledError, match="pip install intercode-bench"):
            sql_task(backend="intercode", data_path="d.json").to_workflow(FakeModelWrapper())


# ====================================================================== the real-env path
class FakeSqlEnv(SQLiteSqlEnv):
    """Double of ``intercode.envs.SqlEnv``: InterCode's constructor checks, SQLite inside."""

    made: list[FakeSqlEnv] = []

    def __init__(self, image_name: str, **kwargs: Any) -> None:
        preprocess = kwargs["preprocess"]
        # what IntercodeEnv.__init__ asserts about the preprocess function
        assert isinstance(preprocess, type(lambda x: x))
        assert preprocess.__annotations__["return"] == str  # noqa: E721 - InterCode's check
        assert preprocess.__annotations__["record"] == Dict
        super().__init__(image_name, records=[ROW], preprocess=preprocess)
        self.kwargs = kwargs
        self.cur, self.cnx = types.SimpleNamespace(), types.SimpleNamespace()
        self.closed: list[str] = []
        self.cur.close = lambda: self.closed.append("cur")
        self.cnx.close = lambda: self.closed.append("cnx")
        self.reset_indices: list[int] = []
        FakeSqlEnv.made.append(self)

    def reset(self, index=None):
        self.reset_indices.append(index)
        return super().reset(0)


def test_real_backend_builds_intercodes_env_as_06_does(monkeypatch):
    FakeSqlEnv.made = []
    envs = types.ModuleType("intercode.envs")
    envs.SqlEnv = FakeSqlEnv
    package = types.ModuleType("intercode")
    package.__path__ = []
    monkeypatch.setitem(sys.modules, "intercode", package)
    monkeypatch.setitem(sys.modules, "intercode.envs", envs)
    model = FakeModelWrapper(agent(GOLD, "submit"))
    args = {"backend": "intercode", "data_path": "/data/ic_spider_dev.json", "verbose": True}
    exps = run_task(sql_task({"query_idx": 7, "db": "concert"}, repeat_times=2, **args), model)
    assert [e.reward for e in exps] == [1.0, 1.0]
    assert "MySQL" in exps[0].messages[0]["content"]
    env = FakeSqlEnv.made[0]
    assert env.image_name == "docker-env-sql" and env.kwargs["verbose"] is True
    assert env.kwargs["data_path"] == "/data/ic_spider_dev.json"
    assert env.reset_indices == [7]
    assert all(e.closed == ["cur", "cnx"] for e in FakeSqlEnv.made)  # the container stays up


# ====================================================================== the reward
def test_sql_reward_is_intercodes_rule():
    assert sql_reward([], []) == 1.0
    assert sql_reward([(1,), (2,)], [(1,), (2,)]) == 1.0
    assert sql_reward([(2,), (1,)], [(1,), (2,)]) == -1.0
    assert sql_reward([(1,), (2,), (3,)], [(1,), (2,)]) == 0.67
    assert sql_reward([(1,), (1,)], [(1,)]) == 0.5  # rows count as a multiset
    assert sql_reward([(5,)], [(1,)]) == 0.0
    assert sql_reward("Error executing query: x", [(1,)]) == 0.0
    assert sql_reward(None, [(1,)]) == 0.0


def test_kendall_tau_b_with_ties():
    assert kendall_tau_b([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    assert kendall_tau_b([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    assert kendall_tau_b([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / 6**0.5)
    assert kendall_tau_b(["b", "a"], ["a", "b"]) == pytest.approx(-1.0)
    assert kendall_tau_b([1], [1]) is None and kendall_tau_b([1, 1], [1, 2]) is None
    big = list(range(3000))
    assert kendall_tau_b(big, big[::-1]) == pytest.approx(-1.0)
