"""Call statuses and audit events, each a ``str`` Enum with its sets computed once."""

from __future__ import annotations

from enum import StrEnum


class CallStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PENDING = "pending"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


ACTIVE_STATES: frozenset[CallStatus] = frozenset(
    {CallStatus.QUEUED, CallStatus.RUNNING, CallStatus.PENDING}
)
TERMINAL_STATES: frozenset[CallStatus] = frozenset(CallStatus) - ACTIVE_STATES


class AuditEvent(StrEnum):
    QUEUED = "queued"
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    OK = "ok"
    ERROR = "error"
    RETRY = "retry"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"
    INVALID = "invalid"


# Roles a key may hold; tools may name further custom approver roles (e.g. ``finance``).
class Role(StrEnum):
    AGENT = "agent"
    APPROVER = "approver"
    OPERATOR = "operator"
    ADMIN = "admin"


# Every other role, the custom ones (``finance``) too, is an approver role: these decide
# nothing, whatever a tool's ``approvers`` say.
NON_APPROVER_ROLES = frozenset({Role.AGENT, Role.OPERATOR, Role.ADMIN})
