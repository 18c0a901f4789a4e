"""Escalation: a request still undecided after its tool's ``escalate_after_s`` is told, once,
to the tool's ``escalate_to`` group, as the ``escalated`` event on that group's channels.

The record of an escalation is its delivery rows (event ``escalated``, one per channel,
unique per request, event and channel): the sweep picks requests with none, and the
conditional insert of ``deliveries.plan`` lets only one of two overlapping sweeps plan
them. The config makes sure every group has channels, so every escalation leaves rows.
Escalation only tells; who may decide a request does not change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import and_, exists, or_, select
from sqlalchemy.engine import Connection

from ..approval.model import RequestStatus
from ..db.schema import approval_requests as requests
from ..db.schema import notification_deliveries as deliveries
from .model import NotifyEvent


def due(conn: Connection, after_ms: Mapping[str, int], *, now: int, limit: int) -> list[str]:
    """Pending, unexpired requests older than their tool's threshold (``after_ms`` by tool)
    and not escalated yet, oldest first."""
    if not after_ms:
        return []
    old_enough = or_(
        *(
            and_(requests.c.tool == tool, requests.c.created_at <= now - ms)
            for tool, ms in after_ms.items()
        )
    )
    escalated = exists().where(
        deliveries.c.request_id == requests.c.id,
        deliveries.c.event == str(NotifyEvent.ESCALATED),
    )
    rows = conn.execute(
        select(requests.c.id)
        .where(
            requests.c.status == RequestStatus.PENDING,
            requests.c.expires_at > now,
            old_enough,
            ~escalated,
        )
        .order_by(requests.c.created_at)
        .limit(limit)
    )
    return [row.id for row in rows]


def recorded(conn: Connection, request_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """When each of these requests was escalated and on which channels, by request id."""
    if not request_ids:
        return {}
    rows = conn.execute(
        select(deliveries.c.request_id, deliveries.c.channel, deliveries.c.created_at).where(
            deliveries.c.request_id.in_(list(request_ids)),
            deliveries.c.event == str(NotifyEvent.ESCALATED),
        )
    )
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = found.setdefault(row.request_id, {"at": row.created_at, "channels": []})
        entry["at"] = min(entry["at"], row.created_at)
        entry["channels"].append(row.channel)
    return found
