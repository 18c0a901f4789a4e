"""A reader of many pages (audit verify, export) sees one state of the database, on both
databases, however many commits land between its statements, and verify compares it with a
signed head read before that state."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from router.audit import head as audit_head
from router.audit import verify as verify_module
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


def test_verify_holds_while_rows_are_appended_and_the_head_exported_meanwhile(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The approval worker appends and exports a newer signed head while verify walks
    its snapshot: verify reads the head from before its snapshot, so nothing is missing."""
    append_one(runtime)
    path = audit_head.head_file(runtime.settings, runtime.namespace.name)

    def export() -> None:
        audit_head.export(
            runtime.store, runtime.keyring, runtime.namespace.name, path, runtime.clock
        )

    export()
    walk = verify_module._walk

    def walk_while_busy(*args: Any) -> int | None:
        writer = threading.Thread(target=lambda: (append_one(runtime), export()))
        writer.start()
        writer.join(timeout=60)
        assert not writer.is_alive()
        return walk(*args)

    monkeypatch.setattr(verify_module, "_walk", walk_while_busy)
    report = runtime.verify_audit()
    assert report.problems == [], report.problems
    monkeypatch.undo()
    assert runtime.verify_audit().ok
