"""The approval gate: the only code that moves a request out of ``pending``.

Each decision is one transaction: lock the request, check it, spend it with a
conditional update (``status = 'pending' AND expires_at > now``), write the decision and
the audit row, commit; only then publish the released call to its risk queue. A handler
that fails later cannot make the approval live again, and a replay finds nothing to spend.

Nothing about who decides is taken from the message: the deciding key is looked up in the
database (revoked keys, missing roles, the requester and repeat approvers are refused
there), the request's sealed binding must verify and still match its call, and only the
decisions this worker sealed count towards N-of-M (``router.approval.binding``).
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import text

from router import metrics
from router.approval import requests as pending
from router.approval.binding import binding_verifies, release_text
from router.approval.model import Decision, RequestStatus, changed_since_read
from router.audit import entries
from router.auth.keys import principal_named
from router.canonical import sha256_hex
from router.dispatch.checks import EditRefused
from router.messaging.completions import Notifier
from router.messaging.run_message import Precedence, message_for
from router.metrics import Tampered
from router.notify.announce import Announced
from router.notify.model import NotifyEvent
from router.runtime import Runtime
from router.status import AuditEvent, CallStatus
from router.trust.keyring import Purpose

from .answer import PAST_DEADLINE, Answer, PastDeadline, refusal
from .edit import Edit, apply_edit, edited_detail

log = logging.getLogger(__name__)

EXPIRY_ACTOR = "expiry"


class Gate:
    """Decides requests for the approval worker process."""

    def __init__(self, runtime: Runtime, notifier: Notifier) -> None:
        self.runtime, self.notifier = runtime, notifier
        self.store, self.clock = runtime.store, runtime.clock
        self.audit, self.keyring = runtime.audit, runtime.keyring

    def decide(
        self,
        request_id: str,
        actor: str,
        decision: str,
        reason: str | None = None,
        deadline_ms: int | None = None,
        args: Any = None,
        expected_args_sha256: str | None = None,
        expected_edits: int | None = None,
    ) -> Answer:
        """Apply one decision by the key named ``actor`` (from an authenticated message);
        an approval with ``args`` edits the arguments first (``approvals.edit``). With
        ``expected_args_sha256`` and ``expected_edits``, nothing is decided unless the
        arguments still have that hash and have been edited that many times."""
        if deadline_ms is not None and self.clock() > deadline_ms:
            # The API has already told the approver this failed; never apply it now.
            return refusal(503, PAST_DEADLINE)
        try:
            return self._decide(
                request_id,
                actor,
                decision,
                reason,
                deadline_ms,
                args,
                expected_args_sha256,
                expected_edits,
            )
        except PastDeadline:
            return refusal(503, PAST_DEADLINE)

    def _decide(
        self,
        request_id: str,
        actor: str,
        decision: str,
        reason: str | None,
        deadline_ms: int | None,
        args: Any,
        expected_args_sha256: str | None,
        expected_edits: int | None,
    ) -> Answer:
        try:
            choice = Decision(decision)
        except ValueError:
            return refusal(422, f"unknown decision: {decision[:32]}")
        if args is not None and choice is not Decision.APPROVE:
            return refusal(422, "only an approval may edit the arguments")
        released_tool = None
        edit: Edit | None = None
        with self.store.transaction() as conn:
            if deadline_ms is not None and conn.dialect.name == "postgresql":
                # Do not queue behind another decision's row lock past the deadline.
                wait_ms = max(1, deadline_ms - self.clock())
                conn.execute(text(f"SET LOCAL lock_timeout = {int(wait_ms)}"))
            request = pending.get(conn, request_id, for_update=True)
            # Read under the lock: the decision happens now, not when it began to wait (an
            # approval waiting past the expiry would be recorded as made before it).
            now = self.clock()
            # Checked again under the lock: waiting for it may have taken us past the
            # deadline, after which the API has told the approver this failed.
            if deadline_ms is not None and now > deadline_ms:
                return refusal(503, PAST_DEADLINE)
            if request is None or request.status in (
                RequestStatus.APPROVED,
                RequestStatus.DENIED,
                RequestStatus.CANCELLED,
            ):
                # Never issued, or already spent: a replay is not an attempt; no audit row.
                return refusal(404, f"unknown request: {request_id}")
            if request.status == RequestStatus.EXPIRED or request.expires_at <= now:
                return refusal(409, f"expired request: {request_id}")
            who = principal_named(conn, actor, self.keyring)
            if who is None:
                return refusal(403, f"key {actor} is unknown or revoked")
            problem = self._unbound(conn, request)
            if problem is not None:
                return refusal(409, problem)
            if (
                expected_args_sha256 is not None and expected_args_sha256 != request.args_sha256
            ) or (expected_edits is not None and expected_edits != request.edits):
                # Under the row lock: an edit by another approver cannot slip in between, nor
                # can an approval replayed after an edit and an edit back to the same hash.
                return refusal(409, changed_since_read(request.args_sha256))
            roles = who.roles
            ids = (request.id, request.call_id)
            if choice is Decision.CANCEL:
                if actor != request.requested_by:
                    return refusal(404, f"unknown request: {request_id}")
                self._close(
                    conn,
                    request,
                    RequestStatus.CANCELLED,
                    CallStatus.CANCELLED,
                    AuditEvent.CANCELLED,
                    actor,
                    reason,
                    now,
                )
                answer = Answer(ok=True, status="cancelled", request_id=ids[0], call_id=ids[1])
            elif actor == request.requested_by:
                return refusal(403, "requester cannot approve own request")
            elif not request.may_decide(actor, roles):
                return refusal(
                    403,
                    f"not an approver of {request.tool}: needs one of roles "
                    f"{', '.join(request.approvers)}",
                )
            elif args is None and any(
                d["approver"] == actor for d in pending.decisions(conn, request_id)
            ):
                return refusal(409, f"{actor} already decided {request_id}")
            elif choice is Decision.DENY:
                pending.record_decision(
                    conn,
                    request_id,
                    actor,
                    choice,
                    reason,
                    now=now,
                    keyring=self.keyring,
                    args_sha256=request.args_sha256,
                )
                self._close(
                    conn,
                    request,
                    RequestStatus.DENIED,
                    CallStatus.DENIED,
                    AuditEvent.DENIED,
                    actor,
                    reason,
                    now,
                )
                answer = Answer(ok=True, status="denied", request_id=ids[0], call_id=ids[1])
            else:
                if self.runtime.registry.get(request.tool) is None:
                    return refusal(409, f"tool {request.tool} is no longer registered")
                if args is not None:
                    applied = apply_edit(self.runtime, conn, request, actor, args, now=now)
                    if isinstance(applied, EditRefused):
                        return refusal(applied.http_status, applied.error)
                    edit = applied
                    if edit is None and any(
                        d["approver"] == actor for d in pending.decisions(conn, request_id)
                    ):
                        return refusal(409, f"{actor} already decided {request_id}")
                    request = edit.request if edit is not None else request
                pending.record_decision(
                    conn,
                    request_id,
                    actor,
                    choice,
                    reason,
                    now=now,
                    keyring=self.keyring,
                    args_sha256=request.args_sha256,
                )
                count = self._approvals(conn, request)
                released = count >= request.approvals_required
                if released:
                    release_mac = self.keyring.sign(Purpose.APPROVAL, release_text(request, now))
                    if not pending.spend(
                        conn, request_id, RequestStatus.APPROVED, now=now, release_mac=release_mac
                    ):
                        raise RuntimeError("request changed under its row lock")
                    self.store.release(conn, request.call_id, now=now)
                    released_tool = request.tool
                self.audit.append(
                    conn,
                    [
                        entries.decided(
                            event=AuditEvent.APPROVED,
                            actor=actor,
                            tool=request.tool,
                            call_id=request.call_id,
                            request_id=request_id,
                            reason=reason,
                            approvals=count,
                            approvals_required=request.approvals_required,
                            released=released,
                            **(edited_detail(request, edit) if edit else {}),
                        )
                    ],
                    at=now,
                )
                answer = Answer(
                    ok=True,
                    status="approved",
                    approvals=count,
                    approvals_required=request.approvals_required,
                    released=released,
                    request_id=ids[0],
                    call_id=ids[1],
                    args_sha256=request.args_sha256 if edit else None,
                )
            # The last lock waited for (the audit chain's) may have taken us past the
            # deadline too: rolled back, as the API will tell the approver it failed.
            if deadline_ms is not None and self.clock() > deadline_ms:
                raise PastDeadline
        if answer.ok and (answer.released or answer.status in ("denied", "cancelled")):
            metrics.decided(request.tool, str(answer.status), (now - request.created_at) / 1000)
            # Committed: the approvers hear of it now, off this thread.
            self._announce(NotifyEvent(str(answer.status)), request)
        elif answer.ok and edit is not None:
            # An edit left the request pending: every approver must see the new arguments,
            # not only those whose approval it reset.
            self._announce(NotifyEvent.EDITED, request)
        # Committed: the request is spent. Only now does the call reach its queue.
        if released_tool is not None:
            tool = self.runtime.registry.get(released_tool)
            if tool is not None:
                try:
                    # Someone has just decided it: a released call goes ahead of batches.
                    message = message_for(tool, request.call_id, Precedence.INTERACTIVE)
                    self.runtime.publisher.publish([message])
                except Exception as exc:
                    # The call is queued in the database; the reconciler will publish it.
                    log.warning("released %s but could not publish it: %s", request.call_id, exc)
        elif answer.status in ("denied", "cancelled"):
            self.notifier.call_done(request.call_id)
        return answer

    def _announce(self, event: NotifyEvent, request: pending.ApprovalRequest) -> None:
        self.runtime.announcer.announce(
            event, [Announced(request.id, request.tool, request.approvers)]
        )

    def _unbound(self, conn: Any, request: pending.ApprovalRequest) -> str | None:
        """Why no decision may touch this request, if none may: its binding was not sealed
        by an API process of this deployment, or its call is no longer what was bound."""
        if not binding_verifies(request, self.keyring):
            metrics.tampered(Tampered.APPROVAL_REQUEST)
            log.error("request %s: its sealed binding does not verify; refused", request.id)
            return f"request {request.id} does not verify: it was changed outside toolrouter"
        call = self.store.get(conn, request.call_id)
        if (
            call is None
            or call.request_id != request.id
            or call.tool != request.tool
            or call.requested_by != request.requested_by
            or call.args_sha256 != request.args_sha256
            or sha256_hex(call.args) != request.args_sha256
        ):
            metrics.tampered(Tampered.CALL)
            log.error("request %s: its call no longer matches the binding; refused", request.id)
            return f"the call of {request.id} changed after the request was issued"
        return None

    def _approvals(self, conn: Any, request: pending.ApprovalRequest) -> int:
        """Distinct approvers whose approval this worker recorded (sealed) on the arguments
        now bound, and who may still decide it: rows written any other way are not
        approvals, and a key revoked or stripped of its approver role since no longer
        counts."""
        recorded = pending.decisions(conn, request.id)
        sealed = pending.decisions(conn, request.id, keyring=self.keyring, request=request)
        if len(sealed) != len(recorded):
            metrics.tampered(Tampered.APPROVAL_DECISION)
            log.error("request %s has decisions this worker did not seal; ignored", request.id)
        approvers = {d["approver"] for d in sealed if d["decision"] == Decision.APPROVE}
        return sum(1 for name in approvers if pending.counts_now(conn, request, name, self.keyring))

    def _close(
        self,
        conn: Any,
        request: pending.ApprovalRequest,
        status: RequestStatus,
        call_status: CallStatus,
        event: AuditEvent,
        actor: str,
        reason: str | None,
        now: int,
    ) -> None:
        if not pending.spend(conn, request.id, status, now=now):
            raise RuntimeError("request changed under its row lock")
        self.store.close_pending(conn, request.call_id, call_status, now=now)
        self.audit.append(
            conn,
            [
                entries.decided(
                    event=event,
                    actor=actor,
                    tool=request.tool,
                    call_id=request.call_id,
                    request_id=request.id,
                    reason=reason,
                )
            ],
            at=now,
        )

    def expire_due(self, limit: int = 500) -> int:
        """Move every request past its expiry, and its call, to ``expired`` (audited)."""
        with self.store.reading() as conn:
            due = pending.due(conn, now=self.clock(), limit=limit)
        expired = 0
        for request_id in due:
            now = self.clock()
            with self.store.transaction() as conn:
                request = pending.get(conn, request_id, for_update=True)
                # A decision that won the race has already spent it: nothing to do.
                if request is None or not pending.spend(
                    conn, request_id, RequestStatus.EXPIRED, now=now, expiring=True
                ):
                    continue
                self.store.close_pending(conn, request.call_id, CallStatus.EXPIRED, now=now)
                self.audit.append(
                    conn,
                    [
                        entries.decided(
                            event=AuditEvent.EXPIRED,
                            actor=EXPIRY_ACTOR,
                            tool=request.tool,
                            call_id=request.call_id,
                            request_id=request_id,
                        )
                    ],
                    at=now,
                )
            self.notifier.call_done(request.call_id)
            metrics.decided(request.tool, "expired", (now - request.created_at) / 1000)
            self._announce(NotifyEvent.EXPIRED, request)
            expired += 1
        return expired
