"""Every kind of audit row the product writes, built in one place.

Each function names the moment a row records (SPEC's table of events) and fixes what its
``detail`` holds, so the writers (dispatcher, approval gate, workers, recovery) cannot
drift apart in how they describe the same event.
"""

from __future__ import annotations

from typing import Any

from ..status import AuditEvent
from .log import AuditEntry


def accepted(
    *,
    actor: str,
    tool: str,
    call_id: str,
    request_id: str | None,
    gated: bool,
    rule: str | None = None,
) -> AuditEntry:
    """A call was stored: ``pending`` with its request if gated, else ``queued``; a tool
    with rules over its arguments names, as ``rule``, the ones that decided."""
    event = AuditEvent.PENDING if gated else AuditEvent.QUEUED
    detail = {"rule": rule} if rule else None
    return AuditEntry(
        event, actor, tool=tool, call_id=call_id, request_id=request_id, detail=detail
    )


def refused(
    *, actor: str, tool: str, event: AuditEvent, error: str, rule: str | None = None
) -> AuditEntry:
    """A call was not stored: ``unknown`` tool, ``invalid`` arguments, or ``denied`` by its
    tool's ``deny_if`` (with the ``rule``)."""
    detail = {"error": error, "rule": rule} if rule else {"error": error}
    return AuditEntry(event, actor, tool=tool, detail=detail)


def cancelled(*, actor: str, tool: str, call_id: str, request_id: str | None) -> AuditEntry:
    """The requester cancelled a queued call."""
    return AuditEntry(
        AuditEvent.CANCELLED, actor, tool=tool, call_id=call_id, request_id=request_id
    )


def unpublished(*, actor: str, tool: str, call_id: str, error: str) -> AuditEntry:
    """A stored call failed because its message could not reach the broker."""
    return AuditEntry(AuditEvent.ERROR, actor, tool=tool, call_id=call_id, detail={"error": error})


def decided(
    *,
    event: AuditEvent,
    actor: str,
    tool: str,
    call_id: str,
    request_id: str,
    reason: str | None = None,
    **counts: Any,
) -> AuditEntry:
    """An approver (or the expiry sweep, or the requester's cancel) decided a request;
    an approval carries how many approvals it has and whether it released the call."""
    detail = None if event == AuditEvent.EXPIRED else {"reason": reason, **counts}
    return AuditEntry(
        event, actor, tool=tool, call_id=call_id, request_id=request_id, detail=detail
    )


def finished(
    *,
    event: AuditEvent,
    actor: str,
    tool: str,
    call_id: str,
    request_id: str | None,
    attempt: int,
    cached: bool = False,
    failed: bool = False,
    error: str | None = None,
    error_type: str | None = None,
    ran_ms: int | None = None,
) -> AuditEntry:
    """A run ended: ``ok``, ``error`` or ``interrupted``, for the attempt that ran; its
    handler ran ``ran_ms``, when one ran (the tool's measured latency)."""
    detail: dict[str, Any] = {"attempt": attempt}
    if cached:
        detail["cached"] = True
    if ran_ms is not None:
        detail["ms"] = ran_ms
    if failed:
        detail.update(error=error, error_type=error_type)
    return AuditEntry(
        event, actor, tool=tool, call_id=call_id, request_id=request_id, detail=detail
    )


def retried(
    *,
    actor: str,
    tool: str,
    call_id: str,
    request_id: str | None,
    attempt: int,
    error: str | None,
    error_type: str | None,
    delay_s: float,
) -> AuditEntry:
    """An attempt failed retryably and the next is scheduled after ``delay_s``."""
    detail = {"attempt": attempt, "error": error, "error_type": error_type, "delay_s": delay_s}
    return AuditEntry(
        AuditEvent.RETRY, actor, tool=tool, call_id=call_id, request_id=request_id, detail=detail
    )


def requeued_lost(*, actor: str, tool: str, call_id: str, attempt: int) -> AuditEntry:
    """A run of an idempotent tool was lost with its worker and goes back to the queue."""
    detail = {"attempt": attempt, "reason": "worker lost"}
    return AuditEntry(AuditEvent.RETRY, actor, tool=tool, call_id=call_id, detail=detail)


def fell_back(
    *,
    actor: str,
    tool: str,
    call_id: str,
    attempt: int,
    error: str | None,
    error_type: str | None,
    fallback: str,
    ran_ms: int | None = None,
) -> AuditEntry:
    """A tool failed for good (its handler ran ``ran_ms``, when it ran) and the call moves
    on to ``fallback``."""
    detail: dict[str, Any] = {
        "attempt": attempt,
        "error": error,
        "error_type": error_type,
        "fallback": fallback,
    }
    if ran_ms is not None:
        detail["ms"] = ran_ms
    return AuditEntry(AuditEvent.ERROR, actor, tool=tool, call_id=call_id, detail=detail)
