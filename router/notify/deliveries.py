"""The deliveries table: planned once per request, event and channel; each attempt
claimed with a conditional update, so two messages for one delivery send it once."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from ..db.schema import notification_deliveries as table
from .digest import Planned
from .model import OPEN_STATUSES, Delivery, DeliveryStatus, NotifyEvent

# Longest last_error kept: the reason, not a receiver's whole answer.
ERROR_CHARS = 500
# Ids in one ``IN (…)``: well under SQLite's limit on a statement's parameters.
IDS_PER_QUERY = 500
# What a delivery whose attempt died with its process (no outcome recorded) is marked.
INTERRUPTED = "interrupted while sending"
# Hosts' clocks, and a Celery ETA against a worker's, differ: this much early is on time.
ON_TIME_MS = 1000


def new_delivery_id() -> str:
    return "ntf_" + secrets.token_hex(12)


def plan(
    conn: Connection,
    *,
    request_id: str,
    call_id: str,
    tool: str,
    event: NotifyEvent,
    channels: Sequence[tuple[str, str]],
    now: int,
    occurrence: int = 0,
) -> list[Planned]:
    """Insert a delivery per ``(channel, channel_type)`` not planned before for this request,
    event and ``occurrence``; those inserted now (a repeated fan-out gets none)."""
    rows = [
        {
            "id": new_delivery_id(),
            "request_id": request_id,
            "call_id": call_id,
            "tool": tool,
            "event": str(event),
            "channel": name,
            "channel_type": kind,
            "status": str(DeliveryStatus.PENDING),
            "attempts": 0,
            "last_error": None,
            "created_at": now,
            "updated_at": now,
            "next_attempt_at": now,
            "delivered_at": None,
            "occurrence": occurrence,
        }
        for name, kind in channels
    ]
    if not rows:
        return []
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    conn.execute(dialect.insert(table).values(rows).on_conflict_do_nothing())
    ids = [row["id"] for row in rows]
    return _planned(conn.execute(select(*_PLANNED).where(table.c.id.in_(ids))))


# What grouping deliveries into messages needs of each (``digest.grouped``).
_PLANNED = (table.c.id, table.c.channel, table.c.channel_type, table.c.event)


def _planned(rows: Any) -> list[Planned]:
    return [Planned(row.id, row.channel, row.channel_type, row.event) for row in rows]


def edit_told(conn: Connection, request_id: str, channel: str) -> bool:
    """Whether an edit of the request is planned or told on ``channel``."""
    found = conn.execute(
        select(table.c.id)
        .where(
            table.c.request_id == request_id,
            table.c.channel == channel,
            table.c.event == str(NotifyEvent.EDITED),
        )
        .limit(1)
    ).first()
    return found is not None


def get(conn: Connection, delivery_id: str) -> Delivery | None:
    row = conn.execute(select(table).where(table.c.id == delivery_id)).first()
    return Delivery.from_row(row) if row else None


def claim(conn: Connection, delivery: Delivery, *, now: int) -> bool:
    """Take ``delivery`` for one attempt, if it is still as read (open, same attempts) and
    due: a message naming it before its backoff has passed (Redis is not trusted) would
    spend its attempts early. Due within ``ON_TIME_MS``: a message early only by this
    process's clock is attempted, not dropped to wait for the resend sweep."""
    result = conn.execute(
        update(table)
        .where(
            table.c.id == delivery.id,
            table.c.attempts == delivery.attempts,
            table.c.status.in_([str(s) for s in OPEN_STATUSES]),
            table.c.next_attempt_at <= now + ON_TIME_MS,
        )
        .values(
            status=str(DeliveryStatus.SENDING),
            attempts=delivery.attempts + 1,
            updated_at=now,
            next_attempt_at=None,
        )
    )
    return bool(result.rowcount == 1)


def finish(
    conn: Connection,
    delivery_id: str,
    status: DeliveryStatus,
    *,
    now: int,
    error: str | None = None,
    next_attempt_at: int | None = None,
    attempts: int | None = None,
) -> None:
    """Record how an attempt ended; ``attempts`` sets the count back where a claimed
    delivery was not attempted after all."""
    values: dict[str, Any] = {
        "status": str(status),
        "updated_at": now,
        "next_attempt_at": next_attempt_at,
    }
    if attempts is not None:
        values["attempts"] = attempts
    if error is not None:
        values["last_error"] = error[:ERROR_CHARS]
    if status is DeliveryStatus.DELIVERED:
        values["delivered_at"] = now
    conn.execute(update(table).where(table.c.id == delivery_id).values(**values))


def release_interrupted(
    conn: Connection, *, before: int, now: int, max_attempts: int
) -> tuple[list[Planned], list[str]]:
    """Deliveries ``sending`` since before ``before``, whose attempt died with its process:
    failed once they have had ``max_attempts``, else due again ``now``. Those due again,
    and the channel type of each failed."""
    stuck = (table.c.status == str(DeliveryStatus.SENDING), table.c.updated_at < before)
    spent: list[tuple[str, str]] = []
    again: list[Planned] = []
    for row in conn.execute(select(*_PLANNED, table.c.attempts).where(*stuck)):
        if row.attempts >= max_attempts:
            spent.append((row.id, row.channel_type))
        else:
            again.append(Planned(row.id, row.channel, row.channel_type, row.event))
    for status, chosen in (
        (DeliveryStatus.FAILED, [i for i, _ in spent]),
        (DeliveryStatus.RETRYING, [delivery.id for delivery in again]),
    ):
        due = now if status is DeliveryStatus.RETRYING else None
        for start in range(0, len(chosen), IDS_PER_QUERY):
            conn.execute(
                update(table)
                .where(*stuck, table.c.id.in_(chosen[start : start + IDS_PER_QUERY]))
                .values(
                    status=str(status), last_error=INTERRUPTED, updated_at=now, next_attempt_at=due
                )
            )
    return again, [kind for _, kind in spent]


def take_overdue(conn: Connection, *, before: int, now: int, limit: int) -> list[Planned]:
    """Up to ``limit`` open deliveries due since before ``before`` (their message is lost),
    made due ``now`` so that later sweeps leave them to the message queued for them now."""
    overdue = (
        table.c.status.in_([str(s) for s in OPEN_STATUSES]),
        table.c.next_attempt_at < before,
    )
    found = _planned(
        conn.execute(
            select(*_PLANNED).where(*overdue).order_by(table.c.next_attempt_at).limit(limit)
        )
    )
    if found:
        ids = [delivery.id for delivery in found]
        conn.execute(update(table).where(*overdue, table.c.id.in_(ids)).values(next_attempt_at=now))
    return found


def recent(
    conn: Connection,
    *,
    status: DeliveryStatus | None = None,
    event: NotifyEvent | None = None,
    request_id: str | None = None,
    limit: int = 100,
) -> list[Delivery]:
    """The latest deliveries first, of one status, event and request if given."""
    stmt = select(table).order_by(table.c.updated_at.desc()).limit(limit)
    if status is not None:
        stmt = stmt.where(table.c.status == str(status))
    if event is not None:
        stmt = stmt.where(table.c.event == str(event))
    if request_id is not None:
        stmt = stmt.where(table.c.request_id == request_id)
    return [Delivery.from_row(row) for row in conn.execute(stmt)]


def count(conn: Connection, status: DeliveryStatus) -> int:
    return int(
        conn.execute(
            select(func.count()).select_from(table).where(table.c.status == str(status))
        ).scalar_one()
    )
