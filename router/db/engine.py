"""Creating SQLAlchemy engines for SQLite (WAL) and PostgreSQL, and naming their failures."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import pq
from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import Connection

from ..errors import StoreUnavailable
from ..files import private_dir, private_file
from .durability import begin_statement
from .wal_checkpoints import AUTOCHECKPOINT_PAGES

# SQLite waits this long for a competing writer before giving up.
SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_CACHE_KIB = 64 * 1024
# One process's PostgreSQL connections: kept open, and opened beyond those under load.
POOL_SIZE = 10
MAX_OVERFLOW = 20
# What a process's share never goes below: the connections ``kept`` may hold idle between
# write transactions, and as many again for readers, who would otherwise wait for the pool.
PROCESS_MIN_CONNECTIONS = 8
# Polling for the write lock: first wait, and the longest single wait, in seconds.
WRITE_LOCK_FIRST_WAIT_S = 0.0001
WRITE_LOCK_MAX_WAIT_S = 0.002


def normalize_url(url: str) -> str:
    """Use psycopg 3 for plain ``postgresql://`` URLs."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def make_engine(url: str, *, share: int = 1) -> Engine:
    """An engine for ``url``. ``share``: how many processes split one pool of PostgreSQL
    connections (the API's processes on one port), so together they open no more than one."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        return _sqlite_engine(url)
    return _postgresql_engine(url, share)


# Marks a pooled connection not yet checked out (``record.info``).
_NEW = "toolrouter_new"


def _postgresql_engine(url: str, share: int = 1) -> Engine:
    # psycopg prepares nothing of its own: when it sees an ALTER, a DROP or a ROLLBACK TO
    # SAVEPOINT it deallocates every prepared statement, ``router.db.libpq``'s with its own.
    # Split, not multiplied: N processes of a full pool each would pass the server's
    # ``max_connections`` (100 by default) and be refused, where one process never is.
    engine = create_engine(
        url,
        pool_size=max(1, POOL_SIZE // share),
        max_overflow=max(MAX_OVERFLOW // share, PROCESS_MIN_CONNECTIONS - POOL_SIZE // share),
        connect_args={"prepare_threshold": None},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(_dbapi_connection: Any, record: Any) -> None:
        record.info[_NEW] = True

    @event.listens_for(engine, "checkout")
    def _begin_as_the_ping(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        """Every use of a pooled connection begins with psycopg's ``BEGIN`` (it begins a
        transaction before the first statement), and a connection the server dropped
        (restart, ``pg_terminate_backend``) must be replaced before that use. SQLAlchemy's
        ``pool_pre_ping`` checks with a ``SELECT 1`` of its own: one round trip more per
        transaction, three for a lone call. Sending the ``BEGIN`` here makes it the check:
        if it fails, nothing of the transaction has run, and the pool replaces the
        connection and tries again (as it does when its own ping fails). psycopg then sees
        a transaction in progress and sends no ``BEGIN`` of its own; its ``commit`` and
        ``rollback`` end this one.

        So a connection of these engines is in a transaction from checkout on: its
        isolation level, read-only flag and autocommit cannot be changed then (psycopg
        refuses); roll back first, as ``bench.audit_fill`` does for ``VACUUM``."""
        new = record.info.pop(_NEW, False)
        began, reason = begin_as_the_ping(dbapi_connection)
        if began:
            return
        if new:
            # The pool's replacement failed too: the database's own error, which callers
            # see as ``StoreUnavailable`` (the pool would raise a bare "connection closed").
            raise psycopg.OperationalError(f"BEGIN on a new connection failed: {reason}")
        raise exc.DisconnectionError(f"BEGIN failed: {reason}")

    return engine


def begin_as_the_ping(dbapi_connection: Any) -> tuple[bool, str]:
    """Begin a transaction on an idle PostgreSQL connection (``durability`` says how):
    False, with the reason, when the connection is gone. A connection psycopg begins
    itself (autocommit, an isolation level or read-only flag of its own, or a
    transaction already open) is left to it."""
    pgconn = dbapi_connection.pgconn
    if pgconn.transaction_status == pq.TransactionStatus.UNKNOWN:
        return False, "the connection is gone"  # libpq knows already
    if (
        dbapi_connection.autocommit
        or dbapi_connection.isolation_level is not None
        or dbapi_connection.read_only is not None
        or pgconn.transaction_status != pq.TransactionStatus.IDLE
    ):
        return True, ""
    try:
        result = pgconn.exec_(begin_statement())
    except Exception as error:  # the driver's error for a connection gone
        return False, str(error)
    if result.status == pq.ExecStatus.COMMAND_OK:
        return True, ""
    return False, (result.error_message or b"").decode(errors="replace").strip()


def _sqlite_engine(url: str) -> Engine:
    path = url.split("///", 1)[1] if "///" in url else ""
    if path and path != ":memory:":
        database = Path(path)
        private_dir(database.parent)
        # Made 0600 before SQLite opens it: SQLite gives its -wal and -shm files the
        # database file's permissions.
        private_file(database)
        for companion in ("-wal", "-shm"):
            if (sidecar := database.with_name(database.name + companion)).exists():
                private_file(sidecar)
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin (the documented recipe).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        # SQLite's default page cache is 2 MiB per connection; past that every insert into
        # the calls and audit indexes reads pages back through the OS, and submission slows
        # as the tables grow. Pages are allocated as used.
        cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
        # Checkpoints are the API's checkpoint thread's to run (``router.db.wal_checkpoints``);
        # a commit runs one only past this many pages of log.
        cursor.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the write lock up front: a deferred transaction that reads and then
        # writes can fail with SQLITE_BUSY instead of waiting. Readers stay deferred.
        if conn.get_execution_options().get("readonly"):
            conn.exec_driver_sql("BEGIN")
            return
        try:
            begin_immediate(conn.connection.dbapi_connection, SQLITE_BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error as error:
            # Raised as SQLAlchemy's error, as ``exec_driver_sql`` would, so that callers
            # see ``StoreUnavailable`` for a lock never granted or a file gone.
            raise exc.DBAPIError.instance(
                "BEGIN IMMEDIATE", None, error, sqlite3.Error, dialect=engine.dialect
            ) from None

    return engine


def begin_immediate(
    dbapi_connection: Any, timeout_s: float = SQLITE_BUSY_TIMEOUT_MS / 1000
) -> None:
    """``BEGIN IMMEDIATE``, polling for the write lock in steps of 0.1-2 ms.

    SQLite's own busy handler sleeps 1, 2, 5, 10 … 100 ms between tries, so under a steady
    stream of short write transactions from the API and the workers a writer often sleeps
    far longer than the lock was held. The busy timeout is switched off only for this
    statement and restored before anything else runs.
    """
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA busy_timeout=0")
        deadline = time.monotonic() + timeout_s
        wait = WRITE_LOCK_FIRST_WAIT_S
        while True:
            try:
                cursor.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise
            time.sleep(wait)
            wait = min(wait * 2, WRITE_LOCK_MAX_WAIT_S)
    finally:
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()


@contextmanager
def translate_errors() -> Iterator[None]:
    """Turn a database that does not answer into ``StoreUnavailable``."""
    try:
        yield
    except (exc.OperationalError, exc.InterfaceError) as error:
        reason = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
        raise StoreUnavailable(f"database: {reason}") from None
    except exc.DBAPIError as error:
        if error.connection_invalidated:
            raise StoreUnavailable("database: connection lost") from None
        raise
