"""Waiting in tests for something to happen, never for a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import text

from router.db.rows import CallRow
from router.runtime import Runtime
from router.status import TERMINAL_STATES

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``predicate`` until it is truthy and return its value; fail naming ``what`` when
    the deadline passes."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.05)
    return value


def rows_of(runtime: Runtime, call_ids: list[str]) -> dict[str, CallRow]:
    with runtime.store.reading() as conn:
        rows = {call_id: runtime.store.get(conn, call_id) for call_id in call_ids}
    missing = [call_id for call_id, row in rows.items() if row is None]
    assert not missing, f"calls vanished from the store: {missing}"
    return {call_id: row for call_id, row in rows.items() if row is not None}


def wait_until_finished(
    runtime: Runtime, call_ids: list[str], timeout: float
) -> dict[str, CallRow]:
    """The calls' rows once all are terminal, or as they stand when the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        rows = rows_of(runtime, call_ids)
        done = all(row.status in TERMINAL_STATES for row in rows.values())
        if done or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def wait_until_a_transaction_waits(runtime: Runtime, locktype: str) -> None:
    """Until a transaction waits for a PostgreSQL lock of ``locktype`` (``advisory``: the
    audit chain's; ``transactionid``: a row another transaction has written). SQLite leaves
    no trace of a writer polling for its write lock: there, a moment's pause."""
    if runtime.engine.dialect.name != "postgresql":
        time.sleep(0.3)
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with runtime.engine.connect() as conn:
            waiting = conn.execute(
                text("SELECT count(*) FROM pg_locks WHERE locktype = :type AND NOT granted"),
                {"type": locktype},
            ).scalar_one()
        if waiting:
            return
        time.sleep(0.01)
    raise AssertionError(f"no transaction waited for a {locktype} lock")
