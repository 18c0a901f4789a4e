"""The hot path's statements on PostgreSQL, run on libpq directly, prepared once per connection.

psycopg's cursor spends more client CPU around a short statement than libpq spends
running it: query conversion, the prepare bookkeeping, generators waited on, result
columns built per call. A lone call runs a few such statements in each process it passes
through, on two shared cores, so that CPU is latency. Here a statement is prepared once
per connection under a name of its own, and then run by libpq's ``PQexecPrepared`` (or
several together in its pipeline mode). psycopg still converts each value, both ways,
with its own adapters (``Transformer``), and its error classes are raised. The
connection stays psycopg's, which reads the transaction's state from libpq and so sees
every statement run here.
"""

from __future__ import annotations

import itertools
import re
import select
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import abc, errors, pq
from psycopg.adapt import PyFormat, Transformer

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)
# A name for each statement text, the same on every connection.
_names: dict[bytes, bytes] = {}
_next_name = itertools.count()
# The names each connection has prepared. Named statements outlive a rolled-back
# transaction, and nothing deallocates them: psycopg prepares nothing of its own on these
# connections (``router.db.engine``), so it never deallocates everything either.
_prepared: weakref.WeakKeyDictionary[psycopg.Connection[Any], set[bytes]] = (
    weakref.WeakKeyDictionary()
)
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%|%")


@dataclass(frozen=True, slots=True)
class Numbered:
    """A statement in libpq's form: ``$1``, ``$2`` … and the parameter name of each."""

    sql: bytes
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Answer:
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    rowcount: int


def numbered(pyformat_sql: str) -> Numbered | None:
    """``pyformat_sql`` (``%(name)s`` placeholders, ``%%`` for a percent sign) with numbered
    placeholders; None if it holds any other ``%`` form."""
    names: list[str] = []
    unknown = False

    def replace(match: re.Match[str]) -> str:
        nonlocal unknown
        name = match.group(1)
        if name is None:
            unknown = unknown or match.group(0) == "%"
            return "%"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    sql = _PLACEHOLDER.sub(replace, pyformat_sql)
    return None if unknown else Numbered(sql.encode(), tuple(names))


def run(connection: psycopg.Connection[Any], statement: Numbered, values: Sequence[Any]) -> Answer:
    """Run ``statement`` with ``values`` (in ``statement.names`` order) in the connection's
    transaction, beginning one first if there is none, as psycopg's cursor would. Raises
    psycopg's error for the server's."""
    return run_many(connection, statement, [values])[0]


def run_many(
    connection: psycopg.Connection[Any], statement: Numbered, values: Sequence[Sequence[Any]]
) -> list[Answer]:
    """``run`` for each of ``values`` in turn. More than one statement (the transaction's
    ``BEGIN`` included) go together in libpq's pipeline mode: one round trip. Every answer
    is read before the first error, if any, is raised."""
    name = _prepared_name(connection, statement)
    transformer = Transformer(connection)
    # Every value converted before anything is sent: a value that cannot be leaves the
    # connection as it was.
    # A None among the values is SQL's NULL, as libpq takes it (psycopg's stubs leave None
    # out of the parameters' type).
    dumped: list[Any] = [
        transformer.dump_sequence(one, [PyFormat.TEXT] * len(one)) for one in values
    ]
    begin = _begin(connection)
    if not begin and len(dumped) == 1:
        # libpq waits for the answer with Python's lock released.
        results = [connection.pgconn.exec_prepared(name, dumped[0])]
    else:
        results = _pipelined(connection, begin, name, dumped)[len(begin) :]
    for result in results:
        if result.status != pq.ExecStatus.PIPELINE_ABORTED:
            _check(connection, result)
    return [_answer(transformer, result) for result in results]


def _begin(connection: psycopg.Connection[Any]) -> list[bytes]:
    """What begins a transaction on ``connection`` before a statement, as psycopg would
    begin it: nothing in autocommit mode or inside a transaction already."""
    if connection.autocommit or connection.pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return []
    begin = [b"BEGIN"]
    if connection.isolation_level is not None:
        level = connection.isolation_level.name.replace("_", " ")
        begin.append(b"ISOLATION LEVEL " + level.encode())
    if connection.read_only is not None:
        begin.append(b"READ ONLY" if connection.read_only else b"READ WRITE")
    if connection.deferrable is not None:
        begin.append(b"DEFERRABLE" if connection.deferrable else b"NOT DEFERRABLE")
    return [b" ".join(begin)]


def _pipelined(
    connection: psycopg.Connection[Any], plain: list[bytes], name: bytes, dumped: list[Any]
) -> list[pq.abc.PGresult]:
    """The results of ``plain`` statements and then of ``name`` with each of ``dumped``,
    all sent in one pipeline."""
    pgconn = connection.pgconn
    pgconn.enter_pipeline_mode()
    try:
        for sql in plain:
            pgconn.send_query_params(sql, None)
        for one in dumped:
            pgconn.send_query_prepared(name, one)
        pgconn.pipeline_sync()
        results = _pipeline_results(pgconn)
    except BaseException:
        if pgconn.status == pq.ConnStatus.OK:
            try:
                pgconn.exit_pipeline_mode()
            except psycopg.Error:
                connection.close()  # left mid-pipeline: nobody may use it again
        raise
    pgconn.exit_pipeline_mode()
    for result in results[: len(plain)]:
        _check(connection, result)
    return results


def _prepared_name(connection: psycopg.Connection[Any], statement: Numbered) -> bytes:
    """The name ``statement`` is prepared under on ``connection``, preparing it if need be."""
    name = _names.get(statement.sql)
    if name is None:
        name = _names.setdefault(statement.sql, b"_tr_%d" % next(_next_name))
    known = _prepared.get(connection)
    if known is None:
        known = _prepared[connection] = set()
    if name not in known:
        # Parameter types left to the server: it takes them from the statement's casts.
        _check(connection, connection.pgconn.prepare(name, statement.sql))
        known.add(name)
    return name


def _pipeline_results(pgconn: pq.abc.PGconn) -> list[pq.abc.PGresult]:
    """The results of the statements sent in pipeline mode, up to its sync. Waits in
    ``select`` (Python's lock released), and reads while it sends, so that neither side
    ever blocks on a full socket."""
    results: list[pq.abc.PGresult] = []
    fd = pgconn.socket
    while True:
        while pgconn.flush():  # more to send
            readable, _, _ = select.select([fd], [fd], [])
            if readable:
                pgconn.consume_input()
        while not pgconn.is_busy():
            result = pgconn.get_result()
            if result is None:
                continue  # the end of one statement's results
            if result.status == pq.ExecStatus.PIPELINE_SYNC:
                return results
            results.append(result)
        select.select([fd], [], [])
        pgconn.consume_input()


def _answer(transformer: abc.Transformer, result: pq.abc.PGresult) -> Answer:
    if not result.nfields:
        return Answer((), [], _rowcount(result))
    columns = tuple((result.fname(i) or b"").decode() for i in range(result.nfields))
    rows: list[tuple[Any, ...]] = []
    if result.ntuples:
        transformer.set_pgresult(result)
        rows = transformer.load_rows(0, result.ntuples, tuple)
    return Answer(columns, rows, _rowcount(result))


def _check(connection: psycopg.Connection[Any], result: pq.abc.PGresult) -> pq.abc.PGresult:
    if result.status in _OK:
        return result
    if result.status == pq.ExecStatus.FATAL_ERROR:
        raise errors.error_from_result(result, encoding=connection.info.encoding)
    raise psycopg.InterfaceError(f"unexpected result {pq.ExecStatus(result.status).name}")


def _rowcount(result: pq.abc.PGresult) -> int:
    tuples = result.command_tuples
    return -1 if tuples is None else tuples
