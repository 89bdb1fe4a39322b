"""The email database the email-search agent queries (ART's Enron email task).

Trinity-RFT 0.6 reads a SQLite database built from the ``corbt/enron-emails`` data set by its
example's ``prepare_data.py``: table ``emails`` (``id``, ``message_id``, ``subject``,
``from_address``, ``date`` as ``'YYYY-MM-DD HH:MM:SS'``, ``body``, ``file_name``), table
``recipients`` (``email_id``, ``recipient_address``, ``recipient_type`` ``to``/``cc``/``bcc``)
and the full-text index ``emails_fts`` (FTS5 over subject and body). :class:`EmailStore` reads
a database of that layout; :func:`create_email_database` writes one from a list of emails, so
a small local database can stand in for the Enron one (a test's, or a task row's ``emails``).

Searching follows the Enron task's rules: every keyword must appear in the subject or body;
only mail sent from or to (to/cc/bcc) the inbox counts; optional sender, recipient and date
bounds; newest first; at most 10 results, each with a highlighted snippet.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

__all__ = ["EmailStore", "MAX_SEARCH_RESULTS", "create_email_database"]

#: Most results one search returns (the Enron task's limit).
MAX_SEARCH_RESULTS = 10

_SCHEMA = """
CREATE TABLE emails (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT UNIQUE,
    subject TEXT,
    from_address TEXT,
    date TEXT,
    body TEXT,
    file_name TEXT
);
CREATE TABLE recipients (
    email_id INTEGER REFERENCES emails(id) ON DELETE CASCADE,
    recipient_address TEXT,
    recipient_type TEXT
);
CREATE INDEX idx_recipients_address_email ON recipients(recipient_address, email_id);
CREATE VIRTUAL TABLE emails_fts USING fts5(subject, body, content='emails', content_rowid='id');
CREATE TRIGGER emails_fts_insert AFTER INSERT ON emails BEGIN
    INSERT INTO emails_fts (rowid, subject, body) VALUES (new.id, new.subject, new.body);
END;
"""


def create_email_database(
    target: str | Path, emails: Iterable[Mapping[str, Any]]
) -> sqlite3.Connection:
    """Write ``emails`` into a new database at ``target`` (``":memory:"`` for one in memory)
    and return the open connection.

    Each email: ``message_id``, ``date`` (``'YYYY-MM-DD HH:MM:SS'``), ``subject``, ``body``,
    ``from`` (or ``from_address``), ``to`` / ``cc`` / ``bcc`` (lists of addresses),
    optionally ``file_name``.
    """
    conn = sqlite3.connect(str(target), check_same_thread=False)
    conn.executescript(_SCHEMA)
    for email in emails:
        cursor = conn.execute(
            "INSERT INTO emails (message_id, subject, from_address, date, body, file_name) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                str(email["message_id"]),
                email.get("subject"),
                email.get("from", email.get("from_address")),
                str(email["date"]),
                email.get("body"),
                email.get("file_name"),
            ),
        )
        conn.executemany(
            "INSERT INTO recipients (email_id, recipient_address, recipient_type) VALUES (?, ?, ?)",
            [
                (cursor.lastrowid, str(address), kind)
                for kind in ("to", "cc", "bcc")
                for address in (email.get(kind) or email.get(f"{kind}_addresses") or [])
            ],
        )
    conn.commit()
    return conn


class EmailStore:
    """Read access to an email database (thread-safe: one connection behind a lock).

    Args:
        path: the database file, opened read-only.
        emails: instead of ``path``, emails to load into a private in-memory database.
    """

    def __init__(
        self,
        path: Optional[str | Path] = None,
        emails: Optional[Sequence[Mapping[str, Any]]] = None,
    ) -> None:
        if (path is None) == (emails is None):
            raise ValueError("EmailStore needs exactly one of path and emails")
        if emails is not None:
            self.conn = create_email_database(":memory:", emails)
        else:
            file = Path(path).expanduser()  # type: ignore[arg-type]
            if not file.is_file():
                raise FileNotFoundError(f"no email database at {file}")
            self.conn = sqlite3.connect(f"file:{file}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()

    def search(
        self,
        inbox: str,
        keywords: Sequence[str],
        from_addr: Optional[str] = None,
        to_addr: Optional[str] = None,
        sent_after: Optional[str] = None,
        sent_before: Optional[str] = None,
        max_results: int = MAX_SEARCH_RESULTS,
    ) -> list[dict[str, str]]:
        """``[{"message_id", "snippet"}]`` of the matching emails, newest first.

        Dates are ``'YYYY-MM-DD'``; ``sent_before`` is exclusive.

        Raises:
            ValueError: no keywords, or more than :data:`MAX_SEARCH_RESULTS` asked for.
        """
        terms = [str(k) for k in keywords if str(k).strip()]
        if not terms:
            raise ValueError("give at least one keyword")
        if max_results > MAX_SEARCH_RESULTS:
            raise ValueError(f"max_results must be at most {MAX_SEARCH_RESULTS}")
        # each keyword a quoted FTS5 phrase (quotes doubled): all must match
        where = ["emails_fts MATCH ?"]
        params: list[Any] = [" ".join('"' + t.replace('"', '""') + '"' for t in terms)]
        where.append(
            "(e.from_address = ? OR EXISTS (SELECT 1 FROM recipients r "
            "WHERE r.email_id = e.id AND r.recipient_address = ?))"
        )
        params += [inbox, inbox]
        if from_addr:
            where.append("e.from_address = ?")
            params.append(from_addr)
        if to_addr:
            where.append(
                "EXISTS (SELECT 1 FROM recipients t WHERE t.email_id = e.id "
                "AND t.recipient_address = ?)"
            )
            params.append(to_addr)
        if sent_after:
            where.append("e.date >= ?")
            params.append(f"{sent_after} 00:00:00")
        if sent_before:
            where.append("e.date < ?")
            params.append(f"{sent_before} 00:00:00")
        sql = (
            "SELECT e.message_id, snippet(emails_fts, -1, '<b>', '</b>', ' ... ', 15) "
            "FROM emails e JOIN emails_fts ON e.id = emails_fts.rowid "
            f"WHERE {' AND '.join(where)} ORDER BY e.date DESC LIMIT ?"
        )
        params.append(int(max_results))
        with self._lock:
            rows = self.conn.execute(sql, params).fetchall()
        return [{"message_id": row[0], "snippet": row[1]} for row in rows]

    def read(self, message_id: str) -> Optional[dict[str, Any]]:
        """The email with ``message_id`` (headers, recipients by kind, body), or ``None``."""
        with self._lock:
            row = self.conn.execute(
                "SELECT id, message_id, date, subject, from_address, body, file_name "
                "FROM emails WHERE message_id = ?",
                (message_id,),
            ).fetchone()
            if row is None:
                return None
            recipients = self.conn.execute(
                "SELECT recipient_address, recipient_type FROM recipients WHERE email_id = ?",
                (row[0],),
            ).fetchall()
        email: dict[str, Any] = {
            "message_id": row[1],
            "date": row[2],
            "subject": row[3],
            "from_address": row[4],
            "to_addresses": [],
            "cc_addresses": [],
            "bcc_addresses": [],
            "body": row[5],
            "file_name": row[6],
        }
        for address, kind in recipients:
            key = f"{str(kind).lower()}_addresses"
            if key in email:
                email[key].append(address)
        return email

    def close(self) -> None:
        with self._lock:
            self.conn.close()
