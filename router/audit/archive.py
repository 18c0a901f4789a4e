"""Audit retention: old rows leave the hot table for compressed JSONL segments.

The one archival path: rows older than the hot window are written to a gzip segment,
a checkpoint (last seq, last hash, segment digest), signed with the deployment's key, is
inserted, and only then are the rows deleted — the database's trigger refuses to delete
any row not covered by a checkpoint, and ``verify`` refuses a checkpoint the key did not
sign. ``verify`` continues the chain from the latest checkpoint, and a manifest
(``manifest.jsonl``, each line signed too) lists every segment's chain hashes beside the
files.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sqlalchemy import delete, func, select
from sqlalchemy.engine import Connection

from ..canonical import canonical_json
from ..clock import Clock
from ..db.schema import audit_checkpoints, audit_log
from ..db.store import Store
from ..files import private_dir, private_file
from ..names import echo_name
from ..trust.keyring import KeyRing, Purpose
from . import manifest
from .log import GENESIS_HASH, AuditLog, lock_chain

DAY_MS = 86_400_000
BATCH = 10_000


@dataclass(frozen=True, slots=True)
class Checkpoint:
    through_seq: int
    last_hash: str
    rows: int
    segment: str
    segment_sha256: str
    at: int
    mac: str | None = None

    def signed_text(self) -> str:
        return canonical_json(
            {
                "through_seq": self.through_seq,
                "last_hash": self.last_hash,
                "rows": self.rows,
                "segment": self.segment,
                "segment_sha256": self.segment_sha256,
                "at": self.at,
            }
        )

    def verifies(self, keyring: KeyRing) -> bool:
        return keyring.verify(Purpose.AUDIT_HEAD, self.signed_text(), self.mac)


def latest_checkpoint(conn: Connection) -> Checkpoint | None:
    row = conn.execute(
        select(audit_checkpoints).order_by(audit_checkpoints.c.through_seq.desc()).limit(1)
    ).first()
    return Checkpoint(**dict(row._mapping)) if row else None


def signed_checkpoint(conn: Connection, keyring: KeyRing) -> bool:
    """Whether any checkpoint is signed with ``keyring``: the log was archived with it."""
    return any(checkpoint.verifies(keyring) for checkpoint in checkpoints(conn))


def covering_checkpoint(conn: Connection, seq: int) -> Checkpoint | None:
    """The checkpoint under which row ``seq`` was archived, if it was."""
    row = conn.execute(
        select(audit_checkpoints)
        .where(audit_checkpoints.c.through_seq >= seq)
        .order_by(audit_checkpoints.c.through_seq)
        .limit(1)
    ).first()
    return Checkpoint(**dict(row._mapping)) if row else None


def checkpoints(conn: Connection) -> list[Checkpoint]:
    """Every checkpoint, oldest first: the chain of segments."""
    rows = conn.execute(select(audit_checkpoints).order_by(audit_checkpoints.c.through_seq))
    return [Checkpoint(**dict(row._mapping)) for row in rows]


def export(conn: Connection, out: IO[str], *, after_seq: int = 0) -> int:
    """Write hot rows after ``after_seq`` as JSON lines; returns how many."""
    count = 0
    while True:
        rows = conn.execute(
            select(audit_log)
            .where(audit_log.c.seq > after_seq)
            .order_by(audit_log.c.seq)
            .limit(BATCH)
        ).all()
        if not rows:
            return count
        for row in rows:
            out.write(json.dumps(dict(row._mapping), sort_keys=True) + "\n")
        count += len(rows)
        after_seq = rows[-1].seq


@dataclass(frozen=True, slots=True)
class ArchiveResult:
    rows: int
    segment: str | None
    through_seq: int | None
    pruned: list[str]


def archive(
    store: Store,
    log: AuditLog,
    archive_dir: Path,
    *,
    clock: Clock,
    hot_days: float,
    archive_days: float,
) -> ArchiveResult:
    """Move rows older than ``hot_days`` to a segment; prune segments past ``archive_days``."""
    now = clock()
    cutoff = now - int(hot_days * DAY_MS)
    private_dir(archive_dir)
    with store.transaction() as conn:
        # Hold the chain lock: nothing is appended while the prefix moves out.
        lock_chain(conn)
        checkpoint = latest_checkpoint(conn)
        start = checkpoint.through_seq if checkpoint else 0
        first_young = conn.execute(
            select(func.min(audit_log.c.seq)).where(audit_log.c.at >= cutoff)
        ).scalar()
        last_old = conn.execute(
            select(func.max(audit_log.c.seq)).where(audit_log.c.seq < first_young)
            if first_young is not None
            else select(func.max(audit_log.c.seq))
        ).scalar()
        if last_old is None or last_old <= start:
            return ArchiveResult(0, None, None, _prune(archive_dir, now, archive_days))
        name = segment_name(start + 1, last_old)
        path = archive_dir / name
        tmp = path.with_suffix(".tmp")
        count, last_hash, first_prev = 0, GENESIS_HASH, None
        with gzip.open(private_file(tmp), "wt", encoding="utf-8") as handle:
            after = start
            while after < last_old:
                rows = conn.execute(
                    select(audit_log)
                    .where(audit_log.c.seq > after, audit_log.c.seq <= last_old)
                    .order_by(audit_log.c.seq)
                    .limit(BATCH)
                ).all()
                if not rows:
                    break
                for row in rows:
                    data = dict(row._mapping)
                    first_prev = data["prev_hash"] if first_prev is None else first_prev
                    handle.write(json.dumps(data, sort_keys=True) + "\n")
                    last_hash = data["hash"]
                count += len(rows)
                after = rows[-1].seq
        digest = _file_sha256(tmp)
        os.replace(tmp, path)
        checkpoint = Checkpoint(last_old, last_hash, count, name, digest, now)
        signed = dataclasses.replace(
            checkpoint, mac=log.keyring.sign(Purpose.AUDIT_HEAD, checkpoint.signed_text())
        )
        conn.execute(audit_checkpoints.insert(), [dataclasses.asdict(signed)])
        conn.execute(delete(audit_log).where(audit_log.c.seq <= last_old))
    entry = {
        "segment": name,
        "from_seq": start + 1,
        "through_seq": last_old,
        "rows": count,
        "first_prev_hash": first_prev,
        "last_hash": last_hash,
        "sha256": digest,
        "archived_at": now,
    }
    manifest.append(archive_dir, entry, log.keyring)
    return ArchiveResult(count, name, last_old, _prune(archive_dir, now, archive_days))


def segment_name(from_seq: int, through_seq: int) -> str:
    return f"audit-{from_seq:012d}-{through_seq:012d}.jsonl.gz"


def _prune(archive_dir: Path, now: int, archive_days: float) -> list[str]:
    """Delete segment files older than the archive retention; their checkpoints remain."""
    cutoff_s = (now - int(archive_days * DAY_MS)) / 1000
    pruned = []
    for path in sorted(archive_dir.glob("audit-*.jsonl.gz")):
        if path.stat().st_mtime < cutoff_s:
            path.unlink()
            pruned.append(path.name)
    return pruned


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_segment(path: Path, checkpoint: Checkpoint, prev_hash: str, log: AuditLog) -> str | None:
    """Check one segment against its checkpoint; the problem as a sentence, or None."""
    if _file_sha256(path) != checkpoint.segment_sha256:
        return f"{path.name}: file digest does not match its checkpoint"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            row: dict[str, Any] = json.loads(line)
            if row["prev_hash"] != prev_hash or log.row_hash(row) != row["hash"]:
                return f"{path.name}: chain broken at seq {row['seq']}"
            prev_hash = row["hash"]
    if prev_hash != checkpoint.last_hash:
        return f"{path.name}: last hash does not match its checkpoint"
    return None


def archived_hash(conn: Connection, archive_dir: Path, seq: int) -> str | None:
    """The hash of archived row ``seq``, from its checkpoint or its segment; None where it
    cannot be read (no checkpoint covers it, its segment was pruned or is damaged)."""
    checkpoint = covering_checkpoint(conn, seq)
    if checkpoint is None:
        return None
    if checkpoint.through_seq == seq:
        return checkpoint.last_hash
    first = checkpoint.through_seq - checkpoint.rows + 1
    path = archive_dir / checkpoint.segment
    if checkpoint.segment != segment_name(first, checkpoint.through_seq) or not path.exists():
        return None
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                archived: dict[str, Any] = json.loads(line)
                if archived.get("seq") == seq:
                    return str(archived.get("hash"))
    except (OSError, EOFError, ValueError, AttributeError):
        pass  # a damaged segment: ``verify_archives`` reports it against its checkpoint
    return None


def verify_archives(
    conn: Connection, archive_dir: Path, log: AuditLog, *, now: int, archive_days: float
) -> tuple[list[str], list[str], int]:
    """Check every checkpoint against its signature, the manifest and its segment file.

    Returns (lines to show, problems, rows found whole in segments). A segment may be
    missing only once it is past the archive retention; rows a checkpoint covers must have
    left the hot table.
    """
    lines: list[str] = []
    rows_ok = 0
    found, problems = manifest.read(archive_dir)
    signed = _signed_lines(found, log, problems)
    prev_hash = GENESIS_HASH
    retention_cutoff = now - int(archive_days * DAY_MS)
    expected_from = 1
    for checkpoint in checkpoints(conn):
        if checkpoint.through_seq > log.keyed_from_seq and not checkpoint.verifies(log.keyring):
            problems.append(
                f"checkpoint through seq {checkpoint.through_seq} is not signed with this "
                "deployment's key (forged)"
            )
        if checkpoint.through_seq - checkpoint.rows + 1 != expected_from:
            problems.append(
                f"checkpoint through seq {checkpoint.through_seq} does not start where the "
                f"one before it ended (seq {expected_from})"
            )
        expected_from = checkpoint.through_seq + 1
        line = signed.pop(checkpoint.through_seq, None)
        if (
            line is None
            or line.entry["sha256"] != checkpoint.segment_sha256
            or line.entry["last_hash"] != checkpoint.last_hash
        ):
            problems.append(
                f"checkpoint through seq {checkpoint.through_seq} has no matching manifest entry"
            )
        first = checkpoint.through_seq - checkpoint.rows + 1
        if checkpoint.segment != segment_name(first, checkpoint.through_seq):
            # Never opened: a name from the database may lead anywhere (``../``, a device).
            problems.append(
                f"checkpoint through seq {checkpoint.through_seq} names a segment not its own: "
                f"{echo_name(checkpoint.segment)}"
            )
            prev_hash = checkpoint.last_hash
            continue
        path = archive_dir / checkpoint.segment
        if path.exists():
            problem = verify_segment(path, checkpoint, prev_hash, log)
            if problem:
                problems.append(problem)
            else:
                lines.append(f"segment {checkpoint.segment}: {checkpoint.rows} rows ok")
                rows_ok += checkpoint.rows
        elif checkpoint.at < retention_cutoff:
            lines.append(f"segment {checkpoint.segment}: pruned after retention (checkpoint kept)")
        else:
            age = (now - checkpoint.at) / DAY_MS
            problems.append(
                f"segment {checkpoint.segment} is missing: deleted, or pruned by an archive run "
                f"with a shorter TOOLROUTER_AUDIT_ARCHIVE_DAYS than this one ({archive_days:g} "
                f"days; archived {age:.1f} days ago)"
            )
        prev_hash = checkpoint.last_hash
    latest = latest_checkpoint(conn)
    if latest is not None:
        leftover = conn.execute(
            select(func.count()).where(audit_log.c.seq <= latest.through_seq)
        ).scalar_one()
        if leftover:
            problems.append(f"{leftover} rows covered by a checkpoint are still in the hot table")
    problems.extend(f"{line.describe()} names no checkpoint" for line in signed.values())
    return lines, problems, rows_ok


def _signed_lines(
    found: list[manifest.Line], log: AuditLog, problems: list[str]
) -> dict[int, manifest.Line]:
    """The lines that may vouch for a checkpoint, by seq: signed, or from before the key."""
    signed: dict[int, manifest.Line] = {}
    for line in found:
        if line.through_seq > log.keyed_from_seq and not manifest.verifies(line.entry, log.keyring):
            problems.append(f"{line.describe()} is not signed with this deployment's key (forged)")
        else:
            signed[line.through_seq] = line
    return signed
