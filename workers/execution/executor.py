"""The executor: what ``workers.tasks`` calls to run calls and to recover lost work.

A plain class with no Celery in it (Celery's testing guide: test the logic "much like a
web view"). It wires the parts of execution together and hands each entry point to the
part that owns it.
"""

from __future__ import annotations

from collections.abc import Sequence

from router.db.rows import CallRow, Fence
from router.messaging.completions import Notifier
from router.runtime import Runtime
from router.status import AuditEvent, CallStatus

from ..handlers import Outcome
from .call_runner import CallRunner
from .ledger import Ledger
from .recovery import Recovery
from .run_outcome import RunOutcome
from .shared_message import SharedMessageRunner


class Executor:
    """Runs calls for one worker process; ``actor`` names it in the audit log."""

    def __init__(self, runtime: Runtime, notifier: Notifier, *, actor: str) -> None:
        self.notifier = notifier
        self.ledger = Ledger(runtime, notifier, actor=actor)
        self.calls = CallRunner(self.ledger)
        self.recovery = Recovery(self.ledger)
        self.shared = SharedMessageRunner(self.ledger, self.calls, self.recovery)

    def run(self, call_id: str, tool_hint: str | None) -> RunOutcome:
        """Run one call if it is still queued, under its time limits
        (``CallRunner.run_within_limits``)."""
        return self.calls.run_within_limits(call_id, tool_hint)

    def run_many(self, call_ids: Sequence[str], tool_hint: str | None) -> list[RunOutcome]:
        """Run the calls of one shared message in turn (``SharedMessageRunner.run_many``)."""
        return self.shared.run_many(call_ids, tool_hint)

    def fail_hard_timeout(self, call_id: str, fence: Fence | None = None) -> None:
        """Fail a call whose handler was killed at its hard time limit as timed out."""
        self.calls.fail_hard_timeout(call_id, fence)

    def finish(
        self,
        row: CallRow,
        outcome: Outcome,
        *,
        status: CallStatus | None = None,
        event: AuditEvent | None = None,
        cached: bool = False,
        answered_by: str | None = None,
    ) -> RunOutcome:
        """Record ``outcome`` for ``row``'s attempt (``Ledger.finish``)."""
        return self.ledger.finish(
            row, outcome, status=status, event=event, cached=cached, answered_by=answered_by
        )

    def lease_ms(self, tool_name: str | None) -> int:
        """How long a claim of a call of ``tool_name`` holds it (``Ledger.lease_ms``)."""
        return self.ledger.lease_ms(tool_name)

    def reap(self, limit: int = 500) -> dict[RunOutcome, int]:
        """Recover every running call whose lease has run out (``Recovery.reap``)."""
        return self.recovery.reap(limit)

    def recover(self, row: CallRow) -> RunOutcome:
        """Recover one running call whose worker is gone (``Recovery.recover``)."""
        return self.recovery.recover(row)

    def reconcile(self, limit: int = 1000) -> int:
        """Publish again the queued calls nobody claimed (``Recovery.reconcile``)."""
        return self.recovery.reconcile(limit)

    def republish(self, call_ids: Sequence[str]) -> None:
        """Send ``call_ids`` out again if still queued (``Recovery.republish``)."""
        self.recovery.republish(call_ids)
