"""The dispatcher: checks a call, stores it, audits it, and publishes it to its risk queue.

Dispatch never throws. Every path out of ``submit`` is a ``CallResult``: unknown tool,
invalid arguments, an idempotent replay, a gated call's pending request, a queued call,
or ``unavailable`` when the database or the broker is down. The approval gate and the
audit write are the product's rules, so they are spelled out here rather than in hooks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..approval import requests as pending
from ..audit import entries
from ..audit.log import AuditEntry, AuditLog
from ..auth.keys import principal_named
from ..canonical import nested_deeper_than, too_deep_message
from ..clock import Clock, wall_clock_ms
from ..db.store import Store
from ..errors import BrokerUnavailable, Unavailable
from ..messaging.publisher import Publisher
from ..names import echo_name
from ..notify.announce import Announced, Announcer
from ..notify.model import NotifyEvent
from ..results import CallResult, internal_error, unavailable
from ..status import AuditEvent
from ..tools.registry import ToolRegistry
from ..trust.keyring import KeyRing
from .checks import Checked, Checks, Refused, rejection
from .keyed import KeyedCalls
from .new_call import NewCall, new_call
from .submission import Submission, told_later

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Choice:
    """Where a call by capability goes: the tool, its fallback chain, and every ranked
    tool that takes the arguments."""

    tool: str
    chain: list[str]
    usable: tuple[str, ...]


class Dispatcher:
    """Takes calls from agents (HTTP, MCP, the Python client all come through here)."""

    def __init__(
        self,
        store: Store,
        registry: ToolRegistry,
        publisher: Publisher,
        audit: AuditLog,
        keyring: KeyRing,
        *,
        clock: Clock = wall_clock_ms,
        max_args_bytes: int = 256 * 1024,
        max_nesting: int = 64,
        announcer: Announcer | None = None,
    ) -> None:
        self.store, self.registry, self.publisher = store, registry, publisher
        self.announcer = announcer
        self.audit, self.keyring = audit, keyring
        self.clock = clock
        self.max_nesting = max_nesting
        self.keyed = KeyedCalls(store, max_nesting)
        self.checks = Checks(
            registry,
            max_args_bytes=max_args_bytes,
            max_nesting=max_nesting,
            roles_of=self.roles_of,
        )

    def submit(
        self,
        requested_by: str,
        tool: object,
        args: object,
        idempotency_key: str | None = None,
        *,
        chain: Sequence[str] = (),
    ) -> CallResult:
        """Accept one call. Never raises. ``chain``: tools to fall back along (capability calls)."""
        try:
            return self._submit(requested_by, tool, args, idempotency_key, chain)
        except Unavailable as exc:
            return unavailable(str(exc), tool=echo_name(tool))
        except Exception as exc:
            log.exception("dispatch failed unexpectedly")
            return unavailable(internal_error(exc), tool=echo_name(tool))

    def _submit(
        self,
        requested_by: str,
        name: object,
        args: object,
        idempotency_key: str | None,
        chain: Sequence[str] = (),
    ) -> CallResult:
        checked = self.check(requested_by, name, args, idempotency_key)
        if isinstance(checked, Refused):
            stored = self.keyed.retry_of_refused(requested_by, name, args, idempotency_key, checked)
            if stored is not None:
                return stored
            if checked.audit is not None:
                # Rejected calls are not stored as calls, but the attempt is audited.
                with self.store.transaction() as conn:
                    self.audit.append(conn, [checked.audit], at=self.clock())
            return checked.result
        if idempotency_key is not None:
            replay = self.keyed.replay(requested_by, checked)
            if replay is not None:
                return replay
        try:
            return self._accept(requested_by, checked, chain)
        except IntegrityError:
            # Two submissions with one idempotency key raced; the other one won.
            if idempotency_key is None:
                raise
            replay = self.keyed.replay(requested_by, checked)
            if replay is None:
                raise
            return replay

    def roles_of(self, name: str) -> frozenset[str]:
        """The key's current roles, for a tool whose rules read ``roles``; read only then."""
        with self.store.reading() as conn:
            who = principal_named(conn, name, self.keyring)
        return who.roles if who is not None else frozenset()

    def check(
        self, requested_by: str, name: object, args: object, idempotency_key: str | None
    ) -> Checked | Refused:
        """``Checks.check``: what needs no database."""
        return self.checks.check(requested_by, name, args, idempotency_key)

    def new_call(
        self,
        requested_by: str,
        checked: Checked,
        *,
        now: int,
        batch_id: str | None = None,
        batch_index: int | None = None,
    ) -> NewCall:
        """The rows that accept ``checked`` (``dispatch.new_call``)."""
        return new_call(
            requested_by,
            checked,
            now=now,
            keyring=self.keyring,
            batch_id=batch_id,
            batch_index=batch_index,
        )

    def store_new(
        self, conn: Connection, new: Sequence[NewCall], entries: Sequence[AuditEntry], *, at: int
    ) -> None:
        """Insert accepted calls, their requests and the audit rows ``entries`` (which the
        caller orders; it includes the new calls' own entries) in the caller's transaction."""
        if new:
            self.store.insert(conn, [item.row for item in new])
            pending.insert(conn, [item.request for item in new if item.request is not None])
        self.audit.append(conn, list(entries), at=at)

    def announce_pending(self, new: Sequence[NewCall]) -> None:
        """Notify the approvers of the committed calls' requests (``router.notify``); never
        raises and never waits."""
        if self.announcer is None:
            return
        requests = [
            Announced(item.request["id"], item.request["tool"], item.request_approvers)
            for item in new
            if item.request is not None
        ]
        if requests:
            self.announcer.announce(NotifyEvent.PENDING, requests)

    def _accept(self, requested_by: str, checked: Checked, chain: Sequence[str] = ()) -> CallResult:
        now = self.clock()
        # published_at is set before the publish: if this process dies in between, the
        # reconciler sees an old publish time and sends it again.
        new = self.new_call(requested_by, checked, now=now)
        if chain:
            new.row["chain"] = json.dumps(list(chain))
        with self.store.transaction() as conn:
            self.store_new(conn, [new], [new.audit], at=now)
        if new.message is None:
            self.announce_pending([new])
            return new.result
        # Enqueue after commit: the row exists before any worker can look for it.
        try:
            self.publisher.publish([new.message])
        except BrokerUnavailable as exc:
            assert new.result.call_id is not None
            return self._fail_unpublished(
                requested_by, checked.tool.name, new.result.call_id, str(exc)
            )
        return new.result

    def submit_many(self, items: Sequence[Submission]) -> list[CallResult]:
        """Accept independent calls that arrived together (concurrent single submissions to
        one API process) in one transaction and one publish. Never raises.

        Each call is answered exactly as ``submit`` would answer it alone: checked on its
        own, stored with its own audit row, refused or accepted on its own. Only the
        commit and the round trip to Redis are shared. Calls with an idempotency key go
        one by one after the group, since a replay or a racing duplicate must be settled
        against what is already stored.
        """
        results: list[CallResult | None] = [None] * len(items)
        together: list[tuple[int, NewCall | AuditEntry]] = []
        new: list[NewCall] = []
        try:
            now = self.clock()
            for index, item in enumerate(items):
                if item.idempotency_key is not None:
                    continue
                checked = self.check(item.requested_by, item.tool, item.args, None)
                if isinstance(checked, Refused):
                    results[index] = checked.result
                    if checked.audit is not None:
                        together.append((index, checked.audit))
                    continue
                together.append((index, self.new_call(item.requested_by, checked, now=now)))
            new = [slot for _, slot in together if isinstance(slot, NewCall)]
            if together:
                entries = [
                    slot.audit if isinstance(slot, NewCall) else slot for _, slot in together
                ]
                with self.store.transaction(durable=not told_later(items, together)) as conn:
                    self.store_new(conn, new, entries, at=now)
        except Unavailable as exc:
            for index, _ in together:
                results[index] = unavailable(str(exc), tool=echo_name(items[index].tool))
            together, new = [], []
        except Exception:
            log.exception("grouped dispatch failed unexpectedly; submitting one by one")
            # Nothing of the group was committed (refusals' audit rows neither): each call
            # goes alone, answered and audited on its own.
            alone = {index for index, _ in together}
            for index, item in enumerate(items):
                if item.idempotency_key is None and (results[index] is None or index in alone):
                    results[index] = self.submit(*item.fields)
            together, new = [], []
        # Committed: from here on every accepted call is answered, never submitted again,
        # and what goes wrong for one call is that call's answer alone.
        unpublished = self._publish_committed(new)
        self.announce_pending(new)
        for index, slot in together:
            if isinstance(slot, NewCall):
                results[index] = self._answer_committed(
                    items[index].requested_by, slot.result, unpublished
                )
        for index, item in enumerate(items):
            if item.idempotency_key is not None:
                results[index] = self.submit(*item.fields)
        return [
            result or unavailable("internal error: no answer", tool=echo_name(item.tool))
            for result, item in zip(results, items, strict=True)
        ]

    def _publish_committed(self, new: Sequence[NewCall]) -> dict[str, str]:
        """Publish the messages of committed calls, as one pipeline; the calls whose
        message may not have gone out, with why."""
        messages = [item.message for item in new if item.message is not None]
        if not messages:
            return {}
        try:
            self.publisher.publish(messages)
        except BrokerUnavailable as exc:
            return {message.call_id: str(exc) for message in messages}
        except Exception as exc:
            log.exception("publishing a group failed unexpectedly")
            error = f"unavailable: {internal_error(exc)}"
            return {message.call_id: error for message in messages}
        return {}

    def _answer_committed(
        self, actor: str, result: CallResult, unpublished: dict[str, str]
    ) -> CallResult:
        """A committed call's answer: as accepted, or failed if its message did not go out."""
        assert result.call_id is not None and result.tool is not None
        if result.call_id not in unpublished:
            return result
        try:
            return self._fail_unpublished(
                actor, result.tool, result.call_id, unpublished[result.call_id]
            )
        except Unavailable as exc:
            return unavailable(str(exc), tool=result.tool)
        except Exception as exc:
            log.exception("failing an unpublished call failed unexpectedly")
            return unavailable(internal_error(exc), tool=result.tool)

    def submit_by_capability(
        self,
        requested_by: str,
        capability: str,
        ranked: Sequence[str],
        args: object,
        idempotency_key: str | None = None,
    ) -> CallResult:
        """A call by capability: the best-ranked tool that takes these arguments runs it,
        the rest of the ranking (ungated tools only) is its fallback chain. Never raises."""
        try:
            ordered = self.keyed.capability_order(requested_by, ranked, args, idempotency_key)
        except Unavailable as exc:
            return unavailable(str(exc), tool=f"capability:{echo_name(capability)}")
        if isinstance(ordered, CallResult):
            return ordered
        chosen = self.choose_by_capability(requested_by, capability, ordered, args)
        if isinstance(chosen, Refused):
            return self._refuse(chosen)
        return self.submit(requested_by, chosen.tool, args, idempotency_key, chain=chosen.chain)

    def choose_by_capability(
        self, requested_by: str, capability: str, ranked: Sequence[str], args: object
    ) -> Choice | Refused:
        """The tool a call by capability goes to and its fallback chain, or its refusal."""
        label = f"capability:{echo_name(capability)}"
        if isinstance(args, dict) and nested_deeper_than(args, self.max_nesting):
            too_deep = too_deep_message("arguments", self.max_nesting)
            return rejection(
                requested_by, label, AuditEvent.INVALID, f"invalid arguments: {too_deep}"
            )
        usable = [
            name
            for name in ranked
            if (tool := self.registry.get(name)) is not None
            and isinstance(args, dict)
            and tool.argument_errors(args) is None
        ]
        if not usable:
            shown = echo_name(capability)
            why = (
                f"with capability {shown} takes these arguments"
                if ranked
                else f"declares capability {shown}"
            )
            return rejection(requested_by, label, AuditEvent.UNKNOWN, f"no tool {why}")
        first, rest = usable[0], usable[1:]
        chain = [name for name in rest if not self.registry.get(name).spec.gated]  # type: ignore[union-attr]
        return Choice(first, chain, tuple(usable))

    def _refuse(self, refused: Refused) -> CallResult:
        """Audit a refusal on its own and answer it. Never raises."""
        try:
            with self.store.transaction() as conn:
                self.audit.append(conn, [refused.audit] if refused.audit else [], at=self.clock())
        except Unavailable as exc:
            return unavailable(str(exc), tool=refused.result.tool)
        return refused.result

    def _fail_unpublished(self, actor: str, tool: str, call_id: str, error: str) -> CallResult:
        """The broker refused the message: fail the call now rather than run it behind the
        caller's back after telling them 503."""
        now = self.clock()
        with self.store.transaction() as conn:
            if not self.store.fail_unclaimed(conn, call_id, now=now, error=error):
                # A worker has it after all (the message went out before the error):
                # answer with where the call stands, not a 503 for a call that runs.
                row = self.store.get(conn, call_id)
                if row is not None:
                    return row.result()
            else:
                self.audit.append(
                    conn,
                    [entries.unpublished(actor=actor, tool=tool, call_id=call_id, error=error)],
                    at=now,
                )
        return unavailable(error, tool=tool)
