"""The audit log: append-only in the database, a keyed hash chain, and the one archival path.

Tampering is tried as someone with the database (triggers dropped, rows edited and even
re-hashed, rows deleted at the head, middle and tail, checkpoints and manifest lines
forged, rows inserted out of sequence) but without the deployment's key would try it:
``verify`` reports every one, with the seq where it is.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import threading
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from router.audit import archive, manifest
from router.audit import head as audit_head
from router.audit import log as audit
from router.audit.log import AuditEntry, AuditLog, hashed_text
from router.audit.verify import Report
from router.canonical import sha256_hex
from router.clock import FakeClock
from router.runtime import Runtime
from router.trust.keyring import KeyRing

from ..support.waiting import wait_until_a_transaction_waits

DAY_MS = 86_400_000


def append(runtime: Runtime, count: int, event: str = "queued") -> None:
    with runtime.store.transaction() as conn:
        runtime.audit.append(
            conn,
            [AuditEntry(event=event, actor="test", tool=f"t{i}") for i in range(count)],
            at=runtime.clock(),
        )


def verify(runtime: Runtime) -> tuple[int, int | None, str | None]:
    """(rows checked, first bad seq, its reason): the shape the older tests read."""
    report = runtime.verify_audit()
    if report.ok:
        return report.checked, None, None
    first = report.problems[0]
    return report.checked, first.seq, first.reason


def problems(runtime: Runtime) -> list[tuple[int | None, str]]:
    report: Report = runtime.verify_audit()
    return [(problem.seq, problem.reason) for problem in report.problems]


def archive_old(runtime: Runtime, clock: FakeClock) -> archive.ArchiveResult:
    return archive.archive(
        runtime.store,
        runtime.audit,
        runtime.archive_dir,
        clock=clock,
        hot_days=90,
        archive_days=400,
    )


def unguarded(runtime: Runtime, *statements: str, params: dict[str, object] | None = None) -> None:
    """Run ``statements`` as someone who can write to the database and drops the
    append-only triggers first (anyone with the SQLite file, or a superuser)."""
    with runtime.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("ALTER TABLE audit_log DISABLE TRIGGER USER"))
            conn.execute(text("ALTER TABLE audit_checkpoints DISABLE TRIGGER USER"))
        else:
            for trigger in (
                conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'trigger'"))
                .scalars()
                .all()
            ):
                conn.execute(text(f"DROP TRIGGER {trigger}"))
        for statement in statements:
            conn.execute(text(statement), params or {})
        if conn.dialect.name == "postgresql":
            conn.execute(text("ALTER TABLE audit_log ENABLE TRIGGER USER"))
            conn.execute(text("ALTER TABLE audit_checkpoints ENABLE TRIGGER USER"))


def rows(runtime: Runtime) -> list[dict[str, object]]:
    with runtime.store.reading() as conn:
        return audit.query(conn, limit=1000)


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
    assert problems(runtime) == [
        (3, "hash does not match the row (edited, or not written here)"),
    ]


def test_an_edit_re_hashed_without_the_key_is_caught(runtime: Runtime) -> None:
    """Re-hashing the edited row and every row after it, as the plain SHA-256 chain of
    the first release allowed, or with any key but the deployment's: still caught."""
    append(runtime, 5)
    for forger in (None, AuditLog(KeyRing(b"not the deployment's key" * 2))):
        chain = rows(runtime)
        prev = chain[1]["hash"]
        statements = []
        for row in chain[2:]:
            row["actor"] = "mallory" if row["seq"] == 3 else row["actor"]
            row["prev_hash"] = prev
            stored = {**row, "detail": None}
            prev = sha256_hex(hashed_text(stored)) if forger is None else forger.row_hash(stored)
            statements.append(
                f"UPDATE audit_log SET actor = '{row['actor']}', prev_hash = '{row['prev_hash']}',"
                f" hash = '{prev}' WHERE seq = {row['seq']}"
            )
        unguarded(runtime, *statements)
        found = problems(runtime)
        assert {seq for seq, _ in found} == {3, 4, 5}, found


@pytest.mark.parametrize("where", ["head", "middle", "tail"])
def test_deleted_rows_are_caught_wherever_they_were(
    runtime: Runtime, clock: FakeClock, where: str
) -> None:
    append(runtime, 6)
    audit_head.export(
        runtime.store,
        runtime.keyring,
        runtime.namespace.name,
        audit_head.head_file(runtime.settings, runtime.namespace.name),
        clock,
    )
    doomed = {"head": "seq <= 2", "middle": "seq IN (3, 4)", "tail": "seq >= 5"}[where]
    unguarded(runtime, f"DELETE FROM audit_log WHERE {doomed}")
    found = problems(runtime)
    expected = {
        "head": [(3, "seq 1-2 missing before it (deleted, or this row inserted)")],
        "middle": [(5, "seq 3-4 missing before it (deleted, or this row inserted)")],
        "tail": [(5, "rows after seq 4 are missing: the signed head names seq 6")],
    }[where]
    assert found == expected


def export_head(runtime: Runtime, clock: FakeClock) -> audit_head.SignedHead:
    """The signed head, exported as the approval worker does every few seconds."""
    path = audit_head.head_file(runtime.settings, runtime.namespace.name)
    return audit_head.export(runtime.store, runtime.keyring, runtime.namespace.name, path, clock)


def test_rows_removed_from_the_tail_stay_caught_once_the_chain_grows_past_them(
    runtime: Runtime, clock: FakeClock
) -> None:
    append(runtime, 6)
    assert export_head(runtime, clock).seq == 6
    unguarded(runtime, "DELETE FROM audit_log WHERE seq >= 4")
    # The deployment goes on working: new rows link on to seq 3 and pass seq 6.
    append(runtime, 5)
    assert export_head(runtime, clock).seq == 6
    assert problems(runtime) == [(6, "differs from the signed head (the chain was rewritten)")]


def test_a_checkpoint_made_up_to_cover_removed_rows_leaves_the_signed_head_as_evidence(
    runtime: Runtime, clock: FakeClock
) -> None:
    """Rows removed from the tail, then a checkpoint of one's own (unsigned) covering them
    and the rest archived away: the exporter keeps the head that names the removed rows."""
    append(runtime, 6)
    assert export_head(runtime, clock).seq == 6
    unguarded(
        runtime,
        "DELETE FROM audit_log WHERE seq >= 4",
        "INSERT INTO audit_checkpoints (through_seq, last_hash, rows, segment, segment_sha256,"
        " at, mac) VALUES (7, 'made up', 7, :segment, 'made up', 0, NULL)",
        "DELETE FROM audit_log",
        params={"segment": archive.segment_name(1, 7)},
    )
    append(runtime, 3)
    assert export_head(runtime, clock).seq == 6
    assert (
        None,
        "checkpoint through seq 7 is not signed with this deployment's key (forged)",
    ) in problems(runtime)


def test_a_row_inserted_out_of_sequence_is_named_and_the_rest_still_verified(
    runtime: Runtime,
) -> None:
    """A far-future ``seq`` is reported where it is; the rows appended after it are
    chained and checked as before, so one insertion does not hide what follows."""
    append(runtime, 2)
    unguarded(
        runtime,
        "INSERT INTO audit_log (seq, at, tool, event, call_id, request_id, actor, detail, "
        "prev_hash, hash) VALUES (1000000, 0, 'wire', 'approved', NULL, NULL, 'mallory', NULL,"
        " 'x', 'y')",
    )
    append(runtime, 2)
    report = runtime.verify_audit()
    assert [(p.seq, p.reason) for p in report.problems] == [
        (1000000, "seq 3-999999 missing before it (deleted, or this row inserted)"),
        (1000000, "hash does not match the row (edited, or not written here)"),
    ]
    assert report.checked == 5


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
    archive_dir = runtime.archive_dir
    result = archive_old(runtime, clock)
    assert (result.rows, result.through_seq) == (4, 4)
    assert result.segment is not None
    segment = archive_dir / result.segment
    with gzip.open(segment, "rt") as handle:
        assert len(handle.readlines()) == 4
    assert verify(runtime) == (2, None, None)
    with runtime.store.reading() as conn:
        checkpoint = archive.latest_checkpoint(conn)
        assert checkpoint is not None and checkpoint.through_seq == 4
        assert (
            archive.verify_segment(segment, checkpoint, audit.GENESIS_HASH, runtime.audit) is None
        )
        assert [row["seq"] for row in audit.query(conn)] == [5, 6]
    # Nothing new is old enough: a second run archives nothing.
    assert archive_old(runtime, clock).rows == 0
    # Rows the checkpoint does not cover still cannot be deleted.
    with pytest.raises(DBAPIError, match="append-only"), runtime.engine.begin() as conn:
        conn.execute(text("DELETE FROM audit_log WHERE seq = 5"))
    # And the chain continues across the archive boundary.
    append(runtime, 1)
    assert verify(runtime) == (3, None, None)


def test_a_signed_head_in_an_archived_segment_is_compared_with_its_row(
    runtime: Runtime, clock: FakeClock
) -> None:
    append(runtime, 3)
    assert export_head(runtime, clock).seq == 3
    append(runtime, 2)
    clock.advance(91 * DAY_MS)
    append(runtime, 2)
    result = archive_old(runtime, clock)
    assert (result.through_seq, result.segment) == (5, archive.segment_name(1, 5))
    report = runtime.verify_audit()
    assert report.ok and "signed head found: seq 3" in report.lines, report.to_dict()
    segment = runtime.archive_dir / result.segment
    with gzip.open(segment, "rt") as handle:
        lines = handle.readlines()
    lines[2] = lines[2].replace(json.loads(lines[2])["hash"], "0" * 64)
    with gzip.open(segment, "wt") as handle:
        handle.writelines(lines)
    assert (3, "differs from the signed head (the chain was rewritten)") in problems(runtime)


def test_a_tampered_segment_is_caught(runtime: Runtime, clock: FakeClock, tmp_path: Path) -> None:
    append(runtime, 3)
    clock.advance(91 * DAY_MS)
    result = archive_old(runtime, clock)
    assert result.segment is not None
    segment = runtime.archive_dir / result.segment
    with gzip.open(segment, "rt") as handle:
        lines = handle.readlines()
    with gzip.open(segment, "wt") as handle:
        handle.writelines([lines[0], lines[1].replace('"test"', '"mallory"'), lines[2]])
    with runtime.store.reading() as conn:
        checkpoint = archive.latest_checkpoint(conn)
    assert checkpoint is not None
    problem = archive.verify_segment(segment, checkpoint, audit.GENESIS_HASH, runtime.audit)
    assert problem == f"{segment.name}: file digest does not match its checkpoint"


def test_old_segments_are_pruned_after_the_archive_window(
    runtime: Runtime, clock: FakeClock, tmp_path: Path
) -> None:
    append(runtime, 2)
    clock.advance(91 * DAY_MS)
    first = archive_old(runtime, clock)
    assert first.segment is not None
    # Segment files age by their modification time; make this one 401 days old.
    old = (clock.now - 401 * DAY_MS) / 1000
    os.utime(runtime.archive_dir / first.segment, (old, old))
    again = archive_old(runtime, clock)
    assert again.pruned == [first.segment]
    assert not (runtime.archive_dir / first.segment).exists()


def test_the_chain_continues_after_the_hot_table_was_archived_empty(
    runtime: Runtime, clock: FakeClock, tmp_path: Path
) -> None:
    append(runtime, 3)
    clock.advance(91 * DAY_MS)
    archive_old(runtime, clock)
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


def test_a_forged_checkpoint_and_manifest_line_do_not_cover_deleted_rows(
    runtime: Runtime,
) -> None:
    """The checkpoint row passes the database's own check (it names a real row by its
    hash), a manifest line agrees with it, and the covered rows are deleted through the
    archival path's trigger: without the key neither can be signed, and verify says so."""
    append(runtime, 4)
    chain = rows(runtime)
    forged = (
        "INSERT INTO audit_checkpoints (through_seq, last_hash, rows, segment, segment_sha256,"
        f" at, mac) VALUES (3, '{chain[2]['hash']}', 3, 'audit-forged.jsonl.gz', 'x', 0, "
        f"'{'0' * 64}')"
    )
    with runtime.engine.begin() as conn:
        conn.execute(text(forged))
        conn.execute(text("DELETE FROM audit_log WHERE seq <= 3"))
    runtime.archive_dir.mkdir(parents=True, exist_ok=True)
    entry = {
        "archived_at": 0,
        "first_prev_hash": None,
        "from_seq": 1,
        "last_hash": chain[2]["hash"],
        "mac": "0" * 64,
        "rows": 3,
        "segment": "audit-forged.jsonl.gz",
        "sha256": "x",
        "through_seq": 3,
    }
    line = json.dumps(entry) + "\n"
    (runtime.archive_dir / "manifest.jsonl").write_text(line)
    found = problems(runtime)
    assert (
        None,
        "checkpoint through seq 3 is not signed with this deployment's key (forged)",
    ) in found
    assert (
        None,
        "manifest line 1 (through seq 3) is not signed with this deployment's key (forged)",
    ) in found
    assert (4, "seq 1-3 missing before it (deleted, or this row inserted)") in found


def test_verify_never_opens_a_segment_a_checkpoint_names_outside_its_own(
    runtime: Runtime,
) -> None:
    """A checkpoint's segment name comes from the database: ``../`` would read any file (a
    device never ends), a control character would reach the operator's terminal."""
    append(runtime, 3)
    chain = rows(runtime)
    runtime.archive_dir.mkdir(parents=True, exist_ok=True)
    (runtime.archive_dir.parent / "outside.jsonl.gz").write_bytes(b"")
    for segment in ("../outside.jsonl.gz", "audit-\x1b]0;owned\x07.jsonl.gz"):
        unguarded(
            runtime,
            "DELETE FROM audit_checkpoints",
            "INSERT INTO audit_checkpoints (through_seq, last_hash, rows, segment,"
            " segment_sha256, at, mac) VALUES (2, :hash, 2, :segment, 'x', 0, NULL)",
            params={"hash": chain[1]["hash"], "segment": segment},
        )
        found = [reason for _, reason in problems(runtime)]
        shown = json.dumps(segment)[1:-1]
        assert f"checkpoint through seq 2 names a segment not its own: {shown}" in found
        assert not any("file digest" in reason or "\x1b" in reason for reason in found)


def test_verify_reports_a_missing_segment_within_retention(
    runtime: Runtime, clock: FakeClock, tmp_path: Path
) -> None:
    append(runtime, 2)
    clock.advance(91 * DAY_MS)
    result = archive_old(runtime, clock)
    assert result.segment is not None
    report = runtime.verify_audit()
    assert report.ok and f"segment {result.segment}: 2 rows ok" in report.lines
    (runtime.archive_dir / result.segment).unlink()
    clock.advance(DAY_MS // 2)
    days = runtime.settings.audit_archive_days
    # A verify run with a longer retention than the archive run's would see the same.
    assert problems(runtime) == [
        (
            None,
            f"segment {result.segment} is missing: deleted, or pruned by an archive run with "
            f"a shorter TOOLROUTER_AUDIT_ARCHIVE_DAYS than this one ({days:g} days; archived "
            "0.5 days ago)",
        )
    ]


UNSIGNED = "with this deployment's key (forged)"


@pytest.mark.parametrize(
    ("added", "reason"),
    [
        (b"garbage{", "manifest line 2 is not JSON"),
        (b'["x"]', "manifest line 2 is not a JSON object"),
        (b'{"through_seq": 5}', "manifest line 2 is incomplete: lacks last_hash, sha256"),
        (
            b'{"through_seq": "2", "last_hash": "x", "sha256": 1}',
            "manifest line 2 is incomplete: has through_seq, sha256 of the wrong type",
        ),
        (b"\xff\xfe{}", "manifest line 2 is not UTF-8 text"),
        (b"[" * 100_000, "manifest line 2 is nested too deeply to read"),
        (
            b'{"through_seq": 5, "last_hash": "x", "sha256": "x", "rows": NaN}',
            f"manifest line 2 (through seq 5) is not signed {UNSIGNED}",
        ),
    ],
    ids=["not-json", "not-an-object", "incomplete", "wrong-types", "not-utf8", "deep", "nan"],
)
def test_verify_reports_a_malformed_or_unsigned_manifest_line_by_its_number(
    runtime: Runtime, clock: FakeClock, added: bytes, reason: str
) -> None:
    append(runtime, 2)
    clock.advance(91 * DAY_MS)
    archive_old(runtime, clock)
    with (runtime.archive_dir / "manifest.jsonl").open("ab") as manifest:
        manifest.write(added + b"\n")
    assert problems(runtime) == [(None, reason)]


def test_verify_reports_a_manifest_entry_replaced_by_an_incomplete_one(
    runtime: Runtime, clock: FakeClock
) -> None:
    append(runtime, 2)
    clock.advance(91 * DAY_MS)
    archive_old(runtime, clock)
    (runtime.archive_dir / "manifest.jsonl").write_text('{"through_seq": 2}\n')
    assert problems(runtime) == [
        (None, "manifest line 1 is incomplete: lacks last_hash, sha256"),
        (None, "checkpoint through seq 2 has no matching manifest entry"),
    ]


def test_verify_reports_a_manifest_line_that_names_no_checkpoint(
    runtime: Runtime, clock: FakeClock
) -> None:
    """Signed or not, a line for a checkpoint the database does not have is reported; the
    real line for the same seq as a forged one still vouches for its checkpoint."""
    append(runtime, 2)
    clock.advance(91 * DAY_MS)
    archive_old(runtime, clock)
    path = runtime.archive_dir / "manifest.jsonl"
    real = json.loads(path.read_text())
    signed = manifest.line_text({**real, "through_seq": 9}, runtime.audit.keyring)
    forged = json.dumps({**real, "rows": 1})
    path.write_text(path.read_text() + f"{signed}\n\n{forged}\n")
    assert problems(runtime) == [
        (None, f"manifest line 4 (through seq 2) is not signed {UNSIGNED}"),
        (None, "manifest line 2 (through seq 9) names no checkpoint"),
    ]


def test_the_manifest_is_private_to_its_owner(runtime: Runtime, clock: FakeClock) -> None:
    append(runtime, 2)
    clock.advance(91 * DAY_MS)
    archive_old(runtime, clock)
    assert stat.S_IMODE((runtime.archive_dir / "manifest.jsonl").stat().st_mode) == 0o600


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
        runtime.audit.append(conn, [AuditEntry(event="first", actor="test")], at=runtime.clock())
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
