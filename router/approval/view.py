"""What approvers and operators may see of the pending table, and the pre-checks of a decision.

The approval worker re-checks everything in its own transaction; these checks only let
the API refuse obvious mistakes without sending a message.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from ..auth.principal import Principal
from ..clock import Clock, wall_clock_ms
from ..db.store import Store
from ..errors import BadRequest, Conflict, Forbidden, NotFound
from ..names import echo_name
from ..trust.keyring import KeyRing
from . import requests as pending
from .model import Decision, approves_as
from .requests import ApprovalRequest, RequestStatus

if TYPE_CHECKING:
    from ..tools.notify_config import EscalateTo

REQUEST_ID_RE = re.compile(r"^req-[0-9a-f]{32}$")
# Hosts' clocks differ a little: a decision recorded up to this long before it was sent, by
# the approval worker's clock, is still taken to be the one sent.
CLOCK_SKEW_MS = 1000

# When and on which channels each of some requests was escalated, by request id: the
# notifications' record (``router.notify.escalation.recorded``), handed in from above.
EscalationsOf = Callable[[Connection, Sequence[str]], dict[str, dict[str, Any]]]


class ApprovalsView:
    def __init__(
        self,
        store: Store,
        keyring: KeyRing,
        *,
        escalations_of: EscalationsOf,
        clock: Clock = wall_clock_ms,
        escalate_to: Mapping[str, EscalateTo] | None = None,
    ) -> None:
        self.store, self.keyring, self.clock = store, keyring, clock
        self.escalations_of = escalations_of
        # Each tool's escalation group, to say whom an escalated request was told to.
        self.escalate_to = escalate_to or {}

    def list_requests(
        self, who: Principal, status: str = "pending", limit: int = 200
    ) -> list[dict[str, Any]]:
        """Requests this key may read: those it may decide (operators: all), with their
        call's arguments."""
        if status not in RequestStatus.__members__.values():
            raise BadRequest(f"unknown status: {echo_name(status)}")
        wanted = RequestStatus(status)
        now = self.clock()
        open_only = wanted == RequestStatus.PENDING
        with self.store.reading() as conn:
            found = pending.in_status(
                conn,
                wanted,
                now=now if open_only else None,
                # An N-of-M request this key already approved is no longer its to decide.
                not_approved_by=who.name if open_only and not who.is_operator else None,
                roles=None if who.is_operator else who.roles,
            )
            mine = (r for r in found if who.is_operator or r.may_decide(who.name, who.roles))
            visible = list(itertools.islice(mine, limit))
            decided = pending.decisions_of(conn, [r.id for r in visible])
            if open_only:
                _mark_uncounted(conn, visible, decided, self.keyring)
            args = pending.args_of(conn, [r.call_id for r in visible])
            escalated = self.escalations_of(conn, [r.id for r in visible])
        return [
            self._escalation(
                pending.to_public(r, args=args.get(r.call_id), decided=decided[r.id], now=now),
                r,
                escalated,
            )
            for r in visible
        ]

    def history(self, who: Principal, limit: int = 20) -> list[dict[str, Any]]:
        """Recently decided requests of the tools this key approves, newest first."""
        with self.store.reading() as conn:
            mine = (
                r
                for r in pending.in_status(conn, None, roles=None if who.is_operator else who.roles)
                if who.is_operator or approves_as(who.roles, r.approvers)
            )
            rows = list(itertools.islice(mine, limit))
            decided = pending.decisions_of(conn, [r.id for r in rows])
        return [pending.to_public(r, decided=decided[r.id]) for r in rows]

    def get(self, who: Principal, request_id: str) -> dict[str, Any]:
        request = self._load(request_id)
        if not (
            who.is_operator
            or who.name == request.requested_by
            or approves_as(who.roles, request.approvers)
        ):
            raise NotFound(f"unknown request: {echo_name(request_id)}")
        with self.store.reading() as conn:
            args = pending.args_of(conn, [request.call_id]).get(request.call_id)
            decided = pending.decisions(conn, request_id)
            if request.status == RequestStatus.PENDING:
                _mark_uncounted(conn, [request], {request_id: decided}, self.keyring)
            escalated = self.escalations_of(conn, [request_id])
        body = pending.to_public(request, args=args, decided=decided, now=self.clock())
        return self._escalation(body, request, escalated)

    def _escalation(
        self, body: dict[str, Any], request: ApprovalRequest, found: dict[str, dict[str, Any]]
    ) -> dict[str, Any]:
        """``body`` with the request's ``escalation``: when, to whom (the tool's
        ``escalate_to`` as configured now) and on which channels; None if not escalated."""
        record = found.get(request.id)
        if record is None:
            return {**body, "escalation": None}
        group = self.escalate_to.get(request.tool)
        to = {
            "roles": list(group.roles) if group else [],
            "keys": list(group.keys) if group else [],
        }
        shown = {"at": record["at"], "to": to, "channels": sorted(record["channels"])}
        return {**body, "escalation": shown}

    def precheck(self, who: Principal, request_id: str) -> ApprovalRequest:
        """Refuse what the approval worker would refuse anyway, without sending a message."""
        request = self._load(request_id)
        if request.status != RequestStatus.PENDING and request.status != RequestStatus.EXPIRED:
            raise NotFound(f"unknown request: {request_id}")
        if request.status == RequestStatus.EXPIRED or request.expires_at <= self.clock():
            raise Conflict(f"expired request: {request_id}")
        if who.name == request.requested_by:
            raise Forbidden("requester cannot approve own request")
        if not request.may_decide(who.name, who.roles):
            raise Forbidden(
                f"not an approver of {request.tool}: needs one of roles "
                f"{', '.join(request.approvers)}"
            )
        return request

    def applied(
        self, request_id: str, actor: str, decision: str, sent_at: int
    ) -> dict[str, Any] | None:
        """The approval worker's answer to ``actor``'s ``decision``, sent at ``sent_at``, as
        the database holds it, if the worker applied it; None if it did not. For an answer
        lost on its way back through Redis, which is not trusted: the approver is then told
        what happened, never that an applied decision failed."""
        since = sent_at - CLOCK_SKEW_MS
        if decision not in Decision.__members__.values():
            return None
        choice = Decision(decision)
        with self.store.reading() as conn:
            request = pending.get(conn, request_id)
            if request is None:
                return None
            recorded = pending.decisions(conn, request_id)
        answer: dict[str, Any] = {"ok": True, "request_id": request.id, "call_id": request.call_id}
        if choice is Decision.CANCEL:
            cancelled = request.status == RequestStatus.CANCELLED
            if cancelled and actor == request.requested_by and (request.decided_at or 0) >= since:
                return {**answer, "status": "cancelled"}
            return None
        if not any(
            d["approver"] == actor and d["decision"] == choice and d["at"] >= since
            for d in recorded
        ):
            return None
        if choice is Decision.DENY:
            return {**answer, "status": "denied"}
        approvers = {d["approver"] for d in recorded if d["decision"] == Decision.APPROVE}
        edited = {"args_sha256": request.args_sha256} if request.edited_by == actor else {}
        return {
            **answer,
            "status": "approved",
            "approvals": len(approvers),
            "approvals_required": request.approvals_required,
            "released": request.status == RequestStatus.APPROVED,
            **edited,
        }

    def _load(self, request_id: str) -> ApprovalRequest:
        if not REQUEST_ID_RE.fullmatch(request_id):
            raise NotFound(f"unknown request: {echo_name(request_id)}")
        with self.store.reading() as conn:
            request = pending.get(conn, request_id)
        if request is None:
            raise NotFound(f"unknown request: {request_id}")
        return request


def _mark_uncounted(
    conn: Any,
    requests: Sequence[ApprovalRequest],
    decided: Mapping[str, list[dict[str, Any]]],
    keyring: KeyRing,
) -> None:
    """Mark ``"counts": false`` on the approvals of pending ``requests`` that the approval
    worker would not count now: their key was revoked, or lost its approver role, since."""
    for request in requests:
        for decision in decided[request.id]:
            if not pending.counts_now(conn, request, decision["approver"], keyring):
                decision["counts"] = False
