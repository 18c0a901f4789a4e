"""``toolrouter audit verify``: everything that shows the audit log was changed.

- the deployment row (where the keyed chain begins) must carry the key's signature;
- every checkpoint and manifest line must be signed with the key, and checkpoints must
  follow each other without a gap;
- the hot chain, from the latest signed checkpoint (or the genesis), must have every seq,
  each row linked to the one before it and hashed with the key: an edit, a deletion at the
  head or in the middle, or an inserted row shows, re-hashed or not;
- the signed head exported outside the database must still be found: rows removed from
  the end show;
- archive segments must match their checkpoints, row by row.

Every problem is reported (up to a limit), with the seq where it is, and the walk goes on:
one inserted row does not hide what comes after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from ..db.schema import audit_checkpoints, audit_log
from ..trust.keyring import KeyRing
from . import archive
from .deployment import Deployment
from .head import SignedHead
from .log import GENESIS_HASH, AuditLog

MAX_PROBLEMS = 100
BATCH = 5000


@dataclass(frozen=True, slots=True)
class Problem:
    seq: int | None
    reason: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.reason}" if self.seq is not None else self.reason


@dataclass
class Report:
    """What ``verify`` found: rows checked (in the hot table, and in archive segments),
    problems, and lines worth showing."""

    checked: int = 0
    archived: int = 0
    problems: list[Problem] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, seq: int | None, reason: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(seq, reason))
        else:
            self.truncated = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "rows_checked": self.checked,
            "archived_rows_checked": self.archived,
            "problems": [{"seq": p.seq, "reason": p.reason} for p in self.problems],
            "more_problems": self.truncated,
            "notes": list(self.lines),
        }


@dataclass(frozen=True, slots=True)
class Evidence:
    """What verify needs from outside the database's tables. ``head`` is the signed head
    as read from ``head_path`` before the database's snapshot was taken: the approval
    worker exports a newer one every few seconds, which a snapshot taken earlier could not
    reach, and verify would report its rows missing."""

    keyring: KeyRing
    namespace: str
    head_path: Path
    head: SignedHead | None
    archive_dir: Path
    now: int
    archive_days: float


def verify(conn: Connection, found: Deployment | None, evidence: Evidence) -> Report:
    report = Report()
    keyring = evidence.keyring
    keyed_from = 0
    if found is None:
        # A database no process has started on has no row yet, and nothing to verify.
        if _has_history(conn):
            report.add(
                None, "the deployment row is missing: where the keyed chain begins is unknown"
            )
    elif not found.verifies(keyring):
        report.add(None, "the deployment row is not signed with this deployment's key (forged)")
    else:
        keyed_from = found.keyed_from_seq
    log = AuditLog(keyring, keyed_from_seq=keyed_from)
    start_seq, start_hash = _start(conn, log, report)
    last = _walk(conn, log, start_seq, start_hash, report)
    _check_head(conn, evidence, report, start_seq, start_hash, last)
    lines, problems, report.archived = archive.verify_archives(
        conn, evidence.archive_dir, log, now=evidence.now, archive_days=evidence.archive_days
    )
    report.lines.extend(lines)
    for problem in problems:
        report.add(None, problem)
    return report


def _start(conn: Connection, log: AuditLog, report: Report) -> tuple[int, str]:
    """Where the hot chain continues from: the latest checkpoint the key signed (forged ones
    are reported by ``archive.verify_archives``), else the genesis."""
    for checkpoint in reversed(archive.checkpoints(conn)):
        legacy = checkpoint.through_seq <= log.keyed_from_seq
        if legacy or checkpoint.verifies(log.keyring):
            return checkpoint.through_seq, checkpoint.last_hash
    return 0, GENESIS_HASH


def _has_history(conn: Connection) -> bool:
    return any(
        conn.execute(select(column).limit(1)).first() is not None
        for column in (audit_log.c.seq, audit_checkpoints.c.through_seq)
    )


def _walk(
    conn: Connection, log: AuditLog, after: int, prev_hash: str, report: Report
) -> int | None:
    """Checks the hot rows after ``after``; the last seq among them, if any."""
    expected, last = after + 1, None
    while True:
        rows = conn.execute(
            select(audit_log).where(audit_log.c.seq > after).order_by(audit_log.c.seq).limit(BATCH)
        ).all()
        if not rows:
            return last
        for row in rows:
            data = dict(row._mapping)
            seq = data["seq"]
            if not isinstance(seq, int):
                # SQLite keeps any type in any column: such a row was written by hand.
                report.add(None, f"a row whose seq is {seq!r}: not a row this log writes")
                continue
            if seq != expected:
                missing = f"seq {expected}" if seq == expected + 1 else f"seq {expected}-{seq - 1}"
                report.add(seq, f"{missing} missing before it (deleted, or this row inserted)")
            elif data["prev_hash"] != prev_hash:
                report.add(seq, "does not link to the row before it (prev_hash differs)")
            if _row_hash(log, data) != data["hash"]:
                report.add(seq, "hash does not match the row (edited, or not written here)")
            prev_hash, expected, last = data["hash"], seq + 1, seq
            report.checked += 1
        after = rows[-1].seq


def _row_hash(log: AuditLog, data: dict[str, Any]) -> str | None:
    """The row's hash as this log computes it; None for a value of a type it never writes
    (which then matches no hash)."""
    try:
        return log.row_hash(data)
    except (TypeError, ValueError):
        return None


def _check_head(
    conn: Connection,
    evidence: Evidence,
    report: Report,
    start_seq: int,
    start_hash: str,
    last: int | None,
) -> None:
    head = evidence.head
    if head is None:
        report.lines.append(
            f"no signed head at {evidence.head_path}: rows removed from the end cannot be "
            "told from rows never written"
        )
        return
    if not head.verifies(evidence.keyring) or head.namespace != evidence.namespace:
        report.add(None, f"the signed head at {evidence.head_path} does not verify (forged)")
        return
    end = last if last is not None else start_seq
    if end < head.seq:
        report.add(
            end + 1,
            f"rows after seq {end} are missing: the signed head names seq {head.seq}",
        )
        return
    if head.seq == start_seq:
        same = head.hash == start_hash
    elif head.seq <= 0:
        same = head.hash == GENESIS_HASH
    elif head.seq < start_seq:
        archived = archive.archived_hash(conn, evidence.archive_dir, head.seq)
        if archived is None:
            report.lines.append(
                f"signed head at seq {head.seq}: archived, and no segment here to compare it with"
            )
            return
        same = archived == head.hash
    else:
        stored = conn.execute(select(audit_log.c.hash).where(audit_log.c.seq == head.seq)).scalar()
        same = stored == head.hash
    if not same:
        report.add(head.seq, "differs from the signed head (the chain was rewritten)")
        return
    report.lines.append(f"signed head found: seq {head.seq}")
