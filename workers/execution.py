"""Running a call: claim it, run its handler once, record the outcome fenced on the attempt.

A plain class with no Celery in it (Celery's testing guide: test the logic "much like a
web view"); ``workers.tasks`` is the thin layer that calls it. Recovery of lost runs
lives here too, since it must agree with the claim and the fence.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy import Connection

from router import metrics, pending
from router.approval_binding import RunRefusal, may_publish, run_refusal
from router.audit import AuditEntry
from router.constants import POISON_CAP
from router.context import CallContext
from router.dispatcher import message_for
from router.errors import Unavailable
from router.notify import MAX_RESULT_BYTES, Notifier
from router.registry import Tool
from router.results import CallResult
from router.runtime import Runtime
from router.status import AuditEvent, CallStatus
from router.store import CallRow

from .call_limits import KERNEL_MARGIN_S, limits
from .handlers import Outcome, invoke
from .pace import pace
from .policies import Limiter, ResultCache, backoff_s, should_retry

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
# A call claimed ahead in a shared message whose lease has run this long by the time the
# calls before it are done gets its lease renewed before its turn (a slow call before it).
RENEW_AFTER_MS = 1000


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
        detail: dict[str, Any] = {"attempt": self.row.attempt}
        if self.cached:
            detail["cached"] = True
        if not self.outcome.ok:
            detail.update(error=self.outcome.error, error_type=self.outcome.error_type)
        return AuditEntry(
            event=self.event,
            actor=actor,
            tool=self.answered_by or self.row.tool,
            call_id=self.row.id,
            request_id=self.row.request_id,
            detail=detail,
        )

    def result(self) -> CallResult | None:
        """The answer for the call's completion notice; None for a value too large to ride
        (then it is not decoded only to be dropped)."""
        value_json = self.outcome.value_json
        if value_json is not None and len(value_json) > MAX_RESULT_BYTES:
            return None
        return CallResult(
            status=self.status,
            tool=self.row.tool,
            call_id=self.row.id,
            value=None if value_json is None else json.loads(value_json),
            error=self.outcome.error,
            error_type=self.outcome.error_type,
            request_id=self.row.request_id,
            answered_by=self.answered_by,
        )


class Executor:
    """Runs calls for one worker process; ``actor`` names it in the audit log."""

    def __init__(self, runtime: Runtime, notifier: Notifier, *, actor: str) -> None:
        self.runtime, self.notifier, self.actor = runtime, notifier, actor
        self.store, self.registry, self.clock = runtime.store, runtime.registry, runtime.clock
        self.audit = runtime.audit
        self.max_nesting = runtime.settings.max_nesting
        self.redact = runtime.redactor
        self.limiter = Limiter(notifier.client, runtime.namespace)
        self.cache = ResultCache(notifier.client, runtime.namespace, runtime.keyring)
        # The call (id, attempt) this executor claimed last, in a shared message.
        self.claimed: tuple[str, int] | None = None
        # In a shared message, calls are claimed in the transaction that records the
        # outcomes before them (``run_many``): each one's row (None: not queued any more)
        # and why it must not run, if it must not, until its turn comes.
        self._claimed_ahead: dict[str, tuple[CallRow | None, RunRefusal | None]] = {}
        # In a shared message, outcomes not committed yet, and since when (monotonic);
        # None elsewhere: each outcome is committed as it comes.
        self._held: list[Finished] | None = None
        self._held_since: float | None = None

    def lease_ms(self, tool_name: str | None) -> int:
        tool = self.registry.get(tool_name)
        timeout = tool.spec.timeout_s if tool else DEFAULT_TIMEOUT_S
        # The lease must outlast the hard time limit, or the reaper gives up on a run that
        # its worker is still about to kill (and re-runs it, if idempotent, in parallel);
        # in a shared message the kernel's backstop may come a little after it.
        hard_limit = timeout + self.runtime.publisher.hard_limit_grace_s + KERNEL_MARGIN_S
        return int((hard_limit + self.runtime.settings.lease_grace_s) * 1000)

    def outcome_hold_ms(self, tool: Tool | None) -> float:
        """How long outcomes of ``tool`` may be held in a shared message. Idempotent tools
        only: outcomes held are lost with their process (a kill, a crash), and the reaper
        runs a lost call of an idempotent tool again, while one of any other tool would
        become ``interrupted`` although its run had ended. Not for a rate-limited tool,
        whose calls are each claimed on their own."""
        if tool is None or not tool.spec.idempotent or tool.spec.rate_limit:
            return 0.0
        return self.runtime.settings.outcome_hold_ms

    def run_many(self, call_ids: Sequence[str], tool_hint: str | None = None) -> list[str]:
        """Run the calls of one message in turn, each under its own time limits
        (``workers.call_limits``).

        Calls are claimed in runs, each run in the transaction that records the outcomes
        before it, and only when their turn comes, so calls further on are still queued:
        if this process dies they are published again, and a worker that claims one first
        takes it over. A run is one call (each claimed with the outcome before it: one
        transaction per call instead of two) or, for an idempotent tool, as many calls as
        this process lately finished within ``outcome_hold_ms`` (``workers.pace``). Their
        outcomes are held and committed together (one transaction for the run) when the
        run ends, or sooner once the oldest has been held that long."""
        tool = self.registry.get(tool_hint)
        timeout = tool.spec.timeout_s if tool else DEFAULT_TIMEOUT_S
        grace = self.runtime.publisher.hard_limit_grace_s
        # A rate-limited tool's calls each ask the limiter first, before their claim.
        ahead = tool is None or not tool.spec.rate_limit
        hold_ms = self.outcome_hold_ms(tool)
        run_length = pace.calls_within(tool.name, hold_ms, len(call_ids)) if tool else 1
        positions = {call_id: index for index, call_id in enumerate(call_ids)}
        done: list[str] = []
        self._held, self._held_since = [], None
        try:
            for index, call_id in enumerate(call_ids):
                self.claimed = None
                if ahead and call_id not in self._claimed_ahead:
                    # Its run is claimed with the outcomes held so far.
                    claim = call_ids[index : index + run_length]
                    self._settle_logged(done, positions, claim, tool_hint)
                on_hard = functools.partial(self._hard_timeout, call_id, call_ids[index + 1 :])
                started = time.monotonic()
                try:
                    with limits.applied(timeout, grace, on_hard):
                        done.append(self.run(call_id, tool_hint))
                except SoftTimeLimitExceeded:
                    # Struck just before the handler started or as it returned, outside
                    # what the handler adapters catch: the call timed out all the same.
                    self._record_timeout(call_id)
                    done.append("error")
                except Exception:
                    # This call's trouble (the database or Redis gone): it stays queued or
                    # running, for the reconciler or the reaper, as with a message of its
                    # own. The calls after it are independent of it.
                    log.exception("call %s of a shared message did not run", call_id)
                    done.append("failed")
                ended = time.monotonic()
                if tool is not None and done[-1] not in ("dropped", "deferred"):
                    # The pace of runs: a call that was not run says nothing about it.
                    pace.observe(tool.name, (ended - started) * 1000)
                if self._held and self._held_since is None:
                    self._held_since = ended
                following = call_ids[index + 1] if index + 1 < len(call_ids) else None
                if ahead and following is not None and following not in self._claimed_ahead:
                    continue  # the next call's claim commits what is held
                # Were the next call to take as long as this one, would the oldest outcome
                # held have waited too long by its end? Then it is committed first.
                stale = following is not None and self._stale_claims(following)
                if stale or self._held_for(ended + (ended - started)) >= hold_ms:
                    self._settle_logged(done, positions)
        finally:
            try:
                self._settle_logged(done, positions, last=True)
            finally:
                self._held = None
                # Nothing is claimed ahead after the last call, unless the loop was cut
                # short (a warm shutdown's exception, say): such calls go back to the queue.
                self._release_claimed_ahead()
        return done

    def _held_for(self, when: float) -> float:
        """How long the oldest outcome held will have been held at ``when``, in ms."""
        since = self._held_since
        return -1.0 if since is None else (when - since) * 1000

    def _stale_claims(self, call_id: str | None = None) -> list[CallRow]:
        """Calls claimed ahead (``call_id`` alone, when given) whose lease has run for more
        than ``RENEW_AFTER_MS``: the calls before them took longer than their pace."""
        now = self.clock()
        rows = (
            [row for row, _ in self._claimed_ahead.values()]
            if call_id is None
            else [self._claimed_ahead.get(call_id, (None, None))[0]]
        )
        return [
            row
            for row in rows
            if row is not None
            and row.lease_until is not None
            and row.lease_until - now < self.lease_ms(row.tool) - RENEW_AFTER_MS
        ]

    def _settle_logged(
        self,
        done: list[str],
        positions: dict[str, int],
        claim: Sequence[str] = (),
        tool_hint: str | None = None,
        *,
        last: bool = False,
    ) -> None:
        """``_settle``, with what it finds marked in ``done``. If the database does not
        answer, the outcomes stay held for the next try; after the ``last`` one their
        calls stay running, and the reaper recovers them as lost runs."""
        try:
            for call_id in self._settle(claim, tool_hint):
                done[positions[call_id]] = "fenced"
        except Exception:
            held = [outcome.row.id for outcome in self._held or ()]
            log.exception("could not record the outcomes of %s", ", ".join(held) or "no call")
            if last:
                for call_id in held:
                    done[positions[call_id]] = "failed"
                self._held = []

    def _settle(self, claim: Sequence[str] = (), tool_hint: str | None = None) -> list[str]:
        """Commit the held outcomes, claim ``claim`` and renew stale claims ahead
        (``_stale_claims``), in one transaction; the ids of held calls fenced off."""
        held = list(self._held or ())
        stale = [] if claim else self._stale_claims()
        if not held and not claim and not stale:
            return []
        fenced = self._commit(held, claim, stale, tool_hint)
        if self._held is not None:
            del self._held[: len(held)]
        self._held_since = None
        return fenced

    def _record_timeout(self, call_id: str) -> None:
        """Fail ``call_id`` as timed out if this process's claim of it still holds."""
        claimed = self.claimed
        if claimed is not None and claimed[0] == call_id:
            self.fail_hard_timeout(call_id, attempt=claimed[1])

    def _hard_timeout(self, call_id: str, unstarted: Sequence[str]) -> None:
        """``call_id`` ignored its soft limit and its process is about to end: first the
        outcomes held are committed and the calls after it go back to the queue, then it
        is recorded as timed out."""
        try:
            self._settle()
            self._release_claimed_ahead()
            self.republish(unstarted)
        finally:
            self._held = None  # from here on, an outcome is committed as it comes
            self._record_timeout(call_id)

    def _release_claimed_ahead(self) -> None:
        """A call claimed with the last outcome but not started goes back to ``queued``
        (its attempt fenced), so the process's end does not leave it for the reaper."""
        if not self._claimed_ahead:
            return
        now = self.clock()
        for row, _ in list(self._claimed_ahead.values()):
            if row is not None:
                with self.store.transaction() as conn:
                    self.store.requeue_lost(conn, row.id, attempt=row.attempt, now=now)
        self._claimed_ahead.clear()

    def republish(self, call_ids: Sequence[str]) -> None:
        """Send ``call_ids`` out again; those no longer queued are dropped by their claim."""
        with self.store.reading() as conn:
            rows = [row for call_id in call_ids if (row := self.store.get(conn, call_id))]
        self._publish_again([row for row in rows if row.status == CallStatus.QUEUED])

    def _publish_again(self, rows: Sequence[CallRow]) -> int:
        """Publish queued ``rows`` again and note when, so the reconciler waits its turn;
        raises ``Unavailable`` when Redis is down (the reconciler then sends them). A gated
        call without a release for exactly it is failed instead, never published."""
        messages = [
            message_for(tool, row.id)
            for row in rows
            if (tool := self.registry.get(row.tool)) and self._publishable(row, tool)
        ]
        if messages:
            self.runtime.publisher.publish(messages)
            with self.store.transaction() as conn:
                self.store.mark_published(conn, [m.call_id for m in messages], now=self.clock())
        return len(messages)

    def _publishable(self, row: CallRow, tool: Tool) -> bool:
        if may_publish(row, gated=tool.spec.gated):
            return True
        with self.store.reading() as conn:
            refusal = self._refusal(conn, row)
        if refusal is None:
            return True
        log.error("queued call %s not published: %s", row.id, refusal.error)
        metrics.tampered("call")
        with self.store.transaction() as conn:
            claimed = self.store.claim(conn, row.id, now=self.clock(), lease_ms=self.lease_ms(None))
        if claimed is not None:
            self.finish(
                claimed, Outcome(ok=False, error=refusal.error, error_type=refusal.error_type)
            )
        return False

    def run(self, call_id: str, tool_hint: str | None = None) -> str:
        """Run one call if it is still queued. Returns what happened, for the worker log.
        In a shared message, its outcome may be held (``run_many``)."""
        if call_id in self._claimed_ahead:
            row, refusal = self._claimed_ahead.pop(call_id)
        else:
            hinted = self.registry.get(tool_hint)
            if hinted is not None and hinted.spec.rate_limit:
                wait = self.limiter.wait_s(hinted)
                if wait > 0:
                    # Over the limit: the call waits in the broker, not in a worker slot.
                    return self._defer(hinted, call_id, wait)
            with self.store.transaction() as conn:
                row, refusal = self._claim(conn, call_id, tool_hint)
        if row is None:
            # Not queued any more: a duplicate or redelivered message, or a cancelled call.
            return "dropped"
        # Which attempt this process holds: a timeout is recorded against it alone.
        self.claimed = (row.id, row.attempt)
        tool = self.registry.get(row.tool)
        if refusal is not None:
            # Run only what was accepted and, if gated, released for exactly this call.
            log.error("call %s refused: %s", row.id, refusal.error)
            metrics.tampered("call")
            outcome = Outcome(ok=False, error=refusal.error, error_type=refusal.error_type)
        elif tool is None:
            outcome = Outcome(
                ok=False, error=f"unknown tool: {row.tool}", error_type="ToolNotFound"
            )
        else:
            ctx = CallContext(
                call_id=row.id,
                idempotency_key=row.idempotency_key or row.id,
                attempt=row.attempt,
                requested_by=row.requested_by,
                tool=row.tool,
            )
            cached = self.cache.get(tool, row.args_sha256)
            if cached is not None:
                return self.finish(row, Outcome(ok=True, value_json=cached), cached=True)
            with limits.handler():
                outcome = self._invoke(tool, row.arguments, ctx)
            if outcome.ok and outcome.value_json is not None:
                self.cache.put(tool, row.args_sha256, outcome.value_json)
            elif should_retry(tool, row.attempt, outcome):
                return self._retry_later(tool, row, outcome)
            elif row.chain or tool.spec.fallbacks:
                outcome, answered_by = self._fall_back(row, tool, outcome)
                return self.finish(row, outcome, answered_by=answered_by)
        return self.finish(row, outcome)

    def _claim(
        self, conn: Connection, call_id: str, tool_hint: str | None
    ) -> tuple[CallRow | None, RunRefusal | None]:
        """``call_id``'s row if this process now runs it, with why it must not run, if it
        must not (``router.approval_binding``)."""
        row = self.store.claim(conn, call_id, now=self.clock(), lease_ms=self.lease_ms(tool_hint))
        if row is None:
            return None, None
        return row, self._refusal(conn, row)

    def _refusal(self, conn: Connection, row: CallRow) -> RunRefusal | None:
        tool = self.registry.get(row.tool)
        gated = tool is not None and tool.spec.gated
        request = pending.get(conn, row.request_id) if row.request_id is not None else None
        return run_refusal(self.runtime.keyring, row, request, gated=gated)

    def _fall_back(self, row: CallRow, tool: Tool, outcome: Outcome) -> tuple[Outcome, str]:
        """The call failed for good: try the next tool of its chain, each try audited on the
        same call, until one answers. Gated tools are never fallen back to: that would run
        them without their approval."""
        chain = json.loads(row.chain) if row.chain else list(tool.spec.fallbacks)
        args, answered = row.arguments, row.tool
        for name in chain:
            fallback = self.registry.get(name)
            if fallback is None or fallback.spec.gated or name == answered:
                continue
            with self.store.transaction() as conn:
                self.audit.append(
                    conn,
                    [
                        AuditEntry(
                            event=AuditEvent.ERROR,
                            actor=self.actor,
                            tool=answered,
                            call_id=row.id,
                            detail={
                                "attempt": row.attempt,
                                "error": outcome.error,
                                "error_type": outcome.error_type,
                                "fallback": name,
                            },
                        )
                    ],
                    at=self.clock(),
                )
            answered = name
            problem = fallback.argument_errors(args)
            if problem is not None:
                outcome = Outcome(
                    ok=False, error=f"invalid arguments: {problem}", error_type="InvalidArguments"
                )
                continue
            ctx = CallContext(
                call_id=row.id,
                idempotency_key=row.idempotency_key or row.id,
                attempt=row.attempt,
                requested_by=row.requested_by,
                tool=name,
            )
            with limits.handler():
                outcome = self._invoke(fallback, args, ctx)
            if outcome.ok:
                break
        return outcome, answered

    def _invoke(self, tool: Tool, args: dict[str, Any], ctx: CallContext) -> Outcome:
        """Run the handler; its error, stored and audited, never carries a config secret."""
        outcome = invoke(tool, args, ctx, mcp=self.runtime.mcp, max_nesting=self.max_nesting)
        if outcome.error is None or not self.redact:
            return outcome
        return dataclasses.replace(outcome, error=self.redact(outcome.error))

    def _defer(self, tool: Tool, call_id: str, wait_s: float) -> str:
        due_at = self.clock() + int(wait_s * 1000)
        self.runtime.publisher.publish([message_for(tool, call_id, countdown=wait_s)])
        with self.store.transaction() as conn:
            self.store.defer(conn, call_id, due_at=due_at)
        return "deferred"

    def _retry_later(self, tool: Tool, row: CallRow, outcome: Outcome) -> str:
        """Put the call back in its queue after a backoff; the retry is audited."""
        now = self.clock()
        delay = backoff_s(tool, row.attempt, outcome)
        due_at = now + int(delay * 1000)
        with self.store.transaction() as conn:
            if not self.store.retry_later(
                conn, row.id, attempt=row.attempt, now=now, due_at=due_at
            ):
                return "fenced"
            self.audit.append(
                conn,
                [
                    AuditEntry(
                        event=AuditEvent.RETRY,
                        actor=self.actor,
                        tool=row.tool,
                        call_id=row.id,
                        request_id=row.request_id,
                        detail={
                            "attempt": row.attempt,
                            "error": outcome.error,
                            "error_type": outcome.error_type,
                            "delay_s": round(delay, 3),
                        },
                    )
                ],
                at=now,
            )
        try:
            self.runtime.publisher.publish([message_for(tool, row.id, countdown=delay)])
        except Unavailable as exc:
            # Queued and due at ``due_at``: the reconciler sends it once Redis is back.
            log.warning("retry of %s not published: %s", row.id, exc)
        return "retry"

    def finish(
        self,
        row: CallRow,
        outcome: Outcome,
        *,
        status: CallStatus | None = None,
        event: AuditEvent | None = None,
        cached: bool = False,
        answered_by: str | None = None,
    ) -> str:
        """Record ``outcome`` for ``row``'s attempt; "fenced" if that attempt lost the call.
        In a shared message the outcome may be held, to be committed with those after it."""
        if status is None:
            status = CallStatus.SUCCEEDED if outcome.ok else CallStatus.FAILED
        if event is None:
            event = AuditEvent.OK if outcome.ok else AuditEvent.ERROR
        done = Finished(row, outcome, status, event, self.clock(), cached, answered_by)
        if self._held is not None:
            self._held.append(done)
        elif self._commit([done]):
            return "fenced"
        return "ok" if outcome.ok else "error"

    def _commit(
        self,
        finished: Sequence[Finished],
        claim: Sequence[str] = (),
        renew: Sequence[CallRow] = (),
        tool_hint: str | None = None,
    ) -> list[str]:
        """Record ``finished``, claim ``claim`` and renew the leases of ``renew`` in one
        transaction, then announce the outcomes that landed. Returns the ids of the calls
        whose outcome was fenced off: their attempt lost the call meanwhile."""
        now = self.clock()
        with self.store.transaction() as conn:
            landed = [done for done in finished if self._land(conn, done)]
            # Before the audit append: the chain's lock, which every append in every
            # process waits for, is then held for the append and the commit alone. And
            # every writer takes its call rows' locks before the chain's, so none waits
            # for a row while holding the chain (a cancel of a call claimed here would).
            claimed = {call_id: self._claim(conn, call_id, tool_hint) for call_id in claim}
            renewed = {row.id: self._renew(conn, row, now) for row in renew}
            self.audit.append(conn, [done.audit_entry(self.actor) for done in landed], at=now)
        # Only once the transaction is committed: a rolled-back claim is no claim.
        self._claimed_ahead.update(claimed)
        for call_id, row in renewed.items():
            digest = self._claimed_ahead.get(call_id, (None, None))[1]
            self._claimed_ahead[call_id] = (row, digest)  # None: lost meanwhile, dropped
        if landed:
            self._announce(landed)
        landed_ids = {done.row.id for done in landed}
        fenced = [done.row.id for done in finished if done.row.id not in landed_ids]
        for call_id in fenced:
            log.warning("call %s finished after losing its lease; outcome dropped", call_id)
        return fenced

    def _land(self, conn: Connection, done: Finished) -> bool:
        outcome = done.outcome
        return self.store.finish(
            conn,
            done.row.id,
            attempt=done.row.attempt,
            status=done.status,
            now=done.at,
            value=outcome.value_json,
            error=outcome.error,
            error_type=outcome.error_type,
            answered_by=done.answered_by,
        )

    def _renew(self, conn: Connection, row: CallRow, now: int) -> CallRow | None:
        lease_until = now + self.lease_ms(row.tool)
        if self.store.renew_lease(conn, row.id, attempt=row.attempt, lease_until=lease_until):
            return dataclasses.replace(row, lease_until=lease_until)
        return None

    def _announce(self, landed: Sequence[Finished]) -> None:
        """After the commit: the answers ride with the notifications (one round trip for
        all), so a caller's wait needs no read."""
        self.notifier.calls_done([(done.row.id, done.result()) for done in landed])
        for done in landed:
            tool = self.registry.get(done.row.tool)
            started_at = done.row.started_at
            metrics.call_finished(
                done.row.tool,
                str(done.status),
                (done.at - started_at) / 1000 if started_at is not None else None,
                0.0 if done.cached or tool is None else tool.spec.cost_per_call,
            )

    def fail_hard_timeout(self, call_id: str, attempt: int | None = None) -> None:
        """The handler ignored its soft limit and was killed: fail the call as timed out
        (only attempt ``attempt`` of it, when given)."""
        with self.store.reading() as conn:
            row = self.store.get(conn, call_id)
        tool = self.registry.get(row.tool) if row else None
        if row is None or row.status != CallStatus.RUNNING:
            return
        if attempt is not None and row.attempt != attempt:
            return
        timeout = tool.spec.timeout_s if tool else DEFAULT_TIMEOUT_S
        self.finish(row, Outcome.timed_out(timeout))

    def recover(self, row: CallRow) -> str:
        """A running call whose worker is gone: re-queue, interrupt or fail it as poison."""
        tool = self.registry.get(row.tool)
        now = self.clock()
        if tool is not None and tool.spec.idempotent and row.attempt < POISON_CAP:
            with self.store.transaction() as conn:
                if not self.store.requeue_lost(conn, row.id, attempt=row.attempt, now=now):
                    return "raced"
                self.audit.append(
                    conn,
                    [
                        AuditEntry(
                            event=AuditEvent.RETRY,
                            actor=self.actor,
                            tool=row.tool,
                            call_id=row.id,
                            detail={"attempt": row.attempt, "reason": "worker lost"},
                        )
                    ],
                    at=now,
                )
            try:
                self._publish_again([row])
            except Unavailable as exc:
                # Queued with no publish time: the reconciler sends it once Redis is back.
                log.warning("re-queued %s but could not publish it: %s", row.id, exc)
            return "requeued"
        if tool is not None and tool.spec.idempotent:
            outcome = Outcome(
                ok=False,
                error=f"poison call: its run was lost {row.attempt} times",
                error_type="PoisonCall",
            )
            return "poisoned" if self.finish(row, outcome) != "fenced" else "raced"
        return self._interrupt(row)

    def _interrupt(self, row: CallRow) -> str:
        # Not idempotent: the outcome is unknown and a human must look; never re-run it.
        outcome = Outcome(
            ok=False, error="worker lost during the run; outcome unknown", error_type="WorkerLost"
        )
        landed = self.finish(
            row, outcome, status=CallStatus.INTERRUPTED, event=AuditEvent.INTERRUPTED
        )
        return "raced" if landed == "fenced" else "interrupted"

    def reap(self, limit: int = 500) -> dict[str, int]:
        """Recover every running call whose lease has run out."""
        with self.store.reading() as conn:
            lost = self.store.lost_runs(conn, now=self.clock(), limit=limit)
        counts: dict[str, int] = {}
        for row in lost:
            what = self.recover(row)
            counts[what] = counts.get(what, 0) + 1
        return counts

    def reconcile(self, limit: int = 1000) -> int:
        """Publish again the queued calls nobody claimed: heals lost messages and Redis restarts."""
        cutoff = self.clock() - int(self.runtime.settings.requeue_after_s * 1000)
        with self.store.reading() as conn:
            stale = self.store.stale_queued(conn, published_before=cutoff, limit=limit)
        return self._publish_again(stale)
