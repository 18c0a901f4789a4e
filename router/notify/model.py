"""Notification events, delivery statuses and outcomes, and one delivery as stored."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class NotifyEvent(StrEnum):
    """What happened to a request; each but ``pending``, ``escalated`` and ``edited`` is the
    status it was closed with."""

    PENDING = "pending"
    # Still pending after its tool's ``escalate_after_s``: told to the ``escalate_to`` group.
    ESCALATED = "escalated"
    # Its arguments edited by an approver, approvals given before reset: decide anew.
    EDITED = "edited"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


# Events of a request still waiting for a decision: past once it is decided or expired.
WAITING = frozenset({NotifyEvent.PENDING, NotifyEvent.ESCALATED, NotifyEvent.EDITED})


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    RETRYING = "retrying"
    DELIVERED = "delivered"
    FAILED = "failed"
    # Not sent: the request had moved on from the event when its attempt came.
    SKIPPED = "skipped"


# Statuses from which an attempt may start.
OPEN_STATUSES = frozenset({DeliveryStatus.PENDING, DeliveryStatus.RETRYING})


@dataclass(frozen=True, slots=True)
class Delivery:
    """One announcement of a request's event on one channel."""

    id: str
    request_id: str
    call_id: str
    tool: str
    event: NotifyEvent
    channel: str
    channel_type: str
    status: DeliveryStatus
    attempts: int
    last_error: str | None
    created_at: int
    updated_at: int
    next_attempt_at: int | None
    delivered_at: int | None
    # 0, or which edit an ``edited`` delivery tells (the request's count of edits then).
    occurrence: int = 0

    @classmethod
    def from_row(cls, row: Any) -> Delivery:
        data = dict(row._mapping)
        data["event"] = NotifyEvent(data["event"])
        data["status"] = DeliveryStatus(data["status"])
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "request_id": self.request_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "event": str(self.event),
            "channel": self.channel,
            "channel_type": self.channel_type,
            "status": str(self.status),
            "attempts": self.attempts,
            "last_error": self.last_error,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "next_attempt_at": self.next_attempt_at,
            "delivered_at": self.delivered_at,
            "occurrence": self.occurrence,
        }
