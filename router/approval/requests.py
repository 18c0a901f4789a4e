"""The pending table: approval requests bound to one call each, and their decisions.

Reads and the issue of a request live here (the dispatcher issues one per gated call);
only the approval worker (``approvals.gate``) moves a request out of ``pending``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import and_, delete, exists, false, func, or_, select, tuple_, update
from sqlalchemy.engine import Connection

from ..auth.keys import principal_named
from ..canonical import load_for_display
from ..db.direct import insert_rows
from ..db.schema import approval_decisions, approval_requests, calls
from ..trust.keyring import KeyRing, Purpose
from .binding import binding_text, decision_text, request_binding
from .model import ApprovalRequest, Decision, RequestStatus


def issue_row(
    *,
    request_id: str,
    call_id: str,
    tool: str,
    args_sha256: str,
    requested_by: str,
    approvers: tuple[str, ...],
    approvals_required: int,
    now: int,
    timeout_ms: int,
    keyring: KeyRing,
    rule: str | None = None,
) -> dict[str, Any]:
    """The row that issues a request, its binding sealed (``router.approval.binding``)."""
    binding = binding_text(
        request_id=request_id,
        call_id=call_id,
        tool=tool,
        args_sha256=args_sha256,
        requested_by=requested_by,
        approvers=approvers,
        approvals_required=approvals_required,
        expires_at=now + timeout_ms,
        rule=rule,
    )
    return {
        "id": request_id,
        "call_id": call_id,
        "tool": tool,
        "args_sha256": args_sha256,
        "requested_by": requested_by,
        "approvers": json.dumps(list(approvers)),
        "approvals_required": approvals_required,
        "status": RequestStatus.PENDING,
        "created_at": now,
        "expires_at": now + timeout_ms,
        "decided_at": None,
        "binding_mac": keyring.sign(Purpose.APPROVAL, binding),
        "release_mac": None,
        "rule": rule,
    }


def insert(conn: Connection, rows: list[dict[str, Any]]) -> None:
    if rows:
        insert_rows(conn, approval_requests, rows)


def get(conn: Connection, request_id: str, *, for_update: bool = False) -> ApprovalRequest | None:
    stmt = select(approval_requests).where(approval_requests.c.id == request_id)
    if for_update:
        # Serializes decisions on one request (PostgreSQL); SQLite's write lock already does.
        stmt = stmt.with_for_update()
    row = conn.execute(stmt).first()
    return ApprovalRequest.from_row(row) if row else None


# Requests read per query while a reader looks for the ones it may see.
PAGE = 500


def in_status(
    conn: Connection,
    status: RequestStatus | None,
    *,
    now: int | None = None,
    not_approved_by: str | None = None,
    roles: Collection[str] | None = None,
) -> Iterator[ApprovalRequest]:
    """Every request in ``status`` (``None``: every decided one), read a page at a time
    for as long as the caller takes them: pending ones oldest first, as an inbox lists
    them, decided ones most recently decided first. With ``now``, pending ones still
    open then (the expiry sweep may not have reached the others yet); with
    ``not_approved_by``, none that key has approved already (an N-of-M request); with
    ``roles``, only those that name one of them among their approvers.

    A reader that keeps only what one key may decide stops once it has enough, however
    many requests of other approvers come first.
    """
    table = approval_requests
    pending = status == RequestStatus.PENDING
    if status is None:
        matches = table.c.status != RequestStatus.PENDING
    else:
        matches = table.c.status == status
    if pending and now is not None:
        matches = and_(matches, table.c.expires_at > now)
    if not_approved_by is not None:
        decided = approval_decisions.c
        matches = and_(
            matches,
            ~exists().where(
                and_(decided.request_id == table.c.id, decided.approver == not_approved_by)
            ),
        )
    if roles is not None:
        # ``approvers`` is a JSON list: a role is named there as its JSON string, quoted.
        named = [table.c.approvers.contains(json.dumps(role), autoescape=True) for role in roles]
        matches = and_(matches, or_(false(), *named))
    # Every move out of pending sets ``decided_at`` (``spend``), so the key has no nulls.
    keys = (table.c.created_at, table.c.id) if pending else (table.c.decided_at, table.c.id)
    order = list(keys) if pending else [key.desc() for key in keys]
    after: tuple[Any, Any] | None = None
    while True:
        query = select(table).where(matches)
        if after is not None:
            last = tuple_(*after)
            query = query.where(tuple_(*keys) > last if pending else tuple_(*keys) < last)
        rows = conn.execute(query.order_by(*order).limit(PAGE)).all()
        for row in rows:
            yield ApprovalRequest.from_row(row)
        if len(rows) < PAGE:
            return
        end = rows[-1]
        after = (end.created_at if pending else end.decided_at, end.id)


def due(conn: Connection, *, now: int, limit: int) -> list[str]:
    rows = conn.execute(
        select(approval_requests.c.id)
        .where(
            and_(
                approval_requests.c.status == RequestStatus.PENDING,
                approval_requests.c.expires_at <= now,
            )
        )
        .limit(limit)
    )
    return [row.id for row in rows]


def count_pending(conn: Connection, *, now: int) -> int:
    """Requests still waiting for a decision at ``now``: pending and not yet expired."""
    table = approval_requests
    return int(
        conn.execute(
            select(func.count()).where(
                and_(table.c.status == RequestStatus.PENDING, table.c.expires_at > now)
            )
        ).scalar_one()
    )


def decisions_of(conn: Connection, request_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The decisions recorded on each of ``request_ids``, oldest first, in one query (as
    ``decisions`` reads them without a keyring)."""
    found = _recorded(conn, request_ids)
    for listed in found.values():
        for d in listed:
            d.pop("mac")
    return found


def decisions(
    conn: Connection,
    request_id: str,
    *,
    keyring: KeyRing | None = None,
    request: ApprovalRequest | None = None,
) -> list[dict[str, Any]]:
    """The decisions recorded on a request, oldest first. With ``keyring`` and ``request``,
    only those the approval worker sealed over its current arguments: a row written any
    other way, or on arguments since edited, is not a decision."""
    found = _recorded(conn, [request_id])[request_id]
    if keyring is not None and request is not None:
        # Seals made before they covered the arguments hold only while none were edited.
        hashes = [request.args_sha256] + ([None] if request.edited_by is None else [])
        found = [
            d
            for d in found
            if any(
                keyring.verify(
                    Purpose.APPROVAL,
                    decision_text(request_id, d["approver"], d["decision"], d["at"], digest),
                    d["mac"],
                )
                for digest in hashes
            )
        ]
    for d in found:
        d.pop("mac")
    return found


def _recorded(conn: Connection, request_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The decision rows of each of ``request_ids``, oldest first, their seals included."""
    found: dict[str, list[dict[str, Any]]] = {request_id: [] for request_id in request_ids}
    if not found:
        return found
    rows = conn.execute(
        select(approval_decisions)
        .where(approval_decisions.c.request_id.in_(list(found)))
        .order_by(approval_decisions.c.id)
    )
    for r in rows:
        found[r.request_id].append(
            {
                "approver": r.approver,
                "decision": r.decision,
                "reason": r.reason,
                "at": r.at,
                "mac": r.mac,
            }
        )
    return found


def args_of(conn: Connection, call_ids: list[str]) -> dict[str, Any]:
    if not call_ids:
        return {}
    rows = conn.execute(select(calls.c.id, calls.c.args).where(calls.c.id.in_(call_ids)))
    return {row.id: load_for_display(row.args) for row in rows}


def spend(
    conn: Connection,
    request_id: str,
    status: RequestStatus,
    *,
    now: int,
    expiring: bool = False,
    release_mac: str | None = None,
) -> bool:
    """Move ``request_id`` out of pending, once: the conditional update that spends it.

    A decision needs the request unexpired; the expiry sweep needs it expired. An approval
    that releases the call stores the release's seal with it.
    """
    expiry = (
        (approval_requests.c.expires_at <= now)
        if expiring
        else (approval_requests.c.expires_at > now)
    )
    result = conn.execute(
        update(approval_requests)
        .where(
            and_(
                approval_requests.c.id == request_id,
                approval_requests.c.status == RequestStatus.PENDING,
                expiry,
            )
        )
        .values(status=status, decided_at=now, release_mac=release_mac)
    )
    return result.rowcount == 1


def record_decision(
    conn: Connection,
    request_id: str,
    approver: str,
    decision: Decision,
    reason: str | None,
    *,
    now: int,
    keyring: KeyRing,
    args_sha256: str,
) -> None:
    """Record a decision on the arguments hashed ``args_sha256``, sealed.
    ``IntegrityError`` when this approver already decided."""
    conn.execute(
        approval_decisions.insert(),
        [
            {
                "request_id": request_id,
                "approver": approver,
                "decision": decision,
                "reason": reason,
                "at": now,
                "mac": keyring.sign(
                    Purpose.APPROVAL,
                    decision_text(request_id, approver, decision, now, args_sha256),
                ),
            }
        ],
    )


def edit(
    conn: Connection,
    request: ApprovalRequest,
    *,
    args_sha256: str,
    editor: str,
    approvals_required: int,
    rule: str | None,
    keyring: KeyRing,
) -> tuple[ApprovalRequest, list[str]]:
    """Bind ``request`` to edited arguments, its binding sealed again, and forget the
    approvals given so far (they approved other arguments; the audit log keeps them).
    Returns the request as now bound and the approvers forgotten."""
    edited = replace(
        request,
        args_sha256=args_sha256,
        approvals_required=approvals_required,
        rule=rule,
        original_args_sha256=request.original_args_sha256 or request.args_sha256,
        edited_by=editor,
        edits=request.edits + 1,
    )
    edited = replace(edited, binding_mac=keyring.sign(Purpose.APPROVAL, request_binding(edited)))
    forgotten = [d["approver"] for d in decisions(conn, request.id)]
    conn.execute(delete(approval_decisions).where(approval_decisions.c.request_id == request.id))
    conn.execute(
        update(approval_requests)
        .where(approval_requests.c.id == request.id)
        .values(
            args_sha256=edited.args_sha256,
            approvals_required=edited.approvals_required,
            rule=edited.rule,
            original_args_sha256=edited.original_args_sha256,
            edited_by=editor,
            binding_mac=edited.binding_mac,
            # Under the request's row lock, as every edit is made.
            edits=edited.edits,
        )
    )
    return edited, forgotten


def counts_now(conn: Connection, request: ApprovalRequest, approver: str, keyring: KeyRing) -> bool:
    """Whether ``approver``'s approval of ``request`` counts now: its key is not revoked
    and may still decide it (its roles as they are now)."""
    who = principal_named(conn, approver, keyring)
    return who is not None and request.may_decide(approver, who.roles)


def to_public(
    request: ApprovalRequest,
    *,
    args: Any = None,
    decided: list[dict[str, Any]] | None = None,
    now: int | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "request_id": request.id,
        "call_id": request.call_id,
        "tool": request.tool,
        "args": args,
        "args_sha256": request.args_sha256,
        "requested_by": request.requested_by,
        "approvers": list(request.approvers),
        "approvals_required": request.approvals_required,
        "rule": request.rule,
        "status": request.status,
        "created_at": request.created_at,
        "expires_at": request.expires_at,
        "decided_at": request.decided_at,
    }
    if request.edited_by is not None:
        body["original_args_sha256"] = request.original_args_sha256
        body["edited_by"] = request.edited_by
    if decided is not None:
        body["decisions"] = decided
    if now is not None:
        body["age_ms"] = now - request.created_at
        body["expires_in_ms"] = max(0, request.expires_at - now)
    return body
