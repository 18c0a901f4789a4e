"""Running a call: claim it, run its handler once, record the outcome fenced on the attempt.

A plain class with no Celery in it (Celery's testing guide: test the logic "much like a
web view"); ``workers.tasks`` is the thin layer that calls it. Recovery of lost runs
lives here too, since it must agree with the claim and the fence.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy import Connection

from router import audit, metrics, pending
from router.audit import AuditEntry
from router.canonical import sha256_hex
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
from .policies import Limiter, ResultCache, backoff_s, should_retry

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0


class Executor:
    """Runs calls for one worker process; ``actor`` names it in the audit log."""

    def __init__(self, runtime: Runtime, notifier: Notifier, *, actor: str) -> None:
        self.runtime, self.notifier, self.actor = runtime, notifier, actor
        self.store, self.registry, self.clock = runtime.store, runtime.registry, runtime.clock
        self.limiter = Limiter(notifier.client)
        self.cache = ResultCache(notifier.client)
        # The call (id, attempt) this executor claimed last, in a shared message.
        self.claimed: tuple[str, int] | None = None
        # In a shared message, the next call is claimed in the transaction that records
        # the outcome of the one before (one transaction per call instead of two): its
        # row (None: not queued any more) and approved digest, until its turn comes.
        self._claimed_ahead: dict[str, tuple[CallRow | None, str | None]] = {}

    def lease_ms(self, tool_name: str | None) -> int:
        tool = self.registry.get(tool_name)
        timeout = tool.spec.timeout_s if tool else DEFAULT_TIMEOUT_S
        # The lease must outlast the hard time limit, or the reaper gives up on a run that
        # its worker is still about to kill (and re-runs it, if idempotent, in parallel);
        # in a shared message the kernel's backstop may come a little after it.
        hard_limit = timeout + self.runtime.publisher.hard_limit_grace_s + KERNEL_MARGIN_S
        return int((hard_limit + self.runtime.settings.lease_grace_s) * 1000)

    def run_many(self, call_ids: Sequence[str], tool_hint: str | None = None) -> list[str]:
        """Run the calls of one message in turn, each under its own time limits
        (``workers.call_limits``). A call is claimed only when its turn comes (in the
        transaction that records the outcome of the call before it), so calls further on
        are still queued: if this process dies they are published again, and a worker that
        claims one first takes it over."""
        tool = self.registry.get(tool_hint)
        timeout = tool.spec.timeout_s if tool else DEFAULT_TIMEOUT_S
        grace = self.runtime.publisher.hard_limit_grace_s
        # A rate-limited tool's calls each ask the limiter first, before their claim.
        ahead = tool is None or not tool.spec.rate_limit
        done: list[str] = []
        try:
            for index, call_id in enumerate(call_ids):
                self.claimed = None
                following = call_ids[index + 1] if ahead and index + 1 < len(call_ids) else None
                on_hard = functools.partial(self._hard_timeout, call_id, call_ids[index + 1 :])
                try:
                    with limits.applied(timeout, grace, on_hard):
                        done.append(self.run(call_id, tool_hint, claim_next=following))
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
        finally:
            # Nothing is claimed ahead after the last call, unless the loop was cut short
            # (a warm shutdown's exception, say): then that call goes back to the queue.
            self._release_claimed_ahead()
        return done

    def _record_timeout(self, call_id: str) -> None:
        """Fail ``call_id`` as timed out if this process's claim of it still holds."""
        claimed = self.claimed
        if claimed is not None and claimed[0] == call_id:
            self.fail_hard_timeout(call_id, attempt=claimed[1])

    def _hard_timeout(self, call_id: str, unstarted: Sequence[str]) -> None:
        """``call_id`` ignored its soft limit and its process is about to end: first the
        calls after it go back to the queue, then it is recorded as timed out."""
        try:
            self._release_claimed_ahead()
            self.republish(unstarted)
        finally:
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
        raises ``Unavailable`` when Redis is down (the reconciler then sends them)."""
        messages = [
            message_for(tool, row.id) for row in rows if (tool := self.registry.get(row.tool))
        ]
        if messages:
            self.runtime.publisher.publish(messages)
            with self.store.transaction() as conn:
                self.store.mark_published(conn, [m.call_id for m in messages], now=self.clock())
        return len(messages)

    def run(
        self, call_id: str, tool_hint: str | None = None, *, claim_next: str | None = None
    ) -> str:
        """Run one call if it is still queued. Returns what happened, for the worker log.
        ``claim_next``: the next call of a shared message, claimed with this one's outcome."""
        if call_id in self._claimed_ahead:
            row, approved_digest = self._claimed_ahead.pop(call_id)
        else:
            hinted = self.registry.get(tool_hint)
            if hinted is not None and hinted.spec.rate_limit:
                wait = self.limiter.wait_s(hinted)
                if wait > 0:
                    # Over the limit: the call waits in the broker, not in a worker slot.
                    return self._defer(hinted, call_id, wait)
            with self.store.transaction() as conn:
                row, approved_digest = self._claim(conn, call_id, tool_hint)
        if row is None:
            # Not queued any more: a duplicate or redelivered message, or a cancelled call.
            return "dropped"
        # Which attempt this process holds: a timeout is recorded against it alone.
        self.claimed = (row.id, row.attempt)
        tool = self.registry.get(row.tool)
        if sha256_hex(row.args) != (approved_digest or row.args_sha256):
            # Run only the arguments that were accepted (and, if gated, approved).
            outcome = Outcome(
                ok=False,
                error="arguments changed after they were accepted",
                error_type="TamperedArguments",
            )
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
                return self.finish(
                    row, Outcome(ok=True, value_json=cached), cached=True, claim_next=claim_next
                )
            with limits.handler():
                outcome = invoke(tool, row.arguments, ctx, mcp=self.runtime.mcp)
            if outcome.ok and outcome.value_json is not None:
                self.cache.put(tool, row.args_sha256, outcome.value_json)
            elif should_retry(tool, row.attempt, outcome):
                return self._retry_later(tool, row, outcome)
            elif row.chain or tool.spec.fallbacks:
                outcome, answered_by = self._fall_back(row, tool, outcome)
                return self.finish(row, outcome, answered_by=answered_by, claim_next=claim_next)
        return self.finish(row, outcome, claim_next=claim_next)

    def _claim(
        self, conn: Connection, call_id: str, tool_hint: str | None
    ) -> tuple[CallRow | None, str | None]:
        """``call_id``'s row if this process now runs it, with the digest its approver
        approved (None for an ungated call)."""
        row = self.store.claim(conn, call_id, now=self.clock(), lease_ms=self.lease_ms(tool_hint))
        return row, pending.approved_digest(conn, row.request_id) if row else None

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
                audit.append(
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
                outcome = invoke(fallback, args, ctx, mcp=self.runtime.mcp)
            if outcome.ok:
                break
        return outcome, answered

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
            audit.append(
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
        claim_next: str | None = None,
    ) -> str:
        """Record ``outcome`` for ``row``'s attempt; "fenced" if that attempt lost the call.
        ``claim_next`` is claimed in the same transaction (see ``_claimed_ahead``)."""
        now = self.clock()
        if status is None:
            status = CallStatus.SUCCEEDED if outcome.ok else CallStatus.FAILED
        if event is None:
            event = AuditEvent.OK if outcome.ok else AuditEvent.ERROR
        detail: dict[str, Any] = {"attempt": row.attempt}
        if cached:
            detail["cached"] = True
        if not outcome.ok:
            detail.update(error=outcome.error, error_type=outcome.error_type)
        with self.store.transaction() as conn:
            landed = self.store.finish(
                conn,
                row.id,
                attempt=row.attempt,
                status=status,
                now=now,
                value=outcome.value_json,
                error=outcome.error,
                error_type=outcome.error_type,
                answered_by=answered_by,
            )
            if claim_next is not None:
                # Before the audit append: the chain's lock, which every append in every
                # process waits for, is then held for the append and the commit alone. And
                # every writer takes its call rows' locks before the chain's, so none waits
                # for a row while holding the chain (a cancel of the next call would have).
                claimed = self._claim(conn, claim_next, row.tool)
            if landed:
                audit.append(
                    conn,
                    [
                        AuditEntry(
                            event=event,
                            actor=self.actor,
                            tool=answered_by or row.tool,
                            call_id=row.id,
                            request_id=row.request_id,
                            detail=detail,
                        )
                    ],
                    at=now,
                )
        if claim_next is not None:
            # Only once the transaction is committed: a rolled-back claim is no claim.
            self._claimed_ahead[claim_next] = claimed
        if not landed:
            log.warning(
                "call %s attempt %s finished after losing its lease; outcome dropped",
                row.id,
                row.attempt,
            )
            return "fenced"
        # The answer rides with the notification, so the caller's wait needs no read; a
        # value too large to ride is not decoded only to be dropped.
        value_json = outcome.value_json
        fits = value_json is None or len(value_json) <= MAX_RESULT_BYTES
        self.notifier.call_done(
            row.id,
            CallResult(
                status=status,
                tool=row.tool,
                call_id=row.id,
                value=None if value_json is None else json.loads(value_json),
                error=outcome.error,
                error_type=outcome.error_type,
                request_id=row.request_id,
                answered_by=answered_by,
            )
            if fits
            else None,
        )
        tool = self.registry.get(row.tool)
        metrics.call_finished(
            row.tool,
            str(status),
            (now - row.started_at) / 1000 if row.started_at is not None else None,
            0.0 if cached or tool is None else tool.spec.cost_per_call,
        )
        return "ok" if outcome.ok else "error"

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
                audit.append(
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
