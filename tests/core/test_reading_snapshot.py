"""A reader of many pages (audit verify, export) sees one state of the database, on both
databases, however many commits land between its statements."""

from __future__ import annotations

import threading

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from router.audit.log import AuditEntry
from router.db.schema import audit_log
from router.runtime import Runtime
from router.status import AuditEvent


def count_rows(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(audit_log)).scalar_one())


def append_one(runtime: Runtime) -> None:
    with runtime.store.transaction() as conn:
        runtime.audit.append(conn, [AuditEntry(AuditEvent.QUEUED, "agent", tool="echo")], at=1)


def test_a_snapshot_read_sees_no_commit_made_after_its_first_statement(runtime: Runtime) -> None:
    _ = runtime.audit  # made before any transaction: it reads the database
    append_one(runtime)
    with runtime.store.reading(snapshot=True) as conn:
        before = count_rows(conn)
        # Another connection commits meanwhile (a thread: SQLite's writer may not be this one).
        writer = threading.Thread(target=append_one, args=(runtime,))
        writer.start()
        writer.join(timeout=60)
        assert not writer.is_alive()
        assert count_rows(conn) == before
    with runtime.store.reading() as conn:
        assert count_rows(conn) == before + 1
