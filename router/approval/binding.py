"""What an approval covers, sealed so that nobody can point it elsewhere in the database.

A request is bound when it is issued to one call, its tool, the SHA-256 of its canonical
arguments, its requester, the policy that gated it (approver roles, approvals required,
the rules that decided, as text) and its expiry; the API seals that binding with the
deployment's approval key. The approval worker seals each decision it records and, when
the last approval comes, the release. A worker runs a gated call only if the release
verifies and the call is still exactly what was bound; the reconciler and the reaper never
publish one that is not.
Whoever can write to the database but lacks the key can change rows, not forge tags.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.engine import Connection

from ..canonical import canonical_json, sha256_hex
from ..db.schema import audit_log
from ..status import AuditEvent
from ..trust.keyring import KeyRing, Purpose
from .model import ApprovalRequest

if TYPE_CHECKING:
    from ..db.rows import CallRow


def binding_text(
    *,
    request_id: str,
    call_id: str,
    tool: str,
    args_sha256: str,
    requested_by: str,
    approvers: tuple[str, ...] | list[str],
    approvals_required: int,
    expires_at: int,
    rule: str | None = None,
    original_args_sha256: str | None = None,
    edited_by: str | None = None,
) -> str:
    bound = {
        "request_id": request_id,
        "call_id": call_id,
        "tool": tool,
        "args_sha256": args_sha256,
        "requested_by": requested_by,
        "approvers": sorted(approvers),
        "approvals_required": approvals_required,
        "expires_at": expires_at,
    }
    if rule is not None:
        # Absent, not null, when there is none: requests sealed before rules still verify.
        bound["rule"] = rule
    if edited_by is not None:
        # Sealed again by the approval worker when an approver edits the arguments.
        bound["original_args_sha256"] = original_args_sha256
        bound["edited_by"] = edited_by
    return canonical_json(bound)


def request_binding(request: ApprovalRequest) -> str:
    return binding_text(
        request_id=request.id,
        call_id=request.call_id,
        tool=request.tool,
        args_sha256=request.args_sha256,
        requested_by=request.requested_by,
        approvers=request.approvers,
        approvals_required=request.approvals_required,
        expires_at=request.expires_at,
        rule=request.rule,
        original_args_sha256=request.original_args_sha256,
        edited_by=request.edited_by,
    )


def binding_verifies(request: ApprovalRequest, keyring: KeyRing) -> bool:
    return keyring.verify(Purpose.APPROVAL, request_binding(request), request.binding_mac)


def decision_text(
    request_id: str, approver: str, decision: str, at: int, args_sha256: str | None = None
) -> str:
    """A decision covers the arguments it was made on, so none outlives an edit of them."""
    decided = {"request_id": request_id, "approver": approver, "decision": decision, "at": at}
    if args_sha256 is not None:
        decided["args_sha256"] = args_sha256
    return canonical_json(decided)


def release_text(request: ApprovalRequest, decided_at: int) -> str:
    """A release covers the sealed binding and when it was decided."""
    return canonical_json(
        {"binding_mac": request.binding_mac, "released": True, "decided_at": decided_at}
    )


TAMPERED = "TamperedArguments"


@dataclass(frozen=True, slots=True)
class RunRefusal:
    """Why a claimed call must not run: its outcome, recorded as a failure."""

    error_type: str
    error: str


def run_refusal(
    keyring: KeyRing, row: CallRow, request: ApprovalRequest | None, *, gated: bool
) -> RunRefusal | None:
    """None when ``row`` may run: its arguments are those accepted, and, when its tool is
    gated or it has a request, a sealed release binds exactly this call."""
    if sha256_hex(row.args) != row.args_sha256:
        return RunRefusal(TAMPERED, "arguments changed after they were accepted")
    if request is None:
        if gated or row.request_id is not None:
            return RunRefusal(
                "ApprovalMissing", f"refused: {row.tool} is gated and this call has no approval"
            )
        return None
    bound = (
        request.id == row.request_id
        and request.call_id == row.id
        and request.tool == row.tool
        and request.args_sha256 == row.args_sha256
        and request.requested_by == row.requested_by
    )
    released = (
        request.status == "approved"
        and request.decided_at is not None
        and binding_verifies(request, keyring)
        and keyring.verify(
            Purpose.APPROVAL, release_text(request, request.decided_at), request.release_mac
        )
    )
    if not (bound and released):
        return RunRefusal(
            "ApprovalMissing",
            f"refused: no approval of {request.id} verifies for exactly this call",
        )
    return None


def spent_on_a_run(conn: Connection, call_id: str) -> bool:
    """Whether the audit log records a run of ``call_id`` that ended (``ok``, or an
    ``error`` not handed to a fallback): a release is spent on one such run, so a call
    whose row was set back to ``queued`` in the database does not run on it again."""
    ended = conn.execute(
        select(audit_log.c.event, audit_log.c.detail).where(
            audit_log.c.call_id == call_id,
            audit_log.c.event.in_((AuditEvent.OK, AuditEvent.ERROR)),
        )
    ).all()
    return any(row.event == AuditEvent.OK or not _handed_on(row.detail) for row in ended)


def _handed_on(detail: str | None) -> bool:
    """Whether an ``error`` row records a failure handed to a fallback (``fell_back``)."""
    try:
        fields = json.loads(detail or "{}")
    except ValueError:
        return False
    return isinstance(fields, dict) and fields.get("fallback") is not None


def may_publish(row: CallRow, *, gated: bool) -> bool:
    """Whether recovery may publish ``row`` without reading its request: an ungated call
    with no request. Anything else is checked with ``run_refusal`` first."""
    return not gated and row.request_id is None
