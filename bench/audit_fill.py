"""Growing the audit table fast, with a chain ``verify`` accepts: rows generated in bulk with
``AuditLog.row_hash`` (the deployment's key), inserted with COPY (PostgreSQL) or executemany
(SQLite)."""

from __future__ import annotations

import io
import os
import secrets
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.engine import Connection

from router.audit import log as audit
from router.canonical import canonical_json
from router.db.engine import make_engine
from router.db.schema import audit_log

COLUMNS = ("seq", "at", "tool", "event", "call_id", "request_id", "actor", "detail")
BLOCK = 50_000


def fill(database_url: str, log: audit.AuditLog, total_rows: int, *, at: int) -> int:
    """Append rows until the hot audit table holds ``total_rows``; returns how many were added."""
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            seq, prev_hash = audit.locked_head(conn)
            have = int(conn.execute(select(func.count()).select_from(audit_log)).scalar_one())
            wanted = max(0, total_rows - have)
            added = 0
            while added < wanted:
                rows = []
                for _ in range(min(BLOCK, wanted - added)):
                    seq += 1
                    row: dict[str, Any] = {
                        "seq": seq,
                        "at": at,
                        "tool": "noop",
                        "event": "ok",
                        "call_id": "call_" + secrets.token_hex(16),
                        "request_id": None,
                        "actor": "bench-fill",
                        "detail": canonical_json({"attempt": 1}),
                        "prev_hash": prev_hash,
                    }
                    row["hash"] = prev_hash = log.row_hash(row)
                    rows.append(row)
                _insert(conn, rows)
                added += len(rows)
        settle(engine)
        return added
    finally:
        engine.dispose()


def settle(engine: Engine) -> None:
    """Statistics and a checkpoint after the fill, as a table that grew over months would
    have from autovacuum and the background checkpointer: otherwise the measurement that
    follows pays for flushing a million freshly written rows, which is the fill's cost and
    not the cost of having them."""
    # On the driver's connection in autocommit: VACUUM and CHECKPOINT refuse transactions.
    raw: Any = engine.raw_connection()
    try:
        driver = raw.driver_connection
        if engine.dialect.name == "postgresql":
            driver.rollback()  # the pool's checkout began a transaction (router.db.engine)
            driver.autocommit = True
            driver.execute("VACUUM ANALYZE audit_log")
            driver.execute("CHECKPOINT")
        else:
            driver.execute("ANALYZE audit_log")
            driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        raw.close()
    os.sync()  # the fill's pages, written out (see ``bench.run.quiet_disk``)


def _insert(conn: Connection, rows: list[dict[str, Any]]) -> None:
    if conn.dialect.name != "postgresql":
        conn.execute(audit_log.insert(), rows)
        return
    names = (*COLUMNS, "prev_hash", "hash")
    buffer = io.StringIO()
    for row in rows:
        buffer.write("\t".join(_copy_text(row[name]) for name in names) + "\n")
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    with cursor.copy(f"COPY audit_log ({', '.join(names)}) FROM STDIN") as copy:
        copy.write(buffer.getvalue())


def _copy_text(value: Any) -> str:
    if value is None:
        return "\\N"
    # Canonical JSON is ASCII with no tabs or newlines; only backslashes need escaping.
    return str(value).replace("\\", "\\\\")
