"""A SQL storage served by its named Ray actor ``sql-<name>`` (``wrap_in_ray``, as in
Trinity-RFT 0.6).

With ``wrap_in_ray`` set (the default) while Ray is initialized, the readers and writers of a
``storage_type: sql`` storage do not open the database themselves:
:func:`~trinity.buffer.storage.sql.open_sql_storage` gives them a :class:`SQLActorStorage`,
which has the methods of :class:`~trinity.buffer.storage.sql_table.SQLStorage` they call and runs each
one in the actor. The actor owns the SQLAlchemy engines (:mod:`trinity.buffer.storage.sql_engine`,
one per database in its process) and one :class:`~trinity.buffer.storage.sql_table.SQLStorage` per
open reader or writer, so every reader keeps its own read position (``state_dict``) and a writer
its transactions, exactly as in-process.

* The actor is created, found and killed as the queue's is
  (:mod:`trinity.buffer.storage.ray_actor`): named ``sql-<storage name>`` in the storage's
  ``ray_namespace``, ``get_if_exists``, detached, no CPU. It is threaded: a slow statement (a
  locked SQLite file) does not hold up the other readers and writers.
* Rows cross as plain values (:func:`~trinity.buffer.storage.sql.rows_of`: an experience as its
  ``serialize()`` bytes, a task row as its dict), never pickled objects; the actor never decodes
  an experience and starts without torch.
* Outcomes come back as ``(status, payload)`` tuples: a config error or a write of the wrong
  kind of rows raises the same exception types as in-process; any other failure in the actor
  (a database error after its retries) is a :class:`~trinity.buffer.storage.errors.StorageError`
  naming the storage and the actor.
* Nothing waits forever: each call is bounded by what the storage's retries may take (each try
  of a statement may wait ``_BUSY_SECONDS`` on a locked SQLite file), then raises
  :class:`~trinity.buffer.storage.errors.StorageTimeoutError`; an actor that died raises
  :class:`~trinity.buffer.storage.errors.StorageError` naming the storage at once. Reads wait
  for rows as before (``max_read_timeout``, in the reader: each wait is short calls).
* The database path is made absolute here, before it reaches the actor, whose working directory
  is not the caller's. The actor holds no SQLite connection between calls
  (:func:`~trinity.buffer.storage.sql_engine.keep_sqlite_connections`): it may outlive its
  clients, and a connection it kept to a database file deleted since would leave that file's
  ``-wal`` / ``-shm`` files for a new database at the same path to trip over.
"""

from __future__ import annotations

import operator
import os
import threading
import types
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Optional

import ray
from sqlalchemy.engine import make_url

from trinity.buffer.storage.errors import StorageConfigError, StorageError, StorageTimeoutError
from trinity.buffer.storage.ray_actor import kill_named_actor, named_actor
from trinity.buffer.storage.sql_engine import keep_sqlite_connections, sql_url
from trinity.buffer.storage.sql_table import (
    EXPERIENCE_ROWS,
    SQLStorage,
    rows_of,
    sql_name_and_path,
    table_name,
)
from trinity.utils.log import get_logger

__all__ = ["SQLActor", "SQLActorStorage", "sql_actor_name", "kill_sql_actor"]

logger = get_logger(__name__)

_MAX_CONCURRENCY = 16
#: seconds one SQL statement may wait on a locked SQLite file (sql_engine's busy_timeout)
_BUSY_SECONDS = 30.0
_ERRORS: dict[str, type[Exception]] = {"config": StorageConfigError, "type": TypeError}

#: what a client may run on its storage in the actor: SQLStorage's methods by name
_OPS: dict[str, Callable[..., Any]] = {
    "kind": operator.attrgetter("kind"),
    **{
        name: getattr(SQLStorage, name)
        for name in (
            "insert_rows",
            "select_after",
            "select_least_read",
            "last_id",
            "delete_after",
            "count",
            "live_writers",
            "add_live_mark",
            "beat_live_mark",
            "remove_live_mark",
        )
    },
}


def sql_actor_name(storage_config: Any) -> str:
    """The Ray actor name of a SQL storage (Trinity-RFT's)."""
    return f"sql-{storage_config.name}"


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except StorageConfigError as exc:
        return "config", str(exc)
    except TypeError as exc:
        return "type", str(exc)
    except Exception as exc:  # noqa: BLE001 - sent to the caller, which raises it by name
        return "error", f"{type(exc).__name__}: {exc}"


class SQLActor:
    """The actor body: this process's engines, and one :class:`SQLStorage` per open client
    (by its handle id)."""

    def __init__(self) -> None:
        self._storages: dict[str, SQLStorage] = {}
        self._lock = threading.Lock()
        # this process outlives its clients: it holds no SQLite connection between calls
        keep_sqlite_connections(False)

    def open(
        self, handle: str, settings: dict[str, Any], kind: Optional[str], default_kind: str
    ) -> tuple[str, Any]:
        """Open a storage for the client ``handle``; its outcome holds the table's kind."""

        def _do() -> Optional[str]:
            storage = SQLStorage(
                types.SimpleNamespace(**settings), kind=kind, default_kind=default_kind
            )
            with self._lock:
                old = self._storages.pop(handle, None)
                self._storages[handle] = storage
            if old is not None:
                old.close()
            return storage.kind

        return _outcome(_do)

    def call(self, handle: str, op: str, *args: Any) -> tuple[str, Any]:
        """Run ``SQLStorage.<op>(*args)`` on the storage of ``handle``."""

        def _do() -> Any:
            with self._lock:
                storage = self._storages.get(handle)
            if storage is None:
                raise StorageError(f"no storage is open for this client ({op}); open it first")
            return _OPS[op](storage, *args)

        return _outcome(_do)

    def close(self, handle: str) -> tuple[str, Any]:
        """Close the storage of ``handle`` (the last one of a database closes its engine)."""
        with self._lock:
            storage = self._storages.pop(handle, None)
        return _outcome(storage.close if storage is not None else lambda: None)

    def open_storages(self) -> int:
        """How many clients have a storage open here."""
        with self._lock:
            return len(self._storages)


def _absolute_url(url: str) -> str:
    """``url`` with a relative SQLite file made absolute (the actor runs elsewhere)."""
    parsed = make_url(url)
    database = parsed.database
    if (
        parsed.get_backend_name() == "sqlite"
        and database not in (None, "", ":memory:")
        and not database.startswith("file:")
        and not os.path.isabs(database)
    ):
        return parsed.set(database=os.path.abspath(database)).render_as_string(hide_password=False)
    return url


class SQLActorStorage:
    """The storage of a SQL reader or writer whose database the named actor ``sql-<name>``
    opens: :class:`SQLStorage`'s methods (``kind``, ``insert``, ``select_after``, ``last_id``,
    ``delete_after``, ``count``, ``live_writers``, the live marks, ``close``), each run by the
    actor on this client's own storage there.

    Args: as for :class:`SQLStorage`; Ray must be initialized.
    """

    def __init__(
        self,
        storage_config: Any,
        kind: Optional[str] = None,
        default_kind: str = EXPERIENCE_ROWS,
    ) -> None:
        raw_name = getattr(storage_config, "name", "") or ""
        self.name, path = sql_name_and_path(storage_config)
        self.actor_name = sql_actor_name(storage_config)
        if not ray.is_initialized():
            raise RuntimeError(
                f"storage {self.name!r}: the SQL actor {self.actor_name!r} needs ray.init() "
                "first (or wrap_in_ray: false to open the database in this process)"
            )
        self.url = _absolute_url(sql_url(path))
        self.table_name = table_name(raw_name)
        retries = int(getattr(storage_config, "max_retry_times", 3))
        interval = float(getattr(storage_config, "max_retry_interval", 1))
        #: seconds one call may take: every try of a statement waiting on a locked file
        self.timeout = (retries + 1) * (_BUSY_SECONDS + interval) + 60.0
        self._settings = {
            "name": raw_name,
            "path": self.url,
            "max_retry_times": retries,
            "max_retry_interval": interval,
        }
        self._kinds = (kind, default_kind)
        self.handle = uuid.uuid4().hex
        self.actor = named_actor(
            SQLActor, self.actor_name, storage_config, max_concurrency=_MAX_CONCURRENCY
        )
        self._kind: Optional[str] = None
        self._closed = True
        self._open()

    # ------------------------------------------------------------------ calls

    def _result(self, what: str, call: Callable[[], Any]) -> Any:
        try:
            status, payload = ray.get(call(), timeout=self.timeout)
        except ray.exceptions.GetTimeoutError:
            raise StorageTimeoutError(
                f"storage {self.name!r}: the SQL actor {self.actor_name!r} did not answer "
                f"{what} within {self.timeout:.0f} s"
            ) from None
        except ray.exceptions.RayActorError as exc:
            raise StorageError(
                f"storage {self.name!r}: the SQL actor {self.actor_name!r} that serves it is "
                f"gone ({type(exc).__name__}); a reader or writer opened now starts a new one"
            ) from exc
        except ray.exceptions.RayError as exc:
            raise StorageError(
                f"storage {self.name!r}: {what} through the SQL actor {self.actor_name!r} "
                f"failed: {exc}"
            ) from exc
        if status == "ok":
            return payload
        if status in _ERRORS:
            raise _ERRORS[status](payload)
        raise StorageError(
            f"storage {self.name!r}: {what} failed in the SQL actor {self.actor_name!r}: {payload}"
        )

    def _open(self) -> None:
        self._kind = self._result(
            "open", lambda: self.actor.open.remote(self.handle, self._settings, *self._kinds)
        )
        self._closed = False

    def _op(self, op: str, *args: Any) -> Any:
        if self._closed:  # used after close: opened again, as a SQLStorage is
            self._open()
        return self._result(op, lambda: self.actor.call.remote(self.handle, op, *args))

    # ------------------------------------------------------------------ SQLStorage's methods

    @property
    def kind(self) -> Optional[str]:
        """The table's kind (``None`` until one is written or found); fixed once known."""
        if self._kind is None:
            self._kind = self._op("kind")
        return self._kind

    def insert(self, items: Sequence[Any]) -> None:
        if items:
            self._kind = self._op("insert_rows", *rows_of(items))

    def select_after(self, last_id: int, limit: Optional[int]) -> list[tuple[int, Any]]:
        return self._op("select_after", last_id, limit)

    def select_least_read(self, limit: int) -> list[tuple[int, Any]]:
        return self._op("select_least_read", limit)

    def last_id(self) -> int:
        return self._op("last_id")

    def delete_after(self, last_id: int) -> int:
        return self._op("delete_after", last_id)

    def count(self) -> int:
        return self._op("count")

    def live_writers(self, max_age: float) -> int:
        return self._op("live_writers", max_age)

    def add_live_mark(self, writer: str) -> None:
        self._op("add_live_mark", writer)

    def beat_live_mark(self, writer: str) -> None:
        self._op("beat_live_mark", writer)

    def remove_live_mark(self, writer: str) -> None:
        self._op("remove_live_mark", writer)

    def close(self) -> None:
        """Close this client's storage in the actor. Idempotent; an actor that is gone holds
        nothing open, so closing never fails."""
        if self._closed:
            return
        self._closed = True
        try:
            self._result("close", lambda: self.actor.close.remote(self.handle))
        except StorageError as exc:
            logger.debug("closing %s: %s", self.name, exc)


def kill_sql_actor(storage_config: Any) -> bool:
    """Kill the SQL actor of ``storage_config`` (it is detached, so nothing else does); returns
    whether one existed. The data stays in the database."""
    return kill_named_actor(sql_actor_name(storage_config), storage_config)
