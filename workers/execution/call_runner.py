"""One run of one call: claim it, check it may run, invoke its handler, record the outcome.

The order of a run in one place: the claim (or the claim made ahead by a shared message),
the approval check, the result cache, the handler under its soft limit, then a retry
after a backoff, a fallback along the tool's chain, or the outcome recorded
(``ledger``). Policies are small functions beside it (``workers.policies``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from router import metrics
from router.audit import entries
from router.context import CallContext
from router.db.rows import CallRow, Fence
from router.errors import Unavailable
from router.messaging.policies import fallback_chain
from router.messaging.run_message import Precedence, message_for
from router.metrics import Tampered, Untrusted
from router.status import CallStatus
from router.tools.registry import Tool, is_idempotent

from ..call_limits import limits
from ..handlers import Outcome, invoke
from ..handlers.outcome import ERROR_MAX, SECRET_IN_RESULT
from ..policies import Limiter, ResultCache, backoff_s, should_retry
from .ledger import Ledger, timeout_of
from .run_outcome import RunOutcome

log = logging.getLogger(__name__)


class CallRunner:
    """Runs one call at a time, recording through ``ledger``."""

    def __init__(self, ledger: Ledger) -> None:
        runtime = ledger.runtime
        self.ledger, self.runtime, self.actor = ledger, runtime, ledger.actor
        self.store, self.registry, self.clock = ledger.store, ledger.registry, ledger.clock
        self.audit = ledger.audit
        self.max_nesting = runtime.settings.max_nesting
        self.max_result_bytes = runtime.settings.max_result_bytes
        self.redact = runtime.redactor
        client = ledger.notifier.client
        self.limiter = Limiter(client, runtime.namespace)
        self.cache = ResultCache(client, runtime.namespace, runtime.keyring, clock=self.clock)
        # The call this runner claimed last, and its claim: a timeout is recorded against
        # that claim alone.
        self.last_claim: tuple[str, Fence] | None = None

    def run_within_limits(
        self,
        call_id: str,
        tool_hint: str | None,
        on_hard: Callable[[], None] | None = None,
    ) -> RunOutcome:
        """``run`` under the call's own time limits (``workers.call_limits``), whether it
        is alone in its message or one of a shared message's calls: the soft limit
        interrupts only the handler, never the claim or the commit of an outcome the
        handler has already produced. ``on_hard`` is what the watchdog does at the hard
        limit before it ends the process; by default the call is recorded as timed out."""
        self.last_claim = None
        timeout = timeout_of(self.registry.get(tool_hint))
        grace = self.runtime.publisher.hard_limit_grace_s
        on_hard = on_hard or functools.partial(self.record_timeout, call_id)
        try:
            with limits.applied(timeout, grace, on_hard):
                return self.run(call_id, tool_hint)
        except SoftTimeLimitExceeded:
            # Struck just before the handler started or as it returned, outside what the
            # handler adapters catch: the call timed out all the same.
            self.record_timeout(call_id)
            return RunOutcome.ERROR

    def run(self, call_id: str, tool_hint: str | None) -> RunOutcome:
        """Run one call if it is still queued. Returns what happened, for the worker log.
        In a shared message, its outcome may be held (``shared_message``)."""
        if call_id in self.ledger.claimed_ahead:
            row, refusal = self.ledger.claimed_ahead.pop(call_id)
        else:
            hinted = self.registry.get(tool_hint)
            if hinted is not None and hinted.spec.rate_limit:
                wait = self.limiter.wait_s(hinted)
                if wait > 0:
                    # Over the limit: the call waits in the broker, not in a worker slot.
                    return self._defer(hinted, call_id, wait)
            # An idempotent tool's claim need not wait for the disk: undone by a database
            # crash, the call is queued again and re-run, as after a lost worker. (Only a
            # call of the tool its message names is claimed.)
            with self.store.transaction(durable=not is_idempotent(hinted)) as conn:
                row, refusal = self.ledger.claim(conn, call_id, tool_hint)
        if row is None:
            return self._unclaimed(call_id, tool_hint)
        self.last_claim = (row.id, row.fence)
        tool = self.registry.get(row.tool)
        if refusal is not None:
            # Run only what was accepted and, if gated, released for exactly this call.
            log.error("call %s refused: %s", row.id, refusal.error)
            metrics.tampered(Tampered.CALL)
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
                return self.ledger.finish(row, Outcome(ok=True, value_json=cached), cached=True)
            with limits.handler():
                outcome = self._invoke(tool, row.arguments, ctx)
            if outcome.ok and outcome.value_json is not None:
                # The cache holds values only: content blocks would come back without them.
                if outcome.content_json is None:
                    self.cache.put(tool, row.args_sha256, outcome.value_json)
            elif outcome.error_type == SECRET_IN_RESULT:
                pass  # the handler ran: nothing runs it, or another tool, again
            elif should_retry(tool, row.attempt, outcome):
                return self._retry_later(tool, row, outcome)
            elif row.chain or tool.spec.fallbacks:
                outcome, answered_by = self._fall_back(row, tool, outcome)
                return self.ledger.finish(row, outcome, answered_by=answered_by)
        return self.ledger.finish(row, outcome)

    def record_timeout(self, call_id: str) -> None:
        """Fail ``call_id`` as timed out if this runner claimed it last and that claim still
        holds."""
        last_claim = self.last_claim
        if last_claim is not None and last_claim[0] == call_id:
            self.fail_hard_timeout(call_id, fence=last_claim[1])

    def fail_hard_timeout(self, call_id: str, fence: Fence | None = None) -> None:
        """The handler ignored its soft limit and was killed: fail the call as timed out
        (only while the claim ``fence`` holds it, when given)."""
        with self.store.reading() as conn:
            row = self.store.get(conn, call_id)
        tool = self.registry.get(row.tool) if row else None
        if row is None or row.status != CallStatus.RUNNING:
            return
        if fence is not None and row.fence != fence:
            return
        self.ledger.finish(row, Outcome.timed_out(timeout_of(tool)))

    def _fall_back(self, row: CallRow, tool: Tool, outcome: Outcome) -> tuple[Outcome, str]:
        """The call failed for good: try the next tool of its chain, each try audited on the
        same call, until one answers. Gated tools are never fallen back to, nor a tool whose
        rules refuse or would gate these arguments: that would run them without approval.
        A tool not tried answers nothing: the error stays the last run's, with why."""
        chain = fallback_chain(self.registry, tool, json.loads(row.chain) if row.chain else None)
        args, answered = row.arguments, row.tool
        not_tried: list[str] = []
        for fallback in chain:
            name = fallback.name
            with self.store.transaction() as conn:
                self.audit.append(
                    conn,
                    [
                        entries.fell_back(
                            actor=self.actor,
                            tool=answered,
                            call_id=row.id,
                            attempt=row.attempt,
                            error=outcome.error,
                            error_type=outcome.error_type,
                            fallback=name,
                            ran_ms=outcome.ran_ms,
                        )
                    ],
                    at=self.clock(),
                )
                why_not = self.ledger.why_not_fallback(conn, fallback, args, row.requested_by)
            if why_not is not None:
                not_tried.append(f"fallback {name} not tried: {why_not}")
                continue
            answered = name
            ctx = CallContext(
                call_id=row.id,
                idempotency_key=row.idempotency_key or row.id,
                attempt=row.attempt,
                requested_by=row.requested_by,
                tool=name,
            )
            with limits.handler():
                outcome = self._invoke(fallback, args, ctx)
            if outcome.ok or outcome.error_type == SECRET_IN_RESULT:
                break
        if not outcome.ok and not_tried:
            error = "; ".join([outcome.error or "failed", *not_tried])[:ERROR_MAX]
            outcome = dataclasses.replace(outcome, error=error)
        return outcome, answered

    def _invoke(self, tool: Tool, args: dict[str, Any], ctx: CallContext) -> Outcome:
        """Run the handler, timed (the tool's measured latency); neither its value nor its
        error, stored, audited and answered, carries a config secret (a service may echo
        the header it was sent), and the error is cut to ``ERROR_MAX`` characters."""
        started = time.monotonic()
        outcome = invoke(
            tool,
            args,
            ctx,
            mcp=self.runtime.mcp,
            max_nesting=self.max_nesting,
            max_result_bytes=self.max_result_bytes,
            redact=self.redact or str,
        )
        ran_ms = round((time.monotonic() - started) * 1000)
        if outcome.error is None:
            return dataclasses.replace(_without_secrets(outcome, self.redact), ran_ms=ran_ms)
        # Replaced before the cut: a secret across it would be left in part.
        error = (self.redact(outcome.error) if self.redact else outcome.error)[:ERROR_MAX]
        return dataclasses.replace(outcome, error=error, ran_ms=ran_ms)

    def _unclaimed(self, call_id: str, tool_hint: str | None) -> RunOutcome:
        """Why a message's call was not claimed. Mostly it is not queued any more (a
        duplicate or redelivered message, a cancelled call). Still queued, it is a call of
        another tool than the message names: no API process made that message, and its
        limits (time, lease, rate) are another tool's. The call stays queued, unrun, and a
        message of its own tool is sent for it."""
        with self.store.reading() as conn:
            row = self.store.get(conn, call_id)
        if row is None or row.status != CallStatus.QUEUED or row.tool == tool_hint:
            return RunOutcome.DROPPED
        log.error("call %s of %s came in a message for another tool", call_id, row.tool)
        metrics.untrusted(Untrusted.RUN_MESSAGE)
        tool = self.registry.get(row.tool)
        if tool is not None:
            try:
                message = message_for(tool, call_id, Precedence.of(row.batch_id, row.request_id))
                self.runtime.publisher.publish([message])
            except Unavailable as exc:
                log.warning("call %s not published again: %s", call_id, exc)  # the reconciler's
        return RunOutcome.MISNAMED

    def _defer(self, tool: Tool, call_id: str, wait_s: float) -> RunOutcome:
        """Send the call back to wait ``wait_s`` in the broker, still queued."""
        due_at = self.clock() + int(wait_s * 1000)
        with self.store.transaction() as conn:
            row = self.store.get(conn, call_id)
            self.store.defer(conn, call_id, due_at=due_at)
        # A countdown message waits in its list until a worker has room for it, and goes
        # back there if the worker stops: a batch's stays behind other calls.
        precedence = Precedence.of(row.batch_id, row.request_id) if row else Precedence.INTERACTIVE
        self.runtime.publisher.publish([message_for(tool, call_id, precedence, countdown=wait_s)])
        return RunOutcome.DEFERRED

    def _retry_later(self, tool: Tool, row: CallRow, outcome: Outcome) -> RunOutcome:
        """Put the call back in its queue after a backoff; the retry is audited."""
        now = self.clock()
        delay = backoff_s(tool, row.attempt, outcome)
        due_at = now + int(delay * 1000)
        with self.store.transaction() as conn:
            if not self.store.retry_later(conn, row.id, fence=row.fence, now=now, due_at=due_at):
                return RunOutcome.FENCED
            self.audit.append(
                conn,
                [
                    entries.retried(
                        actor=self.actor,
                        tool=row.tool,
                        call_id=row.id,
                        request_id=row.request_id,
                        attempt=row.attempt,
                        error=outcome.error,
                        error_type=outcome.error_type,
                        delay_s=round(delay, 3),
                    )
                ],
                at=now,
            )
        try:
            precedence = Precedence.of(row.batch_id, row.request_id)
            message = message_for(tool, row.id, precedence, countdown=delay)
            self.runtime.publisher.publish([message])
        except Unavailable as exc:
            # Queued and due at ``due_at``: the reconciler sends it once Redis is back.
            log.warning("retry of %s not published: %s", row.id, exc)
        return RunOutcome.RETRY


def _without_secrets(outcome: Outcome, redact: Callable[[str], str] | None) -> Outcome:
    """``outcome`` with each config secret in its value and content replaced by its name.
    Where a secret was not inside a string (a number, say), the text left is no JSON: the
    call fails rather than answer with the secret or with broken JSON."""
    if not redact:
        return outcome
    texts = (outcome.value_json, outcome.content_json)
    value, content = (redact(text) if text is not None else None for text in texts)
    if (value, content) == texts:
        return outcome
    try:
        for text in (value, content):
            if text is not None:
                json.loads(text)
    except ValueError:
        return Outcome(
            ok=False,
            error="the result holds a config secret outside any string; it is not shown",
            error_type=SECRET_IN_RESULT,
        )
    return dataclasses.replace(outcome, value_json=value, content_json=content)
