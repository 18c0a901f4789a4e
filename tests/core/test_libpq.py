"""``router.db.libpq``: the hot path's statements on PostgreSQL, prepared once per connection
and run by libpq, give what psycopg's cursor gives and fail as it fails. Real PostgreSQL;
the placeholder conversion is pure logic, tested on its own."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import exc, text

from router.audit import log as audit
from router.db import libpq
from router.db.direct import execute_direct, execute_direct_many, insert_rows
from router.db.schema import audit_log
from router.db.store import _GET
from router.dispatch.submission import Submission
from router.runtime import Runtime

on_postgresql = pytest.mark.parametrize(
    "database_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)

_ECHO = text("SELECT CAST(:n AS bigint) AS n, CAST(:s AS text) AS s")
_SLEEP = text("SELECT pg_sleep(CAST(:s AS float8)) IS NULL AS slept")


def test_placeholders_are_numbered_once_per_name() -> None:
    converted = libpq.numbered("SELECT %(a)s, %(b)s, %(a)s WHERE x LIKE 'p%%'")
    assert converted == libpq.Numbered(b"SELECT $1, $2, $1 WHERE x LIKE 'p%'", ("a", "b"))
    assert libpq.numbered("SELECT 1") == libpq.Numbered(b"SELECT 1", ())


def test_a_percent_sign_of_another_form_is_left_to_psycopg() -> None:
    assert libpq.numbered("SELECT %s") is None
    assert libpq.numbered("SELECT '100%'") is None


def prepared(conn: object) -> list[tuple[str, str]]:
    rows = conn.execute(  # type: ignore[attr-defined]
        text("SELECT name, statement FROM pg_prepared_statements ORDER BY name")
    )
    return [(name, statement) for name, statement in rows]


@on_postgresql
def test_a_statement_is_prepared_once_per_connection_and_survives_a_rollback(
    runtime: Runtime,
) -> None:
    with runtime.engine.connect() as conn:
        for n in range(3):
            with conn.begin():
                row = execute_direct(conn, _ECHO, {"n": n, "s": "x"}).first()
                assert row == {"n": n, "s": "x"}
        with pytest.raises(RuntimeError), conn.begin():
            execute_direct(conn, _ECHO, {"n": 6, "s": "x"})
            raise RuntimeError("rolled back")
        with conn.begin():
            assert execute_direct(conn, _ECHO, {"n": 7, "s": None}).first() == {"n": 7, "s": None}
            statements = prepared(conn)
        echo = [name for name, statement in statements if "CAST($1 AS bigint)" in statement]
        assert len(echo) == 1 and echo[0].startswith("_tr_")
        # psycopg prepares nothing of its own on these connections.
        assert not [name for name, _ in statements if name.startswith("_pg3_")]


@on_postgresql
def test_values_come_back_as_they_went_in(runtime: Runtime) -> None:
    big, text_value = 2**62, "é ✓ " + "x" * 2_000_000
    with runtime.engine.connect() as conn:
        row = execute_direct(conn, _ECHO, {"n": big, "s": text_value}).first()
        assert row == {"n": big, "s": text_value}
        many = execute_direct_many(conn, _ECHO, [{"n": i, "s": str(i)} for i in range(3)])
        assert [result.first() for result in many] == [{"n": i, "s": str(i)} for i in range(3)]


@on_postgresql
def test_an_alter_on_the_connection_leaves_its_prepared_statements(runtime: Runtime) -> None:
    """psycopg deallocates every prepared statement of a connection when it sees an ALTER
    while it holds prepared statements of its own: it must hold none."""
    with runtime.engine.connect() as conn:
        for n in range(10):  # past psycopg's own threshold, were it on
            execute_direct(conn, _ECHO, {"n": n, "s": "x"})
            conn.execute(text("SELECT CAST(:n AS int)"), {"n": n})
        conn.execute(text("ALTER TABLE audit_log DISABLE TRIGGER USER"))
        conn.execute(text("ALTER TABLE audit_log ENABLE TRIGGER USER"))
        assert execute_direct(conn, _ECHO, {"n": 1, "s": "y"}).first() == {"n": 1, "s": "y"}


def audit_row(seq: int) -> dict[str, object]:
    return {
        "seq": seq,
        "at": 0,
        "tool": "t",
        "event": "e",
        "call_id": None,
        "request_id": None,
        "actor": "a",
        "detail": None,
        "prev_hash": "p",
        "hash": "h",
    }


@on_postgresql
@pytest.mark.parametrize("rows", [1, 3])
def test_a_failed_insert_is_an_integrity_error_and_the_connection_stays_usable(
    runtime: Runtime, rows: int
) -> None:
    with runtime.engine.begin() as conn:
        insert_rows(conn, audit_log, [audit_row(1)])
    duplicate = [audit_row(seq) for seq in range(2, 2 + rows - 1)] + [audit_row(1)]
    with runtime.engine.connect() as conn:
        with pytest.raises(exc.IntegrityError, match="duplicate key"), conn.begin():
            insert_rows(conn, audit_log, duplicate)
        driver = conn.connection.dbapi_connection
        assert driver is not None and not driver.closed
        with conn.begin():
            assert execute_direct(conn, _ECHO, {"n": 2, "s": "z"}).first() == {"n": 2, "s": "z"}
            assert [row["seq"] for row in audit.query(conn)] == [1]


@on_postgresql
def test_a_pipeline_stops_at_its_first_error_and_reports_it(runtime: Runtime) -> None:
    divide = text("SELECT 10 / CAST(:d AS int) AS q")
    with runtime.engine.connect() as conn:
        with pytest.raises(exc.DataError, match="division by zero"), conn.begin():
            execute_direct_many(conn, divide, [{"d": 5}, {"d": 0}, {"d": 2}])
        with conn.begin():
            answers = execute_direct_many(conn, divide, [{"d": 5}, {"d": 2}])
        assert [answer.first() for answer in answers] == [{"q": 2}, {"q": 5}]


@on_postgresql
def test_other_threads_run_while_a_pipeline_waits_for_the_server(runtime: Runtime) -> None:
    """The wait for a pipeline's answers releases Python's lock: the API's event loop keeps
    serving while a worker thread waits on the database."""
    ticks: list[float] = []
    done = threading.Event()

    def tick() -> None:
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    with runtime.engine.connect() as conn:
        execute_direct_many(conn, _SLEEP, [{"s": 0}, {"s": 0}])  # prepared beforehand
        ticker = threading.Thread(target=tick)
        ticker.start()
        started = time.monotonic()
        try:
            execute_direct_many(conn, _SLEEP, [{"s": 0.3}, {"s": 0.3}])
        finally:
            done.set()
            ticker.join()
        ended = time.monotonic()
    during = [t for t in ticks if started < t < ended]
    # Held the lock for the whole wait, the ticker would not have run at all meanwhile.
    assert len(during) >= 5


@on_postgresql
def test_a_call_row_read_directly_equals_the_one_sqlalchemy_reads(runtime: Runtime) -> None:
    (result,) = runtime.dispatcher.submit_many([Submission("agent", "echo", {"n": 1}, None)])
    with runtime.store.reading() as conn:
        direct = execute_direct(conn, _GET, {"call_id": result.call_id}).first()
        row = conn.execute(_GET, {"call_id": result.call_id}).one()
    assert direct == dict(row._mapping)
    assert isinstance(direct["attempt"], int) and isinstance(direct["args"], str)


@on_postgresql
def test_a_later_transaction_on_one_connection_is_one_transaction_too(runtime: Runtime) -> None:
    """Only a connection's first transaction after checkout is begun by the checkout: a
    statement run here on an idle connection begins the next one, as psycopg would, and
    does not commit on its own."""
    with runtime.engine.connect() as conn:
        with conn.begin():
            insert_rows(conn, audit_log, [audit_row(1)])
        with pytest.raises(RuntimeError), conn.begin():
            insert_rows(conn, audit_log, [audit_row(2)])
            insert_rows(conn, audit_log, [audit_row(3), audit_row(4)])
            raise RuntimeError("rolled back")
        with conn.begin():
            assert [row["seq"] for row in audit.query(conn)] == [1]
