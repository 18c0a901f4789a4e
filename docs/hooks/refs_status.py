"""The statuses, audit events and roles reference, from the enums in ``router.status``.

Each member's meaning is written here; a member without one, or a meaning for a member
that is gone, fails the build.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from mkdocs.exceptions import PluginError
from refs_markdown import table

from router.results import REJECTED
from router.status import TERMINAL_STATES, AuditEvent, CallStatus, Role

CALL_STATUS = {
    "queued": "Accepted and published to its risk queue; waiting for a worker.",
    "running": "A worker claimed it and its handler runs (or is about to).",
    "succeeded": "The handler returned a JSON value: the answer's `value`.",
    "failed": (
        "The handler raised, timed out or returned something that is not JSON, for good; "
        "`error` and `error_type` say what happened."
    ),
    "pending": "The tool is gated: the call waits for approvers (`request_id` names the request).",
    "denied": "An approver denied the request; the call never ran.",
    "expired": "The request expired before enough approvals; the call never ran.",
    "cancelled": "Its requester cancelled it while it was queued or pending; it never ran.",
    "interrupted": (
        "The worker running it was lost and the tool is not idempotent: whether its effect "
        "happened is unknown, and it is never run again by itself."
    ),
}
# Not a stored status: the answer to a call that was never accepted.
REJECTED_MEANING = (
    "Never accepted: an unknown tool or invalid arguments. Nothing is stored but the audit "
    "row, and there is no `call_id`."
)

AUDIT_EVENT = {
    "queued": "A call was accepted and stored `queued`.",
    "pending": "A call of a gated tool was stored `pending`, with its approval request.",
    "approved": "One approver approved; the detail counts approvals and says if it released.",
    "denied": (
        "An approver denied the request, or a tool's `deny_if` refused a submission (actor "
        "the submitting key, no call stored, the rule in `detail`)."
    ),
    "expired": "The expiry sweep expired a request and its call.",
    "ok": "A run succeeded (the detail has the attempt, and `cached: true` for a cached answer).",
    "error": (
        "A run failed, a call could not be published, or a tool failed for good and the call "
        "moved on to a fallback (the detail names it)."
    ),
    "retry": (
        "A retryable failure was scheduled again after a delay, or a lost run of an "
        "idempotent tool went back to its queue."
    ),
    "interrupted": "A run of a non-idempotent tool was lost with its worker.",
    "cancelled": "The requester cancelled a queued or pending call.",
    "unknown": (
        "A submission named no registered tool, or a call by capability found none that "
        "takes its arguments (tool `capability:<name>`); no call was stored."
    ),
    "invalid": "A submission's arguments did not satisfy the tool's schema; no call was stored.",
}

ROLE = {
    "agent": "Submits calls and batches, reads its own, routes; the only role MCP lists tools to.",
    "approver": (
        "Decides the requests of tools whose `approvers` include it (the default). Custom "
        "approver roles, such as `finance`, work the same way."
    ),
    "operator": "Reads every call, batch and request, and the audit log; decides nothing.",
    "admin": "Reads everything an operator reads.",
}


def _checked(enum: type[Enum], meanings: Mapping[str, str]) -> dict[str, str]:
    values = [str(member.value) for member in enum]
    missing, stale = sorted(set(values) - set(meanings)), sorted(set(meanings) - set(values))
    if missing or stale:
        raise PluginError(
            f"docs/hooks/refs_status.py must describe exactly {enum.__qualname__}'s members: "
            f"undescribed {missing}, no longer members {stale}"
        )
    return {value: meanings[value] for value in values}


def statuses_reference() -> str:
    statuses = _checked(CallStatus, CALL_STATUS)
    rows = [
        (f"`{value}`", "yes" if CallStatus(value) in TERMINAL_STATES else "no", meaning)
        for value, meaning in statuses.items()
    ]
    rows.append((f"`{REJECTED}`", "yes", REJECTED_MEANING))
    return table(("status", "final", "meaning"), rows)


def audit_events_reference() -> str:
    events = _checked(AuditEvent, AUDIT_EVENT)
    return table(("event", "written when"), [(f"`{v}`", m) for v, m in events.items()])


def roles_reference() -> str:
    roles = _checked(Role, ROLE)
    return table(("role", "may"), [(f"`{v}`", m) for v, m in roles.items()])
