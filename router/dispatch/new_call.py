"""The rows that accept one checked call: the call, its request if gated (bound and sealed
now), its audit entry, and, for an ungated call, the message to publish after commit."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..approval import requests as pending
from ..audit import entries
from ..audit.log import AuditEntry
from ..ids import new_call_id, new_request_id
from ..messaging.run_message import Precedence, RunMessage, message_for
from ..results import CallResult
from ..status import CallStatus
from ..trust.keyring import KeyRing
from .checks import Checked


@dataclass(frozen=True, slots=True)
class NewCall:
    """The rows and the message that accept one call."""

    row: dict[str, Any]
    request: dict[str, Any] | None
    audit: AuditEntry
    message: RunMessage | None

    @property
    def request_approvers(self) -> tuple[str, ...]:
        """The approver roles bound into the request (none for an ungated call)."""
        return tuple(json.loads(self.request["approvers"])) if self.request else ()

    @property
    def result(self) -> CallResult:
        """The answer to the submitter; built on demand (a batch never asks, per call)."""
        row = self.row
        return CallResult(
            status=row["status"], tool=row["tool"], call_id=row["id"], request_id=row["request_id"]
        )


def new_call(
    requested_by: str,
    checked: Checked,
    *,
    now: int,
    keyring: KeyRing,
    batch_id: str | None = None,
    batch_index: int | None = None,
) -> NewCall:
    """The rows that accept one checked call: the call, its request if gated, its audit
    entry, and (ungated) the message to publish after commit."""
    tool = checked.tool
    call_id = new_call_id()
    gate = checked.ruling.gate
    gated = gate is not None
    status = CallStatus.PENDING if gated else CallStatus.QUEUED
    request_id = new_request_id() if gated else None
    row: dict[str, Any] = {
        "id": call_id,
        "tool": tool.name,
        "risk": tool.spec.risk,
        "args": checked.canonical,
        "args_sha256": checked.digest,
        "status": status,
        "requested_by": requested_by,
        "idempotency_key": checked.idempotency_key,
        "attempt": 0,
        "lease_until": None,
        "created_at": now,
        "updated_at": now,
        "published_at": None if gated else now,
        "started_at": None,
        "finished_at": None,
        "value": None,
        "error": None,
        "error_type": None,
        "request_id": request_id,
        "batch_id": batch_id,
        "batch_index": batch_index,
    }
    request = None
    if gate is not None and request_id is not None:
        # The request is bound now, to this call, these arguments, this requester.
        request = pending.issue_row(
            request_id=request_id,
            call_id=call_id,
            tool=tool.name,
            args_sha256=checked.digest,
            requested_by=requested_by,
            approvers=gate.approvers,
            approvals_required=gate.approvals_required,
            rule=gate.rule_text,
            now=now,
            timeout_ms=int(gate.timeout_s * 1000),
            keyring=keyring,
        )
    # Only a tool with conditions has rules worth auditing: the others' is their config.
    rule = "; ".join(r.why for r in checked.ruling.rules) if tool.rules is not None else None
    entry = entries.accepted(
        actor=requested_by,
        tool=tool.name,
        call_id=call_id,
        request_id=request_id,
        gated=gated,
        rule=rule,
    )
    return NewCall(
        row=row,
        request=request,
        audit=entry,
        message=None if gated else message_for(tool, call_id, Precedence.of(batch_id)),
    )
