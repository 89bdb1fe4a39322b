"""The data side of ``trinity view``: an experience table read page by page
(:class:`ExperienceTable`) and its rows decoded with a tokenizer, for the Streamlit page
(:mod:`trinity.launcher.viewer_app`) and for use on their own. Nothing here creates or changes
a table."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # imported where used: ``trinity view --help`` must not wait for torch
    from trinity.buffer.storage.sql import SQLStorage
    from trinity.common.experience import Experience

__all__ = [
    "ViewError",
    "ViewTarget",
    "DecodedExperience",
    "ExperienceRow",
    "ExperienceTable",
    "RowFilter",
    "decode_experience",
    "messages_of",
    "token_details",
]


#: the variables the page (:mod:`trinity.launcher.viewer_app`) reads its target from
ENV_URL = "TRINITY_VIEW_URL"
ENV_TABLE = "TRINITY_VIEW_TABLE"
ENV_TOKENIZER = "TRINITY_VIEW_TOKENIZER"
ENV_SCHEMA = "TRINITY_VIEW_SCHEMA"


class ViewError(ValueError):
    """Bad input to ``trinity view``: the option, its value and what is wrong (exit 2)."""


# ------------------------------------------------------------------ what to show


@dataclass(frozen=True)
class ViewTarget:
    """The table to show and how: database URL, table name, tokenizer path, schema.

    ``origin`` says, per option, where a value came from when it was not typed
    (``"--config run.yaml: model.model_path"``), so an error about it can say so.
    """

    url: str
    table: str
    tokenizer: str
    schema: str = "experience"
    origin: dict[str, str] = field(default_factory=dict)

    def describe(self, option: str, value: str) -> str:
        """``--url VALUE`` plus where it came from, for messages."""
        source = self.origin.get(option)
        return f"{option} {value}" + (f" (from {source})" if source else "")

    def environment(self) -> dict[str, str]:
        """The variables :mod:`trinity.launcher.viewer_app` reads its target from."""
        return {
            ENV_URL: self.url,
            ENV_TABLE: self.table,
            ENV_TOKENIZER: self.tokenizer,
            ENV_SCHEMA: self.schema,
        }


# ------------------------------------------------------------------ reading the table


@dataclass(frozen=True)
class RowFilter:
    """Which rows to show: a reward range, a model version range (bounds included; ``None``:
    open) and a substring of the EID (``"3/"`` -> the experiences of explore step 3)."""

    reward_min: Optional[float] = None
    reward_max: Optional[float] = None
    version_min: Optional[int] = None
    version_max: Optional[int] = None
    eid_contains: str = ""


@dataclass
class ExperienceRow:
    """One row of the table: its columns and the experience decoded from ``exp_bytes``."""

    id: int
    eid: str
    reward: Optional[float]
    model_version: Optional[int]
    created_at: Optional[float]
    experience: Experience


@dataclass(frozen=True)
class DecodedExperience:
    """An experience's prompt and response as text (special tokens kept: the chat template
    is part of what the model saw) and their lengths in tokens."""

    prompt_text: str
    response_text: str
    prompt_length: int
    response_length: int


def _sqlite_file(url: str) -> Optional[str]:
    """The file of a SQLite URL (``None``: another database, or in memory)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return os.path.abspath(os.path.expanduser(parsed.database))


class ExperienceTable:
    """Read access to one experience table: count and page through rows (filtered, in write
    order or newest first), fetch one by id.

    It opens the table through the buffer's own :class:`~trinity.buffer.storage.sql.SQLStorage`
    (the layout the writers use; the engine shared with them in this process) and never
    creates anything: a SQLite file or a table that is not there is a :class:`ViewError`
    naming ``--url`` / ``--table`` (``target`` says where the values came from).
    """

    def __init__(self, url: str, table: str, target: Optional[ViewTarget] = None) -> None:
        target = target or ViewTarget(url=url, table=table, tokenizer="")
        try:
            path = _sqlite_file(url)
        except Exception as exc:  # noqa: BLE001 - sqlalchemy's ArgumentError and friends
            raise ViewError(f"{target.describe('--url', url)}: not a database URL: {exc}") from None
        if path is not None and not os.path.isfile(path):
            raise ViewError(f"{target.describe('--url', url)}: no such database file ({path})")
        from trinity.buffer.storage.sql import EXPERIENCE_ROWS, SQLStorage, table_name

        if table_name(table) != table:
            raise ViewError(
                f"{target.describe('--table', table)}: not a table name a buffer writes "
                "(letters, digits and _)"
            )

        @dataclass
        class _Storage:  # what SQLStorage reads of a storage config
            name: str
            path: str
            max_retry_times: int = 3
            max_retry_interval: float = 1.0

        try:
            self.storage: SQLStorage = SQLStorage(_Storage(name=table, path=url))
        except Exception as exc:  # noqa: BLE001 - a driver that is missing, a refused login
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ViewError(f"{target.describe('--url', url)}: cannot open: {reason}") from None
        if self.storage.kind != EXPERIENCE_ROWS:
            tables = self.table_names()
            self.storage.close()
            if self.storage.kind is None:
                there = ", ".join(tables) if tables else "none"
                raise ViewError(
                    f"{target.describe('--table', table)}: no such table in {url} "
                    f"(tables there: {there})"
                )
            raise ViewError(
                f"{target.describe('--table', table)}: holds task rows, not experiences"
            )
        self.url = url
        self.table = table

    def table_names(self) -> list[str]:
        """The tables of the database."""
        from sqlalchemy import inspect

        return sorted(inspect(self.storage.engine).get_table_names())

    def _where(self, stmt: Any, filters: Optional[RowFilter]) -> Any:
        if filters is None:
            return stmt
        c = self.storage.table.c
        if filters.reward_min is not None:
            stmt = stmt.where(c.reward >= filters.reward_min)
        if filters.reward_max is not None:
            stmt = stmt.where(c.reward <= filters.reward_max)
        if filters.version_min is not None:
            stmt = stmt.where(c.model_version >= filters.version_min)
        if filters.version_max is not None:
            stmt = stmt.where(c.model_version <= filters.version_max)
        if filters.eid_contains:
            stmt = stmt.where(c.eid.contains(filters.eid_contains, autoescape=True))
        return stmt

    def count(self, filters: Optional[RowFilter] = None) -> int:
        """How many rows pass ``filters`` (every row: ``None``)."""
        from sqlalchemy import func, select

        stmt = self._where(select(func.count()).select_from(self.storage.table), filters)
        with self.storage.engine.connect() as conn:
            return int(conn.execute(stmt).scalar_one())

    def rows(
        self,
        offset: int = 0,
        limit: int = 10,
        filters: Optional[RowFilter] = None,
        newest_first: bool = False,
    ) -> list[ExperienceRow]:
        """Up to ``limit`` rows passing ``filters`` from ``offset`` on, in write order (id)
        or newest first, each with its experience decoded."""
        from sqlalchemy import select

        c = self.storage.table.c
        order = c.id.desc() if newest_first else c.id
        stmt = self._where(
            select(c.id, c.eid, c.reward, c.model_version, c.created_at, c.exp_bytes), filters
        )
        stmt = stmt.order_by(order).offset(max(0, int(offset))).limit(max(0, int(limit)))
        with self.storage.engine.connect() as conn:
            found = list(conn.execute(stmt))
        return [self._row(r) for r in found]

    def row(self, row_id: int) -> Optional[ExperienceRow]:
        """The row with id ``row_id`` (``None``: there is none)."""
        from sqlalchemy import select

        c = self.storage.table.c
        stmt = select(c.id, c.eid, c.reward, c.model_version, c.created_at, c.exp_bytes).where(
            c.id == int(row_id)
        )
        with self.storage.engine.connect() as conn:
            found = conn.execute(stmt).first()
        return None if found is None else self._row(found)

    @staticmethod
    def _row(r: Any) -> ExperienceRow:
        from trinity.common.experience import Experience

        return ExperienceRow(
            id=int(r[0]),
            eid=str(r[1] or ""),
            reward=None if r[2] is None else float(r[2]),
            model_version=None if r[3] is None else int(r[3]),
            created_at=None if r[4] is None else float(r[4]),
            experience=Experience.deserialize(bytes(r[5])),
        )

    def close(self) -> None:
        """Let go of the database (see :meth:`SQLStorage.close`)."""
        self.storage.close()

    def __enter__(self) -> ExperienceTable:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ------------------------------------------------------------------ decoding


def _ids(tensor: Any) -> list[int]:
    return [] if tensor is None else [int(t) for t in tensor.tolist()]


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    return str(tokenizer.decode(list(ids), skip_special_tokens=False)) if ids else ""


def decode_experience(exp: Experience, tokenizer: Any) -> DecodedExperience:
    """The prompt (``tokens[:prompt_length]``) and response (the rest) as text. A DPO
    experience (``chosen`` / ``rejected``, ``tokens`` the prompt only) shows its chosen
    response as the response."""
    tokens = _ids(exp.tokens)
    prompt = tokens[: exp.prompt_length]
    response = tokens[exp.prompt_length :]
    if not response and exp.chosen is not None:
        response = _ids(exp.chosen)
    return DecodedExperience(
        prompt_text=_decode(tokenizer, prompt),
        response_text=_decode(tokenizer, response),
        prompt_length=len(prompt),
        response_length=len(response),
    )


def token_details(exp: Experience, tokenizer: Any) -> list[dict[str, Any]]:
    """One dict per response token: position, id, its text, the rollout log-prob and whether
    the model generated it (``action_mask``; tool or environment tokens spliced into a
    multi-turn response are 0). Missing log-probs read ``None``."""
    tokens = _ids(exp.tokens)[exp.prompt_length :]
    logprobs = [] if exp.logprobs is None else [float(x) for x in exp.logprobs.tolist()]
    mask = [] if exp.action_mask is None else [bool(x) for x in exp.action_mask.tolist()]
    out = []
    for i, token in enumerate(tokens):
        out.append(
            {
                "position": i,
                "token_id": token,
                "text": _decode(tokenizer, [token]),
                "logprob": logprobs[i] if i < len(logprobs) else None,
                "generated": mask[i] if i < len(mask) else True,
            }
        )
    return out


def messages_of(exp: Experience, tokenizer: Any) -> list[dict[str, str]]:
    """The conversation of an experience, for ``--schema sft``: ``Experience.messages`` when
    it has them (SFT data and multi-turn workflows store them), else the decoded prompt as
    a ``user`` turn and the response as the ``assistant`` turn."""
    if exp.messages:
        return [
            {"role": str(m.get("role", "")), "content": _content_text(m.get("content"))}
            for m in exp.messages
        ]
    decoded = decode_experience(exp, tokenizer)
    turns = [{"role": "user", "content": decoded.prompt_text}]
    if decoded.response_text:
        turns.append({"role": "assistant", "content": decoded.response_text})
    return turns


def _content_text(content: Any) -> str:
    """A message's content as text (OpenAI-style content parts: their text joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(str(part.get("text", f"[{part.get('type', 'part')}]")))
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return str(content)
