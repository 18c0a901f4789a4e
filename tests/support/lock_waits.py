"""Waiting, in a test, until another transaction waits for a lock."""

from __future__ import annotations

import time

from sqlalchemy import text

from router.runtime import Runtime


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
