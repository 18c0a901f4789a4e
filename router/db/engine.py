"""Creating SQLAlchemy engines for SQLite (WAL) and PostgreSQL, and naming their failures."""

from __future__ import annotations

import functools
import operator
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, cast

import psycopg
from psycopg import pq
from sqlalchemy import Engine, Table, create_engine, event, exc
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql.expression import ClauseElement, Executable

from ..errors import StoreUnavailable
from ..files import private_dir, private_file
from .durability import begin_statement
from .wal_checkpoints import AUTOCHECKPOINT_PAGES

# SQLite waits this long for a competing writer before giving up.
SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_CACHE_KIB = 64 * 1024
# Polling for the write lock: first wait, and the longest single wait, in seconds.
WRITE_LOCK_FIRST_WAIT_S = 0.0001
WRITE_LOCK_MAX_WAIT_S = 0.002


def normalize_url(url: str) -> str:
    """Use psycopg 3 for plain ``postgresql://`` URLs."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        return _sqlite_engine(url)
    return _postgresql_engine(url)


# Marks a pooled connection not yet checked out (``record.info``).
_NEW = "toolrouter_new"


def _postgresql_engine(url: str) -> Engine:
    engine = create_engine(url, pool_size=10, max_overflow=20)

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
        pgconn = dbapi_connection.pgconn
        if pgconn.transaction_status == pq.TransactionStatus.UNKNOWN:
            began, reason = False, "the connection is gone"  # libpq knows already
        elif (
            dbapi_connection.autocommit
            or dbapi_connection.isolation_level is not None
            or dbapi_connection.read_only is not None
            or pgconn.transaction_status != pq.TransactionStatus.IDLE
        ):
            return  # psycopg begins such a transaction itself
        else:
            try:
                result = pgconn.exec_(begin_statement())
                began = result.status == pq.ExecStatus.COMMAND_OK
                reason = (result.error_message or b"").decode(errors="replace").strip()
            except Exception as error:  # the driver's error for a connection gone
                began, reason = False, str(error)
        if began:
            return
        if new:
            # The pool's replacement failed too: the database's own error, which callers
            # see as ``StoreUnavailable`` (the pool would raise a bare "connection closed").
            raise psycopg.OperationalError(f"BEGIN on a new connection failed: {reason}")
        raise exc.DisconnectionError(f"BEGIN failed: {reason}")

    return engine


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


# From this many rows on, PostgreSQL gets them by COPY: psycopg's pipelined executemany
# still sends one INSERT per row, a large share of a batch's time.
COPY_MIN_ROWS = 100


def insert_rows(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """``INSERT`` many rows through the driver's ``executemany``, with the SQL compiled once
    per dialect, table and set of columns.

    SQLAlchemy's own executemany processes every parameter of every row in Python, a
    large share of a big batch's time. The columns written this way are plain strings and
    integers, which need no processing: a table with a column that does goes through
    ``conn.execute`` as usual.
    """
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(row)
    for columns, group in groups.items():
        compiled = _compiled_insert(conn.dialect, table, columns)
        if compiled is None:
            conn.execute(table.insert(), list(group))
            continue
        if conn.dialect.name == "postgresql" and len(group) >= COPY_MIN_ROWS:
            _copy(conn, table, columns, group)
            continue
        sql, order = compiled
        if order is None:
            params: list[Any] = list(group)
        elif len(order) == 1:
            params = [(row[order[0]],) for row in group]
        else:
            values = operator.itemgetter(*order)  # a tuple per row, at C speed
            params = [values(row) for row in group]
        # The driver's own cursor, as for ``execute_direct``: ``exec_driver_sql`` costs
        # about as much CPU as the insert itself.
        with _driver_cursor(conn, sql) as cursor:
            if len(params) == 1:
                # psycopg's executemany is a pipeline: three waits on the server for one row.
                cursor.execute(sql, params[0])
            else:
                cursor.executemany(sql, params)


@functools.cache
def _compiled_insert(
    dialect: Dialect, table: Table, columns: tuple[str, ...]
) -> tuple[str, tuple[str, ...] | None] | None:
    compiled = table.insert().compile(dialect=dialect, column_keys=list(columns))
    if compiled._bind_processors:  # a column type that converts values: not for this path
        return None
    order = tuple(compiled.positiontup) if compiled.positional and compiled.positiontup else None
    return compiled.string, order


def _copy(
    conn: Connection, table: Table, columns: tuple[str, ...], rows: Sequence[Mapping[str, Any]]
) -> None:
    """``COPY … FROM STDIN`` in the caller's transaction; the driver's errors are raised as
    SQLAlchemy's (a duplicate key is an ``IntegrityError``, as from ``conn.execute``)."""
    statement = f"COPY {table.name} ({', '.join(columns)}) FROM STDIN"
    with _driver_cursor(conn, statement) as cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(tuple(row[column] for column in columns))


def execute_direct_many(
    conn: Connection, statement: Executable, params: Sequence[Mapping[str, Any]]
) -> list[DirectResult]:
    """``execute_direct`` for each of ``params``, in order, in ``conn``'s transaction.

    On PostgreSQL they go out together through psycopg's pipeline (the answers, then its
    sync: two round trips), where one at a time each waits for the answer to the one before.
    """
    if len(params) < 2 or conn.dialect.name != "postgresql":
        return [execute_direct(conn, statement, one) for one in params]
    compiled = _driver_sql(conn.dialect, cast(ClauseElement, statement))
    if compiled is None:
        return [execute_direct(conn, statement, one) for one in params]
    values = [{**compiled.fixed, **one} for one in params]
    results: list[DirectResult] = []
    with _driver_cursor(conn, compiled.sql, values) as cursor:
        cursor.executemany(compiled.sql, values, returning=True)
        while True:
            results.append(_result_of(cursor, compiled.columns))
            if not cursor.nextset():
                return results


@contextmanager
def _driver_cursor(conn: Connection, sql: str, params: Any = None) -> Iterator[Any]:
    """A cursor of the driver's own, in ``conn``'s transaction, closed after use. A
    driver's error comes out as SQLAlchemy raises it from ``conn.execute``: the same
    class (so ``translate_errors`` names a database that does not answer), and a
    connection the server dropped is invalidated, not handed back to the pool."""
    dbapi = conn.dialect.loaded_dbapi
    raw: Any = conn.connection.dbapi_connection
    cursor = raw.cursor()
    try:
        yield cursor
    except dbapi.Error as error:
        dropped = conn.dialect.is_disconnect(error, raw, cursor)
        if dropped:
            conn.invalidate()
        raise exc.DBAPIError.instance(
            sql, params, error, dbapi.Error, connection_invalidated=dropped, dialect=conn.dialect
        ) from None
    finally:
        cursor.close()


@dataclass(frozen=True, slots=True)
class DirectResult:
    """What a statement run by ``execute_direct`` returned: all its rows, fetched."""

    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    rowcount: int

    def first(self) -> dict[str, Any] | None:
        return dict(zip(self.columns, self.rows[0], strict=True)) if self.rows else None


@dataclass(frozen=True, slots=True)
class _DriverSql:
    sql: str
    # Values compiled into the statement (``status == 'queued'``), by parameter name.
    fixed: dict[str, Any]
    # For a positional paramstyle (SQLite's ``?``): the parameter names in order.
    order: tuple[str, ...] | None
    # The names of the columns it returns, where the statement says (a ``select`` or
    # ``returning``); None leaves them to the cursor (a ``text`` statement, no rows).
    columns: tuple[str, ...] | None


@functools.lru_cache(maxsize=256)
def _driver_sql(dialect: Dialect, statement: ClauseElement) -> _DriverSql | None:
    """``statement`` compiled once for ``dialect``; None if any value or column needs
    SQLAlchemy's type processing (then it goes through ``conn.execute``)."""
    compiled: Any = statement.compile(dialect=dialect)
    if compiled._bind_processors:
        return None
    for column in compiled._result_columns:
        if column.type._cached_result_processor(dialect, None) is not None:
            return None
    fixed = {
        name: bind.value.value if isinstance(bind.value, Enum) else bind.value
        for bind, name in compiled.bind_names.items()
        if not bind.required
    }
    order = tuple(compiled.positiontup) if compiled.positional else None
    columns = tuple(column.name for column in compiled._result_columns) or None
    return _DriverSql(compiled.string, fixed, order, columns)


def execute_direct(
    conn: Connection, statement: Executable, params: Mapping[str, Any]
) -> DirectResult:
    """Run a hot-path statement through the driver's cursor, in ``conn``'s transaction.

    ``conn.execute`` spends far more CPU around a short statement than SQLite spends
    running it: the cache key, an execution context, event dispatch and a result object
    per statement, and a worker's run of a call (claim, outcome, audit append) is a few
    such statements. The statement is compiled once per dialect, and one whose types convert
    values falls back to ``conn.execute``.
    """
    compiled = _driver_sql(conn.dialect, cast(ClauseElement, statement))
    if compiled is None:
        result = conn.execute(statement, dict(params))
        rows = [tuple(row) for row in result] if result.returns_rows else []
        columns = tuple(result.keys()) if result.returns_rows else ()
        return DirectResult(columns, rows, result.rowcount)
    values: Any = {**compiled.fixed, **params}
    if compiled.order is not None:
        values = tuple(values[name] for name in compiled.order)
    with _driver_cursor(conn, compiled.sql, values) as cursor:
        cursor.execute(compiled.sql, values)
        return _result_of(cursor, compiled.columns)


def _result_of(cursor: Any, columns: tuple[str, ...] | None) -> DirectResult:
    """The driver cursor's current result, all its rows fetched. ``columns`` are the
    statement's own where it knows them: psycopg builds its ``description`` anew, an
    object per column, each time it is asked for."""
    if columns is None:
        description = cursor.description
        columns = tuple(column[0] for column in description) if description else ()
    rows = cursor.fetchall() if columns else []
    return DirectResult(columns, rows, cursor.rowcount)
