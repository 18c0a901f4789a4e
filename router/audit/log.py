"""The append-only audit log with its keyed hash chain (SPEC §7).

Rows are only ever inserted. Each row's ``hash`` is an HMAC-SHA256, with the deployment's
audit key, of its own fields and the previous row's hash: rewriting or removing a row
breaks the chain at that row, and without the key nobody can re-hash the rows after it
to hide that. The database enforces append-only with triggers (see the migrations), which
stop mistakes; the key stops whoever can drop them. ``AuditLog`` is the one writer;
``router.audit.verify`` checks the chain.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.engine import Connection

from ..canonical import canonical_json, sha256_hex
from ..db.direct import execute_direct, insert_rows
from ..db.schema import audit_checkpoints, audit_log
from ..trust.keyring import KeyRing, Purpose

GENESIS_HASH = "0" * 64
# Serializes chain appends on PostgreSQL; SQLite's write lock already does.
_CHAIN_LOCK_KEY = 0x746F6F6C  # "tool"


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One row to append; ``seq``, ``prev_hash`` and ``hash`` are assigned by ``append``."""

    event: str
    actor: str
    tool: str | None = None
    call_id: str | None = None
    request_id: str | None = None
    detail: Any = None


def hashed_text(row: dict[str, Any]) -> str:
    """What a row's hash covers: the canonical JSON of every other field.

    Every append and every verification hashes a row, so the row's usual shape (text or
    null fields, integer ``seq`` and ``at``) is written out directly, with the escaper
    ``json.dumps`` itself uses, in the key order ``canonical_json`` sorts them into; any
    other shape goes through ``canonical_json``. Both give the same text.
    """
    seq, at = row["seq"], row["at"]
    if type(seq) is int and type(at) is int:
        try:
            return (
                f'{{"actor":{_text(row["actor"])},"at":{at},"call_id":{_text(row["call_id"])},'
                f'"detail":{_text(row["detail"])},"event":{_text(row["event"])},'
                f'"prev_hash":{_text(row["prev_hash"])},"request_id":{_text(row["request_id"])},'
                f'"seq":{seq},"tool":{_text(row["tool"])}}}'
            )
        except TypeError:
            pass  # a field that is neither text nor null
    return canonical_json({key: row[key] for key in _HASHED_FIELDS})


def _text(value: str | None) -> str:
    # The C escaper behind json.dumps(ensure_ascii=True); it refuses anything but text.
    return "null" if value is None else _escape_ascii(value)


_escape_ascii = json.encoder.encode_basestring_ascii


_HASHED_FIELDS = (
    "seq",
    "at",
    "tool",
    "event",
    "call_id",
    "request_id",
    "actor",
    "detail",
    "prev_hash",
)


def lock_chain(conn: Connection) -> None:
    """Serialize appends to the chain until the transaction ends."""
    if conn.dialect.name == "postgresql":
        execute_direct(conn, _CHAIN_LOCK, {"key": _CHAIN_LOCK_KEY})


def locked_head(conn: Connection) -> tuple[int, str]:
    """Take the chain's lock (``lock_chain``) and read its head (``chain_head``).

    On PostgreSQL both in one round trip, through ``audit_chain_head`` (migration 0006):
    every append in every process waits for this lock, so it must not stay held across
    a round trip to the client and back between the two."""
    if conn.dialect.name != "postgresql":
        return chain_head(conn)
    head = execute_direct(conn, _LOCKED_HEAD, {"key": _CHAIN_LOCK_KEY}).first()
    if head is not None:
        return head["head_seq"], head["head_hash"]
    return chain_head(conn)  # the hot table is empty: the lock is held, read the checkpoints


# Built once: every append runs these (see ``router.db.store`` on why).
_HEAD = select(audit_log.c.seq, audit_log.c.hash).order_by(audit_log.c.seq.desc()).limit(1)
_CHAIN_LOCK = text("SELECT pg_advisory_xact_lock(:key)")
_LOCKED_HEAD = text("SELECT head_seq, head_hash FROM audit_chain_head(:key)")


def chain_head(conn: Connection) -> tuple[int, str]:
    """The last ``seq`` and hash of the chain: the newest hot row, else the newest archival
    checkpoint (the hot table may have been archived empty), else the genesis."""
    last = execute_direct(conn, _HEAD, {}).first()
    if last is not None:
        return last["seq"], last["hash"]
    checkpoint = conn.execute(
        select(audit_checkpoints.c.through_seq, audit_checkpoints.c.last_hash)
        .order_by(audit_checkpoints.c.through_seq.desc())
        .limit(1)
    ).first()
    if checkpoint is not None:
        return checkpoint.through_seq, checkpoint.last_hash
    return 0, GENESIS_HASH


class AuditLog:
    """Appends to the chain with the deployment's key, and recomputes row hashes.

    ``keyed_from_seq``: rows up to it were chained, before the deployment had a key, with
    plain SHA-256 (``router.audit.deployment``).
    """

    def __init__(self, keyring: KeyRing, *, keyed_from_seq: int = 0) -> None:
        self.keyring, self.keyed_from_seq = keyring, keyed_from_seq

    def row_hash(self, row: dict[str, Any]) -> str:
        text = hashed_text(row)
        if row["seq"] <= self.keyed_from_seq:
            return sha256_hex(text)
        return self.keyring.sign(Purpose.AUDIT, text)

    def append(self, conn: Connection, entries: list[AuditEntry], *, at: int) -> list[int]:
        """Append ``entries`` inside the caller's transaction; returns their ``seq`` numbers.

        On PostgreSQL this takes the chain's lock until the transaction ends, and every
        append in every process waits for it: append after every row the transaction
        writes. Then no transaction holds the chain while it waits for a row another holds
        while it waits for the chain (a deadlock), and the lock is held for the append and
        the commit alone.
        """
        if not entries:
            return []
        seq, prev_hash = locked_head(conn)
        rows: list[dict[str, Any]] = []
        sign = self.keyring.sign
        for entry in entries:
            seq += 1
            row = {
                "seq": seq,
                "at": at,
                "tool": entry.tool,
                "event": str(entry.event),
                "call_id": entry.call_id,
                "request_id": entry.request_id,
                "actor": entry.actor,
                "detail": None if entry.detail is None else canonical_json(entry.detail),
                "prev_hash": prev_hash,
            }
            row["hash"] = prev_hash = sign(Purpose.AUDIT, hashed_text(row))
            rows.append(row)
        insert_rows(conn, audit_log, rows)
        return [row["seq"] for row in rows]


def to_public(row: Any) -> dict[str, Any]:
    """A reader's copy of a row, with ``detail`` decoded."""
    data = dict(row._mapping)
    if data.get("detail") is not None:
        data["detail"] = json.loads(data["detail"])
    return data


def query(
    conn: Connection,
    *,
    tool: str | None = None,
    event: str | None = None,
    call_id: str | None = None,
    after_seq: int = 0,
    limit: int = 100,
    newest: bool = False,
) -> list[dict[str, Any]]:
    """Rows in ``seq`` order, filtered; always fresh copies. The first ``limit`` of them, or
    with ``newest`` the last ``limit``."""
    stmt = select(audit_log).where(audit_log.c.seq > after_seq)
    if tool is not None:
        stmt = stmt.where(audit_log.c.tool == tool)
    if event is not None:
        stmt = stmt.where(audit_log.c.event == event)
    if call_id is not None:
        stmt = stmt.where(audit_log.c.call_id == call_id)
    if newest:
        last = conn.execute(stmt.order_by(audit_log.c.seq.desc()).limit(limit)).all()
        return [to_public(row) for row in reversed(last)]
    rows = conn.execute(stmt.order_by(audit_log.c.seq).limit(limit))
    return [to_public(row) for row in rows]
