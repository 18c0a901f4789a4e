"""``router.db.engine.execute_direct``: the hot path's statements run through the driver's
cursor give what ``conn.execute`` gives, fail as it fails, and fall back to it where
SQLAlchemy must convert values. Real SQLite and PostgreSQL."""

from __future__ import annotations

import datetime

import pytest
from sqlalchemy import DateTime, bindparam, create_engine, exc, literal, select, text, update

from router.audit.log import _HEAD
from router.db.direct import execute_direct
from router.db.engine import normalize_url
from router.db.schema import calls
from router.db.store import _CLAIM, _FINISH, _GET
from router.dispatch.submission import Submission
from router.errors import StoreUnavailable
from router.runtime import Runtime
from router.status import CallStatus


def submitted(runtime: Runtime, count: int) -> list[str]:
    results = runtime.dispatcher.submit_many(
        [Submission("agent", "echo", {"i": i}, None) for i in range(count)]
    )
    return [str(r.call_id) for r in results]


def test_rows_and_counts_are_those_conn_execute_gives(runtime: Runtime) -> None:
    first, second = submitted(runtime, 2)
    with runtime.store.transaction() as conn:
        for call_id in (first, "call_" + "0" * 32):
            direct = execute_direct(conn, _GET, {"call_id": call_id}).first()
            row = conn.execute(_GET, {"call_id": call_id}).first()
            assert direct == (dict(row._mapping) if row else None)
        head = execute_direct(conn, _HEAD, {})
        assert head.rows == [tuple(conn.execute(_HEAD).one())]
        assert head.columns == ("seq", "hash")

        claim = {"lease_until": 99, "now": 7, "named_tool": "echo"}
        claimed = execute_direct(conn, _CLAIM, {"call_id": first, **claim}).first()
        assert claimed is not None
        assert (claimed["status"], claimed["attempt"], claimed["started_at"]) == ("running", 1, 7)
        # A claim that finds the call no longer queued returns nothing, both ways.
        assert execute_direct(conn, _CLAIM, {"call_id": first, **claim}).first() is None
        assert conn.execute(_CLAIM, {"call_id": first, **claim}).first() is None

        outcome = {
            "status": CallStatus.SUCCEEDED,
            "value": "1",
            "content": None,
            "error": None,
            "error_type": None,
            "answered_by": None,
            "from_cache": None,
            "now": 8,
        }
        for attempt, claimed_at in ((2, 7), (1, 6), (1, None)):  # another claim's outcome
            fence = {"attempt": attempt, "claimed_at": claimed_at}
            fenced = execute_direct(conn, _FINISH, {"call_id": first, **fence, **outcome})
            assert fenced.rowcount == 0 and fenced.rows == []
        fence = {"attempt": 1, "claimed_at": 7}
        landed = execute_direct(conn, _FINISH, {"call_id": first, **fence, **outcome})
        # A statement that returns no rows names no columns: the cursor says.
        assert landed.rowcount == 1 and landed.columns == ()
        # The other call was never claimed: the fence on its status holds.
        never = {"attempt": 0, "claimed_at": None}
        assert execute_direct(conn, _FINISH, {"call_id": second, **never, **outcome}).rowcount == 0
    stored = runtime.store
    with stored.reading() as conn:
        done = stored.get(conn, first)
        untouched = stored.get(conn, second)
    assert done is not None and (done.status, done.value, done.finished_at) == ("succeeded", "1", 8)
    assert untouched is not None and untouched.status == "queued"


def test_the_columns_a_statement_names_are_those_conn_execute_reports(runtime: Runtime) -> None:
    (call_id,) = submitted(runtime, 1)
    params = {"call_id": call_id, "lease_until": 9, "now": 1, "named_tool": None}
    with runtime.store.transaction() as conn:
        for statement in (_GET, _HEAD, _CLAIM):
            # Taken from the statement, not from the driver's cursor: the same names.
            direct = execute_direct(conn, statement, params)
            assert direct.columns == tuple(conn.execute(statement, params).keys())


def test_a_statement_whose_types_convert_values_goes_through_conn_execute(
    runtime: Runtime,
) -> None:
    moment = datetime.datetime(2026, 12, 1, 15, 0, 0)
    with runtime.store.reading() as conn:
        result = execute_direct(conn, select(literal(moment, DateTime).label("at")), {})
    # Through the cursor, SQLite would hand back a string; SQLAlchemy converts it.
    assert result.first() == {"at": moment}


def test_a_driver_error_is_raised_as_sqlalchemys_own(runtime: Runtime) -> None:
    first, second = submitted(runtime, 2)
    rename = update(calls).where(calls.c.id == bindparam("old")).values(id=bindparam("new"))
    with pytest.raises(exc.IntegrityError), runtime.store.transaction() as conn:
        execute_direct(conn, rename, {"old": first, "new": second})
    with runtime.store.reading() as conn:
        assert runtime.store.get(conn, first) is not None  # rolled back: nothing renamed


@pytest.mark.parametrize(
    "database_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
def test_a_postgresql_connection_dropped_mid_transaction_is_unavailable_and_discarded(
    runtime: Runtime,
) -> None:
    (call_id,) = submitted(runtime, 1)
    killer = create_engine(normalize_url(runtime.settings.database_url))
    seen: list[tuple[bool, bool]] = []
    try:
        with pytest.raises(StoreUnavailable), runtime.store.transaction() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
            with killer.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            try:
                execute_direct(conn, _GET, {"call_id": call_id})
            except exc.DBAPIError as error:
                seen.append((error.connection_invalidated, conn.invalidated))
                raise
        # Invalidated as ``conn.execute`` would have: the pool does not get it back.
        assert seen == [(True, True)]
        # The next transaction gets a working connection.
        with runtime.store.reading() as conn:
            found = execute_direct(conn, _GET, {"call_id": call_id}).first()
        assert found is not None and found["id"] == call_id
    finally:
        killer.dispose()
