"""Runs of the calls of one shared message, each under its own time limits.

A message may carry several calls of one tool (``message_builder.pack``). They run in
turn, each under its own soft and hard limit (``workers.call_limits``), and each is
claimed only when its run of calls comes up, so the calls further on stay queued: if
this process dies they are published again, and a worker that claims one first takes
it over. A run is claimed in the transaction that records the outcomes before it, so a
claim needs no transaction of its own. For an idempotent tool a run is as many calls as
this process lately finished within ``outcome_hold_ms`` (``workers.pace``), and their
outcomes are held and committed together.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence

from router.db.rows import CallRow
from router.tools.registry import Tool, is_idempotent

from ..pace import pace
from .call_runner import CallRunner
from .ledger import Ledger
from .recovery import Recovery
from .run_outcome import NOT_RUN, RunOutcome

log = logging.getLogger(__name__)

# A call claimed ahead in a shared message whose lease has run this long by the time the
# calls before it are done gets its lease renewed before its turn (a slow call before it).
RENEW_AFTER_MS = 1000


class SharedMessageRunner:
    """Runs the calls of one message through ``calls``, holding outcomes in ``ledger``."""

    def __init__(self, ledger: Ledger, calls: CallRunner, recovery: Recovery) -> None:
        self.ledger, self.calls, self.recovery = ledger, calls, recovery
        self.runtime, self.registry = ledger.runtime, ledger.registry
        self.store, self.clock = ledger.store, ledger.clock
        # When (monotonic) the oldest outcome held was held; None: nothing held.
        self._held_since: float | None = None

    def outcome_hold_ms(self, tool: Tool | None) -> float:
        """How long outcomes of ``tool`` may be held in a shared message. Idempotent tools
        only: outcomes held are lost with their process (a kill, a crash), and the reaper
        runs a lost call of an idempotent tool again, while one of any other tool would
        become ``interrupted`` although its run had ended. Not for a rate-limited tool,
        whose calls are each claimed on their own."""
        if not is_idempotent(tool) or tool.spec.rate_limit:
            return 0.0
        return self.runtime.settings.outcome_hold_ms

    def run_many(self, call_ids: Sequence[str], tool_hint: str | None) -> list[RunOutcome]:
        """Run the calls of one message in turn; what became of each, in order.

        Held outcomes are committed when their run ends, or sooner once the oldest has
        been held for ``outcome_hold_ms``."""
        tool = self.registry.get(tool_hint)
        # A rate-limited tool's calls each ask the limiter first, before their claim.
        ahead = tool is None or not tool.spec.rate_limit
        hold_ms = self.outcome_hold_ms(tool)
        run_length = pace.calls_within(tool.name, hold_ms, len(call_ids)) if tool else 1
        positions = {call_id: index for index, call_id in enumerate(call_ids)}
        done: list[RunOutcome] = []
        claimed_ahead = self.ledger.claimed_ahead
        self.ledger.held, self._held_since = [], None
        try:
            for index, call_id in enumerate(call_ids):
                if ahead and call_id not in claimed_ahead:
                    # Its run is claimed with the outcomes held so far.
                    claim = call_ids[index : index + run_length]
                    self._try_commit_held(done, positions, claim, tool_hint)
                on_hard = functools.partial(self.at_hard_timeout, call_id, call_ids[index + 1 :])
                started = time.monotonic()
                try:
                    done.append(self.calls.run_within_limits(call_id, tool_hint, on_hard))
                except Exception:
                    # This call's trouble (the database or Redis gone): it stays queued or
                    # running, for the reconciler or the reaper, as with a message of its
                    # own. The calls after it are independent of it.
                    log.exception("call %s of a shared message did not run", call_id)
                    done.append(RunOutcome.FAILED)
                ended = time.monotonic()
                if tool is not None and done[-1] not in NOT_RUN:
                    pace.observe(tool.name, (ended - started) * 1000)
                if self.ledger.held and self._held_since is None:
                    self._held_since = ended
                following = call_ids[index + 1] if index + 1 < len(call_ids) else None
                if ahead and following is not None and following not in claimed_ahead:
                    continue  # the next call's claim commits what is held
                # Were the next call to take as long as this one, would the oldest outcome
                # held have waited too long by its end? Then it is committed first.
                stale = following is not None and self._claims_to_renew(following)
                if stale or self._oldest_held_ms(ended + (ended - started)) >= hold_ms:
                    self._try_commit_held(done, positions)
        finally:
            try:
                self._try_commit_held(done, positions, last=True)
            finally:
                self.ledger.held = None
                # Nothing is claimed ahead after the last call, unless the loop was cut
                # short (a warm shutdown's exception, say): such calls go back to the queue.
                self._requeue_claimed_ahead()
        return done

    def at_hard_timeout(self, call_id: str, unstarted: Sequence[str]) -> None:
        """``call_id`` ignored its soft limit and its process is about to end: first the
        outcomes held are committed and the calls after it go back to the queue, then it
        is recorded as timed out."""
        try:
            self._commit_held()
            self._requeue_claimed_ahead()
            self.recovery.republish(unstarted)
        finally:
            self.ledger.held = None  # from here on, an outcome is committed as it comes
            self.calls.record_timeout(call_id)

    def _oldest_held_ms(self, when: float) -> float:
        """How long the oldest outcome held will have been held at ``when``, in ms."""
        since = self._held_since
        return -1.0 if since is None else (when - since) * 1000

    def _claims_to_renew(self, call_id: str | None = None) -> list[CallRow]:
        """Calls claimed ahead (``call_id`` alone, when given) whose lease has run for more
        than ``RENEW_AFTER_MS``: the calls before them took longer than their pace."""
        now = self.clock()
        claimed_ahead = self.ledger.claimed_ahead
        rows = (
            [row for row, _ in claimed_ahead.values()]
            if call_id is None
            else [claimed_ahead.get(call_id, (None, None))[0]]
        )
        return [
            row
            for row in rows
            if row is not None
            and row.lease_until is not None
            and row.lease_until - now < self.ledger.lease_ms(row.tool) - RENEW_AFTER_MS
        ]

    def _try_commit_held(
        self,
        done: list[RunOutcome],
        positions: dict[str, int],
        claim: Sequence[str] = (),
        tool_hint: str | None = None,
        *,
        last: bool = False,
    ) -> None:
        """``_commit_held``, with the calls it finds fenced marked in ``done``. If the
        database does not answer, the outcomes stay held for the next try; after the
        ``last`` one their calls stay running, and the reaper recovers them as lost runs."""
        try:
            for call_id in self._commit_held(claim, tool_hint, last=last):
                done[positions[call_id]] = RunOutcome.FENCED
        except Exception:
            held = [outcome.row.id for outcome in self.ledger.held or ()]
            log.exception("could not record the outcomes of %s", ", ".join(held) or "no call")
            if last:
                for call_id in held:
                    done[positions[call_id]] = RunOutcome.FAILED
                self.ledger.held = []

    def _commit_held(
        self, claim: Sequence[str] = (), tool_hint: str | None = None, *, last: bool = False
    ) -> list[str]:
        """Commit the held outcomes, claim ``claim`` and renew the claims ahead whose lease
        has run long (``_claims_to_renew``), in one transaction; the ids of held calls
        fenced off. The ``last`` try waits out a brief outage: no later one would."""
        held = list(self.ledger.held or ())
        stale = [] if claim else self._claims_to_renew()
        if not held and not claim and not stale:
            return []
        if last:  # the last try claims nothing
            fenced = self.ledger.commit_finished(held, renew=stale)
        else:
            fenced = self.ledger.commit(held, claim, stale, tool_hint)
        if self.ledger.held is not None:
            del self.ledger.held[: len(held)]
        self._held_since = None
        return fenced

    def _requeue_claimed_ahead(self) -> None:
        """A call claimed with the last outcome but not started goes back to ``queued``
        (fenced on its claim), so the process's end does not leave it for the reaper."""
        claimed_ahead = self.ledger.claimed_ahead
        if not claimed_ahead:
            return
        now = self.clock()
        for row, _ in list(claimed_ahead.values()):
            if row is not None:
                with self.store.transaction() as conn:
                    self.store.requeue_lost(conn, row.id, fence=row.fence, now=now)
        claimed_ahead.clear()
