"""Hot-path statements run straight by the driver.

``conn.execute`` spends more CPU around a short statement than the database spends running
it: the cache key, an execution context, event dispatch and a result object per
statement. The statements every call runs go to the driver instead (``execute_direct``,
``execute_direct_many``, ``insert_rows``), compiled once per dialect; on PostgreSQL one
at a time they go to libpq itself, prepared (``router.db.libpq``).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any, cast

from sqlalchemy import Table, exc
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql.expression import ClauseElement, Executable

from . import libpq

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
        sql, order, numbered = compiled
        if numbered is not None:
            rows_values = [[row[name] for name in numbered.names] for row in group]
            with _driver_errors(conn, sql, rows_values) as raw:
                if len(rows_values) == 1:
                    libpq.run(raw, numbered, rows_values[0])
                else:
                    libpq.run_many(raw, numbered, rows_values)
            continue
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
            cursor.executemany(sql, params)


@functools.cache
def _compiled_insert(
    dialect: Dialect, table: Table, columns: tuple[str, ...]
) -> tuple[str, tuple[str, ...] | None, libpq.Numbered | None] | None:
    compiled = table.insert().compile(dialect=dialect, column_keys=list(columns))
    if compiled._bind_processors:  # a column type that converts values: not for this path
        return None
    order = tuple(compiled.positiontup) if compiled.positional and compiled.positiontup else None
    return compiled.string, order, _numbered(dialect, compiled.string)


def _numbered(dialect: Dialect, sql: str) -> libpq.Numbered | None:
    """PostgreSQL's form of ``sql`` for ``router.db.libpq``; None on SQLite."""
    return libpq.numbered(sql) if dialect.name == "postgresql" else None


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

    On PostgreSQL they go out together in libpq's pipeline mode (one round trip), where one
    at a time each waits for the answer to the one before.
    """
    if len(params) < 2 or conn.dialect.name != "postgresql":
        return [execute_direct(conn, statement, one) for one in params]
    compiled = _driver_sql(conn.dialect, cast(ClauseElement, statement))
    if compiled is None or compiled.numbered is None:
        return [execute_direct(conn, statement, one) for one in params]
    names = compiled.numbered.names
    values = [[{**compiled.fixed, **one}[name] for name in names] for one in params]
    with _driver_errors(conn, compiled.sql, values) as raw:
        answers = libpq.run_many(raw, compiled.numbered, values)
    return [DirectResult(compiled.columns or a.columns, a.rows, a.rowcount) for a in answers]


@contextmanager
def _driver_cursor(conn: Connection, sql: str, params: Any = None) -> Iterator[Any]:
    """A cursor of the driver's own, in ``conn``'s transaction, closed after use. A
    driver's error comes out as SQLAlchemy raises it from ``conn.execute``: the same
    class (so ``translate_errors`` names a database that does not answer), and a
    connection the server dropped is invalidated, not handed back to the pool."""
    with _driver_errors(conn, sql, params) as raw:
        cursor = raw.cursor()
        try:
            yield cursor
        finally:
            cursor.close()


@contextmanager
def _driver_errors(conn: Connection, sql: str, params: Any) -> Iterator[Any]:
    """``conn``'s driver connection; its errors raised as ``_driver_cursor`` says."""
    dbapi = conn.dialect.loaded_dbapi
    raw: Any = conn.connection.dbapi_connection
    try:
        yield raw
    except dbapi.Error as error:
        dropped = conn.dialect.is_disconnect(error, raw, None)
        if dropped:
            conn.invalidate()
        raise exc.DBAPIError.instance(
            sql, params, error, dbapi.Error, connection_invalidated=dropped, dialect=conn.dialect
        ) from None


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
    # PostgreSQL: the statement for ``router.db.libpq``.
    numbered: libpq.Numbered | None = None


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
    return _DriverSql(compiled.string, fixed, order, columns, _numbered(dialect, compiled.string))


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
    if compiled.numbered is not None:
        ordered = [values[name] for name in compiled.numbered.names]
        with _driver_errors(conn, compiled.sql, ordered) as raw:
            answer = libpq.run(raw, compiled.numbered, ordered)
        return DirectResult(compiled.columns or answer.columns, answer.rows, answer.rowcount)
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
