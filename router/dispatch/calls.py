"""Reading and cancelling calls on behalf of a key: who may see what."""

from __future__ import annotations

from ..approval.model import Decision
from ..audit import entries
from ..audit.log import AuditLog
from ..auth.principal import Principal
from ..clock import Clock, wall_clock_ms
from ..db.retry import BRIEF_OUTAGE_S, retried
from ..db.rows import CallRow
from ..db.store import Store
from ..errors import NotCancellable, NotFound, Unavailable
from ..ids import is_call_id
from ..messaging.decisions import DecisionClient
from ..names import echo_name
from ..results import CallResult
from ..status import CallStatus

UNDONE = "the call was undone by a database restart; submit it again"


class CallService:
    """A key reads its own calls; operators read every call; only the requester cancels."""

    def __init__(
        self,
        store: Store,
        decisions: DecisionClient,
        audit: AuditLog,
        *,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.store, self.decisions, self.audit, self.clock = store, decisions, audit, clock

    def get(self, principal: Principal, call_id: str) -> CallRow:
        """The call, or ``NotFound`` (also for calls the key may not see: no existence leak)."""
        row = self.read(call_id)
        if not (row.requested_by == principal.name or principal.is_operator):
            raise NotFound(f"unknown call: {call_id}")
        return row

    def get_accepted(self, principal: Principal, call_id: str) -> CallRow:
        """``get`` of a call this request has just accepted: missing, a database crash
        undid its accept (which need not have waited for the disk), and the caller is told
        to submit it again rather than that it never existed."""
        try:
            return self.get(principal, call_id)
        except NotFound:
            raise Unavailable(UNDONE) from None

    def accepted_on_disk(self, principal: Principal, call_id: str) -> CallResult:
        """A call this request accepted, as it stands once every commit so far is on disk,
        tried again through a brief outage: a wait that ended while the database was away
        answers this, not an error that would have the call submitted twice."""

        def on_disk() -> CallResult:
            self.store.wait_for_disk()
            return self.get_accepted(principal, call_id).result()

        return retried(
            on_disk, within_s=BRIEF_OUTAGE_S, what=f"flush the accepted call {call_id} to disk"
        )

    def read(self, call_id: str) -> CallRow:
        """The call, for components that have already checked who may see it."""
        if not is_call_id(call_id):  # from any entrance: MCP, the CLI, the Python API
            raise NotFound(f"unknown call: {echo_name(call_id)}")
        with self.store.reading() as conn:
            row = self.store.get(conn, call_id)
        if row is None:
            raise NotFound(f"unknown call: {call_id}")
        return row

    def cancel(self, principal: Principal, call_id: str) -> CallResult:
        """Cancel a queued or pending call of the caller's own.

        A pending call's request is cancelled by the approval worker, the only component
        that moves a request out of pending; a queued call is cancelled here.
        """
        row = self.get(principal, call_id)
        if row.requested_by != principal.name:
            raise NotFound(f"unknown call: {call_id}")
        if row.status == CallStatus.PENDING and row.request_id is not None:
            answer = self.decisions.send(row.request_id, principal.name, Decision.CANCEL, None)
            if not answer.get("ok"):
                if answer.get("http_status") == 503:
                    raise Unavailable(str(answer.get("error")).removeprefix("unavailable: "))
                raise NotCancellable(f"call is no longer pending: {answer.get('error')}")
            return self.get(principal, call_id).result()
        with self.store.transaction() as conn:
            now = self.clock()
            if not self.store.cancel(conn, call_id, now=now):
                current = self.store.get(conn, call_id)
                status = current.status if current else row.status
                raise NotCancellable(
                    f"call is {status}; only queued or pending calls can be cancelled"
                )
            self.audit.append(
                conn,
                [
                    entries.cancelled(
                        actor=principal.name,
                        tool=row.tool,
                        call_id=call_id,
                        request_id=row.request_id,
                    )
                ],
                at=now,
            )
        return self.read(call_id).result()
