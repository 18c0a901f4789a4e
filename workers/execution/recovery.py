"""Recovery of lost work: the reaper's lost runs and the reconciler's unsent calls.

The database is the truth, a message only a wake-up call: a run whose worker is gone is
found by its lapsed lease (``reap``), and a queued call whose message was lost is found by
its old publish time (``reconcile``). Both must agree with the claim and the fence of
``ledger``, so a call recovered twice still runs at most once per attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from router import metrics
from router.approval.binding import may_publish
from router.audit import entries
from router.constants import POISON_CAP
from router.db.rows import CallRow
from router.errors import Unavailable
from router.messaging.run_message import Precedence, message_for
from router.metrics import Tampered
from router.status import AuditEvent, CallStatus
from router.tools.registry import Tool, is_idempotent

from ..handlers import Outcome
from .ledger import Ledger
from .run_outcome import RunOutcome

log = logging.getLogger(__name__)


class Recovery:
    """Re-queues, interrupts or publishes again the calls that lost their run or message."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger, self.runtime, self.actor = ledger, ledger.runtime, ledger.actor
        self.store, self.registry, self.clock = ledger.store, ledger.registry, ledger.clock
        self.audit = ledger.audit

    def reap(self, limit: int = 500) -> dict[RunOutcome, int]:
        """Recover every running call whose lease has run out."""
        with self.store.reading() as conn:
            lost = self.store.lost_runs(conn, now=self.clock(), limit=limit)
        counts: dict[RunOutcome, int] = {}
        for row in lost:
            what = self.recover(row)
            counts[what] = counts.get(what, 0) + 1
        return counts

    def recover(self, row: CallRow) -> RunOutcome:
        """A running call whose worker is gone: re-queue, interrupt or fail it as poison."""
        tool = self.registry.get(row.tool)
        now = self.clock()
        if is_idempotent(tool) and row.attempt < POISON_CAP:
            with self.store.transaction() as conn:
                if not self.store.requeue_lost(conn, row.id, fence=row.fence, now=now):
                    return RunOutcome.RACED
                self.audit.append(
                    conn,
                    [
                        entries.requeued_lost(
                            actor=self.actor, tool=row.tool, call_id=row.id, attempt=row.attempt
                        )
                    ],
                    at=now,
                )
            try:
                self.publish_again([row])
            except Unavailable as exc:
                # Queued with no publish time: the reconciler sends it once Redis is back.
                log.warning("re-queued %s but could not publish it: %s", row.id, exc)
            return RunOutcome.REQUEUED
        if is_idempotent(tool):
            outcome = Outcome(
                ok=False,
                error=f"poison call: its run was lost {row.attempt} times",
                error_type="PoisonCall",
            )
            fenced = self.ledger.finish(row, outcome) is RunOutcome.FENCED
            return RunOutcome.RACED if fenced else RunOutcome.POISONED
        return self._interrupt(row)

    def _interrupt(self, row: CallRow) -> RunOutcome:
        # Not idempotent: the outcome is unknown and a human must look; never re-run it.
        outcome = Outcome(
            ok=False, error="worker lost during the run; outcome unknown", error_type="WorkerLost"
        )
        recorded = self.ledger.finish(
            row, outcome, status=CallStatus.INTERRUPTED, event=AuditEvent.INTERRUPTED
        )
        return RunOutcome.RACED if recorded is RunOutcome.FENCED else RunOutcome.INTERRUPTED

    def reconcile(self, limit: int = 1000) -> int:
        """Publish again the queued calls nobody claimed: heals lost messages and Redis restarts."""
        cutoff = self.clock() - int(self.runtime.settings.requeue_after_s * 1000)
        with self.store.reading() as conn:
            stale = self.store.stale_queued(
                conn,
                published_before=cutoff,
                limit=limit,
                tools=[tool.name for tool in self.registry],
            )
        return self.publish_again(stale)

    def republish(self, call_ids: Sequence[str]) -> None:
        """Send ``call_ids`` out again; those no longer queued are dropped by their claim."""
        with self.store.reading() as conn:
            rows = [row for call_id in call_ids if (row := self.store.get(conn, call_id))]
        self.publish_again([row for row in rows if row.status == CallStatus.QUEUED])

    def publish_again(self, rows: Sequence[CallRow]) -> int:
        """Publish queued ``rows`` again and note when, so the reconciler waits its turn;
        raises ``Unavailable`` when Redis is down (the reconciler then sends them). A gated
        call without a release for exactly it is failed instead, never published."""
        messages = [
            message_for(tool, row.id, Precedence.of(row.batch_id, row.request_id))
            for row in rows
            if (tool := self.registry.get(row.tool)) and self._cleared_to_publish(row, tool)
        ]
        if messages:
            self.runtime.publisher.publish(messages)
            with self.store.transaction() as conn:
                self.store.mark_published(conn, [m.call_id for m in messages], now=self.clock())
        return len(messages)

    def _cleared_to_publish(self, row: CallRow, tool: Tool) -> bool:
        """Whether ``row`` may be published; a call that must not run is failed here, so
        it is neither published nor found again by the next pass."""
        if may_publish(row, gated=tool.spec.gated):
            return True
        with self.store.reading() as conn:
            refusal = self.ledger.refusal(conn, row)
        if refusal is None:
            return True
        log.error("queued call %s not published: %s", row.id, refusal.error)
        metrics.tampered(Tampered.CALL)
        with self.store.transaction() as conn:
            claimed = self.store.claim(
                conn, row.id, now=self.clock(), lease_ms=self.ledger.lease_ms(None)
            )
        if claimed is not None:
            self.ledger.finish(
                claimed, Outcome(ok=False, error=refusal.error, error_type=refusal.error_type)
            )
        return False
