"""Reading and cancelling calls on behalf of a key: who may see what."""

from __future__ import annotations

from . import audit
from .audit import AuditEntry
from .clock import Clock, wall_clock_ms
from .errors import NotCancellable, NotFound
from .keys import Principal
from .results import CallResult
from .status import AuditEvent
from .store import CallRow, Store


class CallService:
    """A key reads its own calls; operators read every call; only the requester cancels."""

    def __init__(self, store: Store, *, clock: Clock = wall_clock_ms) -> None:
        self.store, self.clock = store, clock

    def get(self, principal: Principal, call_id: str) -> CallRow:
        """The call, or ``NotFound`` (also for calls the key may not see: no existence leak)."""
        with self.store.reading() as conn:
            row = self.store.get(conn, call_id)
        if row is None or not (row.requested_by == principal.name or principal.is_operator):
            raise NotFound(f"unknown call: {call_id}")
        return row

    def cancel(self, principal: Principal, call_id: str) -> CallResult:
        """Cancel a queued or pending call of the caller's own."""
        with self.store.transaction() as conn:
            row = self.store.get(conn, call_id)
            if row is None or row.requested_by != principal.name:
                raise NotFound(f"unknown call: {call_id}")
            now = self.clock()
            if not self.store.cancel(conn, call_id, now=now):
                raise NotCancellable(
                    f"call is {row.status}; only queued or pending calls can be cancelled"
                )
            audit.append(
                conn,
                [
                    AuditEntry(
                        event=AuditEvent.CANCELLED,
                        actor=principal.name,
                        tool=row.tool,
                        call_id=call_id,
                        request_id=row.request_id,
                    )
                ],
                at=now,
            )
            row = self.store.get(conn, call_id)
        assert row is not None
        return row.result()
