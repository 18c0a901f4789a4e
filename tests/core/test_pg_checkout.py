"""A PostgreSQL engine's pooled connections begin their transaction at checkout, and that
``BEGIN`` is the check that the connection is alive (``router.db.engine``): a connection
the server dropped while pooled is replaced before anything of a transaction runs, and
a transaction costs no round trip for a ping. Real PostgreSQL."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from psycopg import pq
from sqlalchemy import create_engine, event, text

from router.db.engine import make_engine, normalize_url
from router.db.store import Store
from router.errors import StoreUnavailable

pytestmark = pytest.mark.parametrize(
    "database_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)


def backend_pid(engine: object) -> int:
    with engine.begin() as conn:  # type: ignore[attr-defined]
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar())


def terminate(admin: Any, pid: int) -> None:
    """End the backend ``pid`` and wait until it has gone (``pg_terminate_backend`` only
    signals it)."""
    deadline = time.monotonic() + 30
    with admin.connect() as other:
        other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        while other.execute(
            text("SELECT 1 FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
        ).first():
            assert time.monotonic() < deadline, f"backend {pid} still there"
            other.rollback()
            time.sleep(0.01)


def test_a_connection_the_server_dropped_while_pooled_is_replaced(database_url: str) -> None:
    engine = make_engine(database_url)
    admin = create_engine(normalize_url(database_url))
    try:
        engine.pool.dispose()
        first = backend_pid(engine)
        terminate(admin, first)
        # The pool hands out the dead connection first; its BEGIN fails, and the pool
        # replaces it before the transaction runs anything.
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE IF NOT EXISTS checkout_probe (x int)"))
            conn.execute(text("INSERT INTO checkout_probe VALUES (1)"))
            second = conn.execute(text("SELECT pg_backend_pid()")).scalar()
        assert second != first
        with admin.connect() as other:
            assert other.execute(text("SELECT count(*) FROM checkout_probe")).scalar() == 1
    finally:
        engine.dispose()
        admin.dispose()


def test_a_checked_out_connection_is_in_its_transaction_and_commit_and_rollback_end_it(
    database_url: str,
) -> None:
    engine = make_engine(database_url)
    admin = create_engine(normalize_url(database_url))
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE checkout_tx (x int)"))
        with engine.connect() as conn:
            driver = conn.connection.dbapi_connection
            assert driver is not None
            # Begun at checkout, before any statement: psycopg sends no BEGIN of its own.
            assert driver.pgconn.transaction_status == pq.TransactionStatus.INTRANS
            conn.execute(text("INSERT INTO checkout_tx VALUES (1)"))
            conn.rollback()
            assert driver.pgconn.transaction_status == pq.TransactionStatus.IDLE
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO checkout_tx VALUES (2)"))
        with admin.connect() as other:
            rows = other.execute(text("SELECT x FROM checkout_tx")).scalars().all()
        assert rows == [2]
    finally:
        engine.dispose()
        admin.dispose()


def test_a_new_connection_that_cannot_begin_is_store_unavailable(database_url: str) -> None:
    """When the replacement fails as well (the database going down), callers get the
    database's error as ``StoreUnavailable`` (a 503 from the API), not the pool's bare
    "this connection is closed"."""
    engine = make_engine(database_url)
    try:
        backend_pid(engine)  # the dialect has met the server
        engine.pool.dispose()

        @event.listens_for(engine, "connect")
        def _dies_at_once(dbapi_connection: Any, _record: Any) -> None:
            try:
                dbapi_connection.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            except psycopg.OperationalError:
                pass  # this connection is gone now, before its first checkout

        failed = pytest.raises(StoreUnavailable, match="BEGIN on a new connection failed")
        with failed, Store(engine).transaction() as conn:
            conn.execute(text("SELECT 1"))
    finally:
        engine.dispose()


def test_a_kept_connection_the_server_dropped_is_replaced_before_the_transaction_runs(
    database_url: str,
) -> None:
    """A store keeps a few connections checked out between its write transactions
    (``router.db.kept``); each transaction's ``BEGIN`` there is the same check."""
    engine = make_engine(database_url)
    admin = create_engine(normalize_url(database_url))
    store = Store(engine)
    try:
        with store.transaction() as conn:
            conn.execute(text("CREATE TABLE kept_probe (x int)"))
            first = conn.execute(text("SELECT pg_backend_pid()")).scalar()
        terminate(admin, first)
        with store.transaction() as conn:
            conn.execute(text("INSERT INTO kept_probe VALUES (1)"))
            second = conn.execute(text("SELECT pg_backend_pid()")).scalar()
        assert second != first
        with admin.connect() as other:
            assert other.execute(text("SELECT count(*) FROM kept_probe")).scalar() == 1
    finally:
        store.close()
        engine.dispose()
        admin.dispose()
