"""The SQLAlchemy engines of the SQL storage (:mod:`trinity.buffer.storage.sql`): one per
database URL per process, shared by that process's storages of the URL, and closed when the last
of them closes (or at exit).

``path`` is a SQLAlchemy URL or a plain file path (a SQLite file there, see :func:`sql_url`).
SQLite files run in WAL mode (readers in other processes see committed batches while a writer is
active); closing an engine checkpoints the WAL into the database, so SQLite removes its ``-wal``
and ``-shm`` side files and the database is one self-contained file again. In a process serving
SQL storages from a Ray actor (:mod:`trinity.buffer.storage.sql_actor`) these are the actor's
engines.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any, Optional

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from trinity.buffer.storage.errors import StorageConfigError
from trinity.utils.log import get_logger

__all__ = ["sql_url", "keep_sqlite_connections"]

logger = get_logger(__name__)

_ENGINES: dict[tuple[int, str], Engine] = {}
#: open storages per engine; the engine is closed when its last storage closes
_USERS: dict[tuple[int, str], int] = {}
#: the database file each SQLite engine was last seen using (see :func:`_engine`)
_FILES: dict[tuple[int, str], Optional[tuple[int, int]]] = {}
_ENGINES_LOCK = threading.Lock()
#: whether SQLite engines created from now on keep connections open between statements
_KEEP_SQLITE_CONNECTIONS = True


def keep_sqlite_connections(keep: bool) -> None:
    """Whether this process's SQLite engines created from now on keep their connections open
    between statements (the default: a pool). The SQL actor keeps none: a long-lived process
    holding a connection to a SQLite file keeps its ``-wal`` / ``-shm`` files, which a database
    created again at that path (after the file was deleted) would open as its own and fail
    with "disk I/O error". Holding no connection between calls, the actor leaves none behind:
    SQLite removes them as each statement's connection closes."""
    global _KEEP_SQLITE_CONNECTIONS
    _KEEP_SQLITE_CONNECTIONS = keep


def sql_url(path: str) -> str:
    """A SQLAlchemy URL for ``path``: URLs pass through, anything else is a SQLite file."""
    if not path:
        raise StorageConfigError("sql storage needs `path` (a database URL or a SQLite file)")
    if "://" in path:
        try:
            url = make_url(path)
        except Exception as exc:  # noqa: BLE001 - re-raised with the field named
            raise StorageConfigError(f"`path` {path!r} is not a valid database URL: {exc}") from exc
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            # like the plain-path form, create the database file's directory
            os.makedirs(os.path.dirname(os.path.abspath(url.database)), exist_ok=True)
        return path
    path = os.path.abspath(os.path.expanduser(path))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return f"sqlite:///{path}"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL: readers do not block the writer and see only committed transactions; NORMAL sync
    # is still atomic against a killed process (only power loss can drop the last commit).
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def _is_sqlite_file(url: str) -> bool:
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:")


def _file_identity(url: str) -> Optional[tuple[int, int]]:
    """``(device, inode)`` of a SQLite URL's database file, ``None`` while it does not exist."""
    try:
        st = os.stat(make_url(url).database or "")
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _engine(url: str, use: bool = False) -> Engine:
    """One engine per URL per process (engines hold pools; forked children need their own).
    ``use``: count one more open storage of it (see :func:`_release_engine`).

    A SQLite file deleted (or replaced) since its engine connected is opened afresh: the
    pooled connections still hold the old file, so they are closed and new ones open the
    file now at that path."""
    key = (os.getpid(), url)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is not None and _is_sqlite_file(url):
            now = _file_identity(url)
            known = _FILES.get(key)
            if known is not None and now != known:
                engine.dispose()
            _FILES[key] = now
        if engine is None:
            parsed = make_url(url)
            kwargs: dict[str, Any] = {}
            if parsed.get_backend_name() == "sqlite":
                kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
                if not _KEEP_SQLITE_CONNECTIONS and _is_sqlite_file(url):
                    kwargs["poolclass"] = NullPool
            engine = create_engine(url, **kwargs)
            if _is_sqlite_file(url):
                event.listen(engine, "connect", _sqlite_pragmas)
                _FILES[key] = _file_identity(url)

                def _remember_file(_conn: Any, _record: Any, key: Any = key) -> None:
                    # the file this connection opened (SQLite creates it on first connect)
                    _FILES[key] = _file_identity(key[1])

                event.listen(engine, "connect", _remember_file)
            _ENGINES[key] = engine
        if use:
            _USERS[key] = _USERS.get(key, 0) + 1
        return engine


def _close_engine(url: str, engine: Engine) -> None:
    """Checkpoint a SQLite file's WAL into the database, then close the engine's connections:
    the last connection to close makes SQLite delete the ``-wal`` and ``-shm`` files."""
    try:
        if _is_sqlite_file(url):
            with engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    except Exception as exc:  # noqa: BLE001 - closing must not fail a run that is ending
        logger.debug("WAL checkpoint of %s failed: %s", url, exc)
    finally:
        engine.dispose()


def _release_engine(url: str) -> None:
    """One storage of ``url`` closed; the last one closes the engine (see :func:`_close_engine`)."""
    key = (os.getpid(), url)
    with _ENGINES_LOCK:
        users = _USERS.get(key, 0) - 1
        if users > 0:
            _USERS[key] = users
            return
        _USERS.pop(key, None)
        _FILES.pop(key, None)
        engine = _ENGINES.pop(key, None)
    if engine is not None:
        _close_engine(url, engine)


@atexit.register
def _close_all_engines() -> None:
    """Close this process's engines still open at exit (readers that were never closed)."""
    pid = os.getpid()
    with _ENGINES_LOCK:
        mine = [(key, engine) for key, engine in _ENGINES.items() if key[0] == pid]
        for key, _ in mine:
            _ENGINES.pop(key, None)
            _USERS.pop(key, None)
    for (_, url), engine in mine:
        _close_engine(url, engine)
