"""The audit log: append-only in the database, a hash chain, and the one archival path."""

from __future__ import annotations

import gzip
import os
import threading
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from router import archive, audit
from router.audit import AuditEntry
from router.clock import FakeClock
from router.runtime import Runtime

from .lock_waits import wait_until_a_transaction_waits

DAY_MS = 86_400_000


def append(runtime: Runtime, count: int, event: str = "queued") -> None:
    with runtime.store.transaction() as conn:
        audit.append(
            conn,
            [AuditEntry(event=event, actor="test", tool=f"t{i}") for i in range(count)],
            at=runtime.clock(),
        )


def verify(runtime: Runtime) -> tuple[int, int | None, str | None]:
    with runtime.store.reading() as conn:
        return audit.verify(conn)


def test_the_database_refuses_to_rewrite_the_log(runtime: Runtime) -> None:
    append(runtime, 3)
    for statement in (
        "UPDATE audit_log SET actor = 'mallory' WHERE seq = 2",
        "DELETE FROM audit_log WHERE seq = 2",
    ):
        with pytest.raises(DBAPIError, match="append-only"), runtime.engine.begin() as conn:
            conn.execute(text(statement))
    assert verify(runtime) == (3, None, None)


def test_verify_names_the_first_tampered_row(runtime: Runtime) -> None:
    append(runtime, 5)
    with runtime.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("ALTER TABLE audit_log DISABLE TRIGGER USER"))
            conn.execute(text("UPDATE audit_log SET actor = 'mallory' WHERE seq = 3"))
            conn.execute(text("ALTER TABLE audit_log ENABLE TRIGGER USER"))
        else:
            conn.execute(text("DROP TRIGGER audit_log_no_update"))
            conn.execute(text("UPDATE audit_log SET actor = 'mallory' WHERE seq = 3"))
    checked, bad_seq, reason = verify(runtime)
    assert (checked, bad_seq) == (2, 3)
    assert reason == "hash does not match the row's contents"


def test_readers_get_copies(runtime: Runtime) -> None:
    append(runtime, 2)
    with runtime.store.reading() as conn:
        rows = audit.query(conn)
        rows[0]["actor"] = "changed by a reader"
        rows.clear()
        assert audit.query(conn)[0]["actor"] == "test"


def test_archival_moves_old_rows_to_a_segment_and_verify_still_holds(
    runtime: Runtime, clock: FakeClock, tmp_path: Path
) -> None:
    append(runtime, 4)
    clock.advance(91 * DAY_MS)
    append(runtime, 2)
    archive_dir = tmp_path / "archive"
    result = archive.archive(runtime.store, archive_dir, clock=clock, hot_days=90, archive_days=400)
    assert (result.rows, result.through_seq) == (4, 4)
    assert result.segment is not None
    segment = archive_dir / result.segment
    with gzip.open(segment, "rt") as handle:
        assert len(handle.readlines()) == 4
    assert verify(runtime) == (2, None, None)
    with runtime.store.reading() as conn:
        checkpoint = archive.latest_checkpoint(conn)
        assert checkpoint is not None and checkpoint.through_seq == 4
        assert archive.verify_segment(segment, checkpoint, audit.GENESIS_HASH) is None
        assert [row["seq"] for row in audit.query(conn)] == [5, 6]
    # Nothing new is old enough: a second run archives nothing.
    assert (
        archive.archive(runtime.store, archive_dir, clock=clock, hot_days=90, archive_days=400).rows
        == 0
    )
    # Rows the checkpoint does not cover still cannot be deleted.
    with pytest.raises(DBAPIError, match="append-only"), runtime.engine.begin() as conn:
        conn.execute(text("DELETE FROM audit_log WHERE seq = 5"))
    # And the chain continues across the archive boundary.
    append(runtime, 1)
    assert verify(runtime) == (3, None, None)


def test_a_tampered_segment_is_caught(runtime: Runtime, clock: FakeClock, tmp_path: Path) -> None:
    append(runtime, 3)
    clock.advance(91 * DAY_MS)
    result = archive.archive(runtime.store, tmp_path, clock=clock, hot_days=90, archive_days=400)
    assert result.segment is not None
    segment = tmp_path / result.segment
    with gzip.open(segment, "rt") as handle:
        lines = handle.readlines()
    with gzip.open(segment, "wt") as handle:
        handle.writelines([lines[0], lines[1].replace('"test"', '"mallory"'), lines[2]])
    with runtime.store.reading() as conn:
        checkpoint = archive.latest_checkpoint(conn)
    assert checkpoint is not None
    problem = archive.verify_segment(segment, checkpoint, audit.GENESIS_HASH)
    assert problem == f"{segment.name}: file digest does not match its checkpoint"


def test_old_segments_are_pruned_after_the_archive_window(
    runtime: Runtime, clock: FakeClock, tmp_path: Path
) -> None:
    append(runtime, 2)
    clock.advance(91 * DAY_MS)
    first = archive.archive(runtime.store, tmp_path, clock=clock, hot_days=90, archive_days=400)
    assert first.segment is not None
    # Segment files age by their modification time; make this one 401 days old.
    old = (clock.now - 401 * DAY_MS) / 1000
    os.utime(tmp_path / first.segment, (old, old))
    again = archive.archive(runtime.store, tmp_path, clock=clock, hot_days=90, archive_days=400)
    assert again.pruned == [first.segment]
    assert not (tmp_path / first.segment).exists()


def test_the_chain_continues_after_the_hot_table_was_archived_empty(
    runtime: Runtime, clock: FakeClock, tmp_path: Path
) -> None:
    append(runtime, 3)
    clock.advance(91 * DAY_MS)
    archive.archive(runtime.store, tmp_path, clock=clock, hot_days=90, archive_days=400)
    append(runtime, 2)
    with runtime.store.reading() as conn:
        assert [row["seq"] for row in audit.query(conn)] == [4, 5]
    assert verify(runtime) == (2, None, None)
    with pytest.raises(DBAPIError, match="append-only"), runtime.engine.begin() as conn:
        conn.execute(text("DELETE FROM audit_log"))


def test_a_forged_checkpoint_cannot_open_the_log_to_deletion(runtime: Runtime) -> None:
    append(runtime, 3)
    forged = (
        "INSERT INTO audit_checkpoints (through_seq, last_hash, rows, segment, "
        "segment_sha256, at) VALUES (3, 'x', 0, 'none', '', 0)"
    )
    with pytest.raises(DBAPIError, match="does not match"), runtime.engine.begin() as conn:
        conn.execute(text(forged))
    with pytest.raises(DBAPIError, match="append-only"), runtime.engine.begin() as conn:
        conn.execute(text("DELETE FROM audit_log"))


def test_verify_reports_a_missing_segment_within_retention(
    runtime: Runtime, clock: FakeClock, tmp_path: Path
) -> None:
    append(runtime, 2)
    clock.advance(91 * DAY_MS)
    result = archive.archive(runtime.store, tmp_path, clock=clock, hot_days=90, archive_days=400)
    assert result.segment is not None
    with runtime.store.reading() as conn:
        lines, problems = archive.verify_archives(conn, tmp_path, now=clock.now, archive_days=400)
    assert problems == [] and lines == [f"segment {result.segment}: 2 rows ok"]
    (tmp_path / result.segment).unlink()
    with runtime.store.reading() as conn:
        _, problems = archive.verify_archives(conn, tmp_path, now=clock.now, archive_days=400)
    assert problems == [f"segment {result.segment} is missing"]


def test_an_append_that_waited_for_the_chain_lock_continues_from_the_head_committed_meanwhile(
    runtime: Runtime,
) -> None:
    """The lock and the head read are one round trip on PostgreSQL (``audit_chain_head``):
    the head must be read after the lock is granted, not from a snapshot taken before it.
    A second append waits for the lock while the first holds it; when the first commits,
    the second must continue from the first's rows, not from the head it could see when
    it started waiting (that would repeat a ``seq`` or fork the chain)."""
    append(runtime, 2)
    second: list[BaseException] = []

    def append_second() -> None:
        try:
            append(runtime, 1, event="second")
        except BaseException as exc:  # reported to the test below
            second.append(exc)

    waiter = threading.Thread(target=append_second)
    with runtime.store.transaction() as conn:
        audit.append(conn, [AuditEntry(event="first", actor="test")], at=runtime.clock())
        waiter.start()
        wait_until_a_transaction_waits(runtime, "advisory")
    waiter.join(timeout=30)
    assert not waiter.is_alive() and second == []
    with runtime.store.reading() as conn:
        rows = audit.query(conn)
    assert [(row["seq"], row["event"]) for row in rows] == [
        (1, "queued"),
        (2, "queued"),
        (3, "first"),
        (4, "second"),
    ]
    assert verify(runtime) == (4, None, None)
