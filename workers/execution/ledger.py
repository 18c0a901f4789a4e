"""The database side of a run: claim a call, record its outcome fenced on the claim.

A claim gives this process one attempt of a call, under a lease; an outcome is written
only while that claim (``rows.Fence``) still holds the call, so a run the reaper has taken
back cannot overwrite what came after it. In a shared message (``shared_message``)
outcomes may be held and committed together, in the transaction that also claims the calls
ahead and renews their leases; that state lives here, where the single run and the shared
message meet.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from router import metrics
from router.approval import requests as pending
from router.approval.binding import TAMPERED, RunRefusal, run_refusal, spent_on_a_run
from router.audit import entries
from router.audit.log import AuditEntry
from router.auth.keys import principal_named
from router.db.retry import BRIEF_OUTAGE_S, retried
from router.db.rows import AttemptOutcome, CallRow
from router.dispatch.gate import RolesOf, rule_on, why_not_fallback
from router.messaging.completions import MAX_RESULT_BYTES, Notifier
from router.results import CallResult
from router.runtime import Runtime
from router.status import AuditEvent, CallStatus
from router.tools.registry import Tool
from router.trust.keyring import KeyRing

from ..call_limits import KERNEL_MARGIN_S, limits
from ..handlers import Outcome
from .run_outcome import RunOutcome

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
# An outcome's commit stops being tried again this long before its run's hard limit, where
# the watchdog would record the call as timed out.
HARD_LIMIT_MARGIN_S = 2.0

# A claimed call's row (None: not queued any more) and why it must not run, if it must not.
Claim = tuple[CallRow | None, RunRefusal | None]


def timeout_of(tool: Tool | None) -> float:
    """The tool's soft time limit, in seconds; the default for a tool not registered."""
    return tool.spec.timeout_s if tool else DEFAULT_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class Finished:
    """A call's outcome, to be recorded against the attempt that ran it."""

    row: CallRow
    outcome: Outcome
    status: CallStatus
    event: AuditEvent
    at: int
    cached: bool = False
    answered_by: str | None = None

    def audit_entry(self, actor: str) -> AuditEntry:
        return entries.finished(
            event=self.event,
            actor=actor,
            tool=self.answered_by or self.row.tool,
            call_id=self.row.id,
            request_id=self.row.request_id,
            attempt=self.row.attempt,
            cached=self.cached,
            failed=not self.outcome.ok,
            error=self.outcome.error,
            error_type=self.outcome.error_type,
            ran_ms=self.outcome.ran_ms,
        )

    def attempt_outcome(self) -> AttemptOutcome:
        outcome = self.outcome
        return AttemptOutcome(
            call_id=self.row.id,
            fence=self.row.fence,
            status=self.status,
            at=self.at,
            value=outcome.value_json,
            content=outcome.content_json,
            error=outcome.error,
            error_type=outcome.error_type,
            answered_by=self.answered_by,
            cached=self.cached,
        )

    def result(self) -> CallResult | None:
        """The answer for the call's completion notice; None for a value too large to ride
        (then it is not decoded only to be dropped)."""
        value_json, content_json = self.outcome.value_json, self.outcome.content_json
        if len(value_json or "") + len(content_json or "") > MAX_RESULT_BYTES:
            return None
        if self.row.edited_by is not None:
            # Rare: the waiter reads the edit from the database rather than from the notice.
            return None
        return CallResult(
            status=self.status,
            tool=self.row.tool,
            call_id=self.row.id,
            value=None if value_json is None else json.loads(value_json),
            content=None if content_json is None else json.loads(content_json),
            error=self.outcome.error,
            error_type=self.outcome.error_type,
            request_id=self.row.request_id,
            answered_by=self.answered_by,
        )


class Ledger:
    """Claims calls and records their outcomes for one executor; ``actor`` names it in the
    audit log."""

    def __init__(self, runtime: Runtime, notifier: Notifier, *, actor: str) -> None:
        self.runtime, self.notifier, self.actor = runtime, notifier, actor
        self.store, self.registry, self.clock = runtime.store, runtime.registry, runtime.clock
        self.audit = runtime.audit
        # In a shared message, calls are claimed in the transaction that records the
        # outcomes before them: each one's claim, kept until its turn comes.
        self.claimed_ahead: dict[str, Claim] = {}
        # In a shared message, outcomes not committed yet; None elsewhere: each outcome is
        # committed as it comes.
        self.held: list[Finished] | None = None

    def lease_ms(self, tool_name: str | None) -> int:
        # The lease must outlast the hard time limit, or the reaper gives up on a run that
        # its worker is still about to kill (and re-runs it, if idempotent, in parallel);
        # in a shared message the kernel's backstop may come a little after it.
        timeout = timeout_of(self.registry.get(tool_name))
        hard_limit = timeout + self.runtime.publisher.hard_limit_grace_s + KERNEL_MARGIN_S
        return int((hard_limit + self.runtime.settings.lease_grace_s) * 1000)

    def claim(self, conn: Connection, call_id: str, tool_hint: str | None) -> Claim:
        """``call_id``'s row if this process now runs it, with why it must not run, if it
        must not (``router.approval.binding``)."""
        return self.claim_many(conn, [call_id], tool_hint)[call_id]

    def claim_many(
        self, conn: Connection, call_ids: Sequence[str], tool_hint: str | None
    ) -> dict[str, Claim]:
        """``claim`` of each of ``call_ids``, the claims sent together: only calls of
        ``tool_hint``, the tool their message names, whose limits the run applies."""
        if not call_ids:
            return {}  # most commits claim nothing
        if tool_hint is None:
            return {call_id: (None, None) for call_id in call_ids}  # no API process sent it
        rows = self.store.claim_many(
            conn, call_ids, now=self.clock(), lease_ms=self.lease_ms(tool_hint), tool=tool_hint
        )
        return {
            call_id: (None, None) if row is None else (row, self.refusal(conn, row))
            for call_id, row in zip(call_ids, rows, strict=True)
        }

    def refusal(self, conn: Connection, row: CallRow) -> RunRefusal | None:
        """Why ``row`` must not run, if it must not: run only what was accepted and, if
        gated, released for exactly this call."""
        tool = self.registry.get(row.tool)
        gated = tool is not None and tool.spec.gated
        denial: str | None = None
        if tool is not None and tool.rules is not None:
            # Rules over arguments read again (keys' roles as they are now): a row written
            # without a request runs only if they still let it run ungated, and no approval
            # outranks a deny_if that holds now (one added while the request waited).
            ruling = rule_on(
                tool, json.loads(row.args), row.requested_by, _roles_in(conn, self.runtime.keyring)
            )
            denial = ruling.denial
            if row.request_id is None:
                gated = ruling.gate is not None
        request = pending.get(conn, row.request_id) if row.request_id is not None else None
        refused = run_refusal(self.runtime.keyring, row, request, gated=gated)
        if denial is not None and (refused is None or refused.error_type != TAMPERED):
            return RunRefusal("Denied", denial)
        if refused is None and request is not None and spent_on_a_run(conn, row.id):
            return RunRefusal(
                "ApprovalSpent", f"refused: the approval of {request.id} was spent on a run"
            )
        return refused

    def why_not_fallback(
        self, conn: Connection, tool: Tool, args: Any, requested_by: str
    ) -> str | None:
        """Why ``tool`` must not answer a failed call as its fallback, if it must not, with
        the requester's roles read in ``conn``."""
        return why_not_fallback(tool, args, requested_by, _roles_in(conn, self.runtime.keyring))

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
        """Record ``outcome`` for ``row``'s attempt; ``FENCED`` if that attempt lost the
        call. In a shared message the outcome may be held, to be committed with those
        after it."""
        if status is None:
            status = CallStatus.SUCCEEDED if outcome.ok else CallStatus.FAILED
        if event is None:
            event = AuditEvent.OK if outcome.ok else AuditEvent.ERROR
        done = Finished(row, outcome, status, event, self.clock(), cached, answered_by)
        if self.held is not None:
            self.held.append(done)
        elif self.commit_finished([done]):
            return RunOutcome.FENCED
        return RunOutcome.OK if outcome.ok else RunOutcome.ERROR

    def commit_finished(
        self, finished: Sequence[Finished], renew: Sequence[CallRow] = ()
    ) -> list[str]:
        """``commit`` of outcomes, tried again while the database does not answer: given up,
        the finished runs would be recovered as lost (``interrupted``, or run again). Within
        a run's limits, until shortly before its hard limit; outside them, a brief outage."""
        left = limits.seconds_left()
        within = BRIEF_OUTAGE_S if left is None else left - HARD_LIMIT_MARGIN_S
        first = finished[0].row.id if finished else "no call"
        calls = first if len(finished) <= 1 else f"{first} and {len(finished) - 1} more"
        return retried(
            lambda: self.commit(finished, renew=renew),
            within_s=within,
            what=f"record the outcome of {calls}",
        )

    def commit(
        self,
        finished: Sequence[Finished],
        claim: Sequence[str] = (),
        renew: Sequence[CallRow] = (),
        tool_hint: str | None = None,
    ) -> list[str]:
        """Record ``finished``, claim ``claim`` and renew the leases of ``renew`` in one
        transaction, then announce the outcomes recorded. Returns the ids of the calls
        whose outcome was fenced off: their attempt lost the call meanwhile."""
        now = self.clock()
        with self.store.transaction() as conn:
            written = self.store.finish(conn, [done.attempt_outcome() for done in finished])
            recorded = [done for done, ok in zip(finished, written, strict=True) if ok]
            # A try after one whose commit landed but whose answer was lost finds its own
            # outcomes there already: recorded, not fenced off (and not appended twice).
            landed = [
                done
                for done, ok in zip(finished, written, strict=True)
                if not ok and self._landed_before(conn, done)
            ]
            # Before the audit append: the chain's lock, which every append in every
            # process waits for, is then held for the append and the commit alone. And
            # every writer takes its call rows' locks before the chain's, so none waits
            # for a row while holding the chain (a cancel of a call claimed here would).
            claimed = self.claim_many(conn, claim, tool_hint)
            renewed = {row.id: self._renew_lease(conn, row, now) for row in renew}
            self.audit.append(conn, [done.audit_entry(self.actor) for done in recorded], at=now)
        # Only once the transaction is committed: a rolled-back claim is no claim.
        self.claimed_ahead.update(claimed)
        for call_id, row in renewed.items():
            refusal = self.claimed_ahead.get(call_id, (None, None))[1]
            self.claimed_ahead[call_id] = (row, refusal)  # None: lost meanwhile, dropped
        if recorded or landed:
            self._announce([*recorded, *landed])
        recorded_ids = {done.row.id for done in [*recorded, *landed]}
        fenced = [done.row.id for done in finished if done.row.id not in recorded_ids]
        for call_id in fenced:
            log.warning("call %s finished after losing its lease; outcome dropped", call_id)
        return fenced

    def _landed_before(self, conn: Connection, done: Finished) -> bool:
        """Whether ``done`` is in the database as written by an earlier try of this commit:
        the same attempt ended with the same status at the same moment."""
        row = self.store.get(conn, done.row.id)
        return (
            row is not None
            and row.fence == done.row.fence
            and row.status == done.status
            and row.finished_at == done.at
        )

    def _renew_lease(self, conn: Connection, row: CallRow, now: int) -> CallRow | None:
        """``row`` with a fresh lease; None if its attempt no longer holds the call."""
        lease_until = now + self.lease_ms(row.tool)
        if self.store.renew_lease(conn, row.id, fence=row.fence, lease_until=lease_until):
            return dataclasses.replace(row, lease_until=lease_until)
        return None

    def _announce(self, recorded: Sequence[Finished]) -> None:
        """After the commit: the answers ride with the notifications (one round trip for
        all), so a caller's wait needs no read."""
        self.notifier.calls_done([(done.row.id, done.result()) for done in recorded])
        for done in recorded:
            tool = self.registry.get(done.row.tool)
            started_at = done.row.started_at
            # A cached answer ran no handler: counted as a call, not timed as a run.
            ran = None if done.cached or started_at is None else (done.at - started_at) / 1000
            metrics.call_finished(
                done.row.tool,
                str(done.status),
                ran,
                0.0 if done.cached or tool is None else tool.spec.cost_per_call,
            )


def _roles_in(conn: Connection, keyring: KeyRing) -> RolesOf:
    def roles_of(name: str) -> frozenset[str]:
        who = principal_named(conn, name, keyring)
        return who.roles if who is not None else frozenset()

    return roles_of
