"""InterCode-SQL: answer a question about a database by running SQL, then ``submit``.

Trinity-RFT 0.6's ``intercode_sql_workflow``. Each episode opens InterCode's SQL environment on
one record of its data file (the question, the gold query, the database) and plays it with the
text-environment loop of :class:`~trinity.workflows.envs.base.TextEnvWorkflow`:

* observation: first the question and the database, then each statement's result (rows, or
  InterCode's ``Error executing query: …``), cut at ``max_observation_chars``;
* action: one SQL statement, or ``submit`` when the latest result is the answer, inside
  ``<action>…</action>``; a reply without one gets feedback and counts as a step;
* reward: InterCode's, given on ``submit``: intersection over union of the submitted and the
  gold result rows, scaled by how well their order agrees (1 for an exact answer); when the
  turn limit comes first the latest result is submitted for the model (``auto_submit``, as in
  0.6); ``success`` is a reward of 1.

Environments (``workflow_args.backend``):

* ``intercode``: the real ``intercode.envs.SqlEnv`` (``pip install intercode-bench``, with
  Docker running its MySQL image ``image_name``, default ``docker-env-sql``); needs
  ``data_path``, InterCode's data file;
* ``sqlite``: the local stand-in :class:`~trinity.workflows.envs.intercode_sqlite.SQLiteSqlEnv`
  with the same interface, over SQLite databases found under ``sqlite_dir`` (e.g. Spider's
  ``database/`` folder) or built from a record's ``setup_sql``; records come from ``data_path``
  or from the task row itself (``query``, ``gold``, ``db``);
* ``auto`` (default): ``intercode`` when the package imports, else ``sqlite``.

Task fields: ``query_idx`` (the record's index in ``data_path``; 0.6 also reads it from the
prompt column, ``task.task_desc``), ``data_path``, ``db``, ``sqlite_dir``, or a whole record.
``workflow_args``: ``max_env_steps`` (0.6's name) or ``max_steps`` (default 10),
``image_name``, ``verbose``, ``auto_submit`` (default true), ``backend``, ``data_path``,
``sqlite_dir``, ``max_observation_chars`` (default 4000), and those of ``TextEnvWorkflow``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Dict, Optional

from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.common import MissingTaskFieldError
from trinity.workflows.envs.base import (
    EnvStep,
    Episode,
    TextEnvWorkflow,
    _positive_int,
    as_bool,
    import_env_module,
)
from trinity.workflows.envs.env_args import read_max_steps
from trinity.workflows.envs.intercode_sqlite import SQLiteSqlEnv, load_records, record_db

__all__ = ["InterCodeSQLWorkflow", "INTERCODE_INSTALL", "preprocess_sql"]

INTERCODE_INSTALL = (
    "Install it with: pip install intercode-bench, and keep Docker running with InterCode's "
    "SQL image (see https://github.com/princeton-nlp/intercode); or set "
    "workflow_args.backend: sqlite to use the local SQLite stand-in."
)
BACKENDS = ("auto", "intercode", "sqlite")

INTERCODE_SQL_SYSTEM_PROMPT = """You answer a question about a {dialect} database by running \
SQL statements against it.

Each turn, reason briefly inside <think></think>, then give exactly one action inside \
<action></action>. An action is either one SQL statement, run on the database, or the word \
submit, which hands in the result of your latest statement as the answer and ends the task.
For example:
<think>I need the table's columns first.</think><action>SELECT * FROM singer LIMIT 3;</action>
<think>The last result answers the question.</think><action>submit</action>
Work it out by yourself; do not ask the user anything."""


def preprocess_sql(record: Dict) -> str:
    """InterCode's per-episode preprocess command: select the record's database."""
    return f"use {record_db(record)}"


# InterCode checks the preprocess function's annotations as objects (``Dict`` and ``str``);
# this module's postponed annotations are strings, so set them as the objects it expects.
preprocess_sql.__annotations__ = {"record": Dict, "return": str}


@WORKFLOWS.register_module("intercode_sql_workflow")
class InterCodeSQLWorkflow(TextEnvWorkflow):
    """InterCode-SQL through the text-environment loop (see the module docstring)."""

    default_max_steps = 10
    blocking_env = True
    reuse_envs = False  # one episode per database session, as InterCode's reset expects

    def configure(self, task: Task) -> None:
        who = self.workflow_name
        args = self.workflow_args
        self.max_steps = read_max_steps(args, self.max_steps, who)
        self.image_name = str(args.get("image_name", "docker-env-sql"))
        self.verbose = as_bool(args.get("verbose", False), "verbose", who)
        self.auto_submit = as_bool(args.get("auto_submit", True), "auto_submit", who)
        self.max_observation_chars = _positive_int(
            args.get("max_observation_chars", 4000), "max_observation_chars", who
        )
        self.backend = self._backend()
        data_path = self.setting("data_path")
        self.data_path = str(Path(data_path).expanduser()) if data_path else None
        sqlite_dir = self.setting("sqlite_dir")
        self.sqlite_dir = str(Path(sqlite_dir).expanduser()) if sqlite_dir else None
        self.query_idx = self._query_idx(task)
        if self.backend == "intercode":
            import_env_module("intercode.envs", who, INTERCODE_INSTALL)
            if self.data_path is None:
                raise MissingTaskFieldError(
                    f"{who}: InterCode needs its data file: set workflow_args.data_path or "
                    "the row's 'data_path'."
                )
            if "max_parallel_envs" not in args:
                self.max_parallel_envs = 1  # the episodes share one MySQL container
        else:
            self.record = self._stand_in_record()

    def _backend(self) -> str:
        backend = str(self.workflow_args.get("backend", "auto"))
        if backend not in BACKENDS:
            raise ValueError(
                f"{self.workflow_name}: workflow_args.backend must be one of "
                f"{', '.join(BACKENDS)}, got {backend!r}"
            )
        if backend == "auto":
            return "intercode" if importlib.util.find_spec("intercode") is not None else "sqlite"
        return backend

    def _query_idx(self, task: Task) -> int:
        value: Any = self.raw_task.get("query_idx")
        desc = task.task_desc
        if value is None and desc is not None and str(desc).strip().lstrip("-").isdigit():
            value = desc  # 0.6 reads the index from the prompt column
        if value is None:
            value = 0
        if isinstance(value, bool) or not str(value).strip().lstrip("-").isdigit():
            raise ValueError(f"{self.workflow_name}: query_idx must be an integer, got {value!r}")
        return int(value)

    def _stand_in_record(self) -> dict[str, Any]:
        """The record the SQLite stand-in plays, checked now so a bad row fails at build."""
        who = self.workflow_name
        if self.data_path is not None:
            records = load_records(self.data_path)
            if not 0 <= self.query_idx < len(records):
                raise ValueError(
                    f"{who}: query_idx {self.query_idx} is outside {self.data_path} "
                    f"({len(records)} records)"
                )
            record = records[self.query_idx]
        elif "query" in self.raw_task and "gold" in self.raw_task:
            record = dict(self.raw_task)
        else:
            raise MissingTaskFieldError(
                f"{who}: the SQLite stand-in needs InterCode's data file (workflow_args."
                "data_path) or a row with 'query', 'gold' and 'db'; the row has keys "
                f"{sorted(self.raw_task) or 'none'}. {INTERCODE_INSTALL}"
            )
        if not record.get("setup_sql") and self.sqlite_dir is None:
            raise MissingTaskFieldError(
                f"{who}: the SQLite stand-in needs database {record_db(record)!r}: set "
                "workflow_args.sqlite_dir (a folder of <db>.sqlite files, e.g. Spider's "
                "database/) or give the record a 'setup_sql' script."
            )
        return record

    def build_system_prompt(self) -> str:
        dialect = "MySQL" if self.backend == "intercode" else "SQLite"
        return INTERCODE_SQL_SYSTEM_PROMPT.format(dialect=dialect)

    def env_settings(self) -> Any:
        return (self.backend, self.image_name, self.data_path, self.sqlite_dir)

    # ------------------------------------------------------------------ environment
    def create_env(self, run_index: int) -> Any:
        if self.backend == "intercode":
            envs = import_env_module("intercode.envs", self.workflow_name, INTERCODE_INSTALL)
            return envs.SqlEnv(
                self.image_name,
                data_path=self.data_path,
                preprocess=preprocess_sql,
                verbose=self.verbose,
            )
        return SQLiteSqlEnv(
            "sqlite",
            records=[self.record],
            preprocess=preprocess_sql,
            verbose=self.verbose,
            database_dir=self.sqlite_dir,
        )

    def reset_env(self, env: Any, run_index: int) -> str:
        index = self.query_idx if self.backend == "intercode" else 0
        observation, _info = env.reset(index)
        query = getattr(env, "query", None) or self.raw_task.get("query", "")
        db = self.raw_task.get("db") or record_db(getattr(env, "record", None) or {})
        text = f"Question: {query}\nDatabase: {db}"
        if observation is not None and observation != query:
            text += f"\n{self._render(observation)}"
        return text

    def step_env(self, env: Any, action: str) -> EnvStep:
        observation, reward, done, info = env.step(action)
        reward = float(reward or 0.0)
        return EnvStep(
            observation=self._render(observation),
            reward=reward,
            done=bool(done),
            success=bool(done) and reward >= 1.0,
            info={
                "terminate_reason": "submitted" if done else "",
                "action_executed": bool((info or {}).get("action_executed")),
            },
        )

    def close_env(self, env: Any) -> None:
        if self.backend == "sqlite":
            env.close()
            return
        # as 0.6: close this session's cursor and connection, leave the shared container up
        for attr in ("cur", "cnx"):
            handle = getattr(env, attr, None)
            if handle is not None:
                try:
                    handle.close()
                except Exception as exc:  # noqa: BLE001 - a dead connection is closed anyway
                    self.logger.debug("%s: closing %s failed: %s", self.workflow_name, attr, exc)

    def _render(self, observation: Any) -> str:
        if observation is None:
            text = "The statement ran; it returns no rows."
        elif isinstance(observation, list):
            text = f"{len(observation)} row(s): {observation}"
        else:
            text = str(observation)
        limit = self.max_observation_chars
        if len(text) > limit:
            text = text[:limit] + f" ... [{len(text) - limit} more characters]"
        return text

    def invalid_action_feedback(self, env: Any, response_text: str, episode: Episode) -> str:
        return (
            "Invalid response: no action found. Put one SQL statement, or submit, inside "
            "<action></action>. Nothing was run."
        )

    # ------------------------------------------------------------------ outcome
    async def _play(self, env: Any, episode: Episode) -> None:
        await super()._play(env, episode)
        if self.auto_submit and not episode.done and episode.terminate_reason == "max_steps":
            # out of turns: hand in the latest result, as 0.6 does
            step = await self._env_call(self.step_env, env, "submit")
            episode.last = step
            episode.total_reward += step.reward
            episode.done = True
            episode.terminate_reason = "auto_submit"

    def episode_reward(self, episode: Episode) -> float:
        return float(episode.last.reward) if episode.last is not None else 0.0

    def episode_info(self, episode: Episode) -> dict[str, Any]:
        last: Optional[EnvStep] = episode.last
        return {
            "query_idx": self.query_idx,
            "env_rounds": episode.steps,
            "final_reward": self.episode_reward(episode),
            "action_executed": 1 if last is not None and last.info.get("action_executed") else 0,
            "backend": self.backend,
        }
