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
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from . import pending
from .audit import AuditEntry, AuditLog
from .broker import Publisher, RunMessage
from .canonical import canonical_json, nested_deeper_than, sha256_hex, too_deep_message
from .clock import Clock, wall_clock_ms
from .errors import BrokerUnavailable, Unavailable
from .ids import new_call_id, new_request_id
from .keyring import KeyRing
from .registry import Tool, ToolRegistry
from .results import CallResult, error_message, rejected, unavailable
from .status import AuditEvent, CallStatus
from .store import CallRow, Store

log = logging.getLogger(__name__)

# Unknown names are echoed back and audited, but not at any length.
MAX_ECHOED_NAME = 128
IDEMPOTENCY_KEY_MAX = 256
TOO_LARGE = "arguments too large: "


def echo_name(name: object) -> str:
    """A caller-supplied name made safe to echo and to store: printable, and not too long."""
    text = name if isinstance(name, str) else json.dumps(name, default=repr)
    if not text.isprintable():
        text = json.dumps(text)[1:-1]  # escapes control characters and lone surrogates
    return text if len(text) <= MAX_ECHOED_NAME else text[:MAX_ECHOED_NAME] + "…"


@dataclass(frozen=True, slots=True)
class Checked:
    """A call that passed every check: its tool and its arguments in canonical form."""

    tool: Tool
    canonical: str
    digest: str
    idempotency_key: str | None


@dataclass(frozen=True, slots=True)
class Refused:
    """A call refused before storage. ``audit`` is set for rejections (unknown tool, invalid
    arguments), which are audited; malformed requests (413, 422) are not attempts."""

    result: CallResult
    audit: AuditEntry | None = None


@dataclass(frozen=True, slots=True)
class NewCall:
    """The rows and the message that accept one call."""

    row: dict[str, Any]
    request: dict[str, Any] | None
    audit: AuditEntry
    message: RunMessage | None

    @property
    def result(self) -> CallResult:
        """The answer to the submitter; built on demand (a batch never asks, per call)."""
        row = self.row
        return CallResult(
            status=row["status"], tool=row["tool"], call_id=row["id"], request_id=row["request_id"]
        )


@dataclass(frozen=True, slots=True)
class Submission:
    """One caller's call, as ``Dispatcher.submit`` takes it (for ``submit_many``)."""

    requested_by: str
    tool: object
    args: object
    idempotency_key: str | None = None


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
    ) -> None:
        self.store, self.registry, self.publisher = store, registry, publisher
        self.audit, self.keyring = audit, keyring
        self.clock = clock
        self.max_args_bytes = max_args_bytes
        self.max_nesting = max_nesting

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
            return unavailable(f"internal error: {error_message(exc)}", tool=echo_name(tool))

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
            if checked.audit is not None:
                # Rejected calls are not stored as calls, but the attempt is audited.
                with self.store.transaction() as conn:
                    self.audit.append(conn, [checked.audit], at=self.clock())
            return checked.result
        if idempotency_key is not None:
            replay = self._replay(requested_by, checked)
            if replay is not None:
                return replay
        try:
            return self._accept(requested_by, checked, chain)
        except IntegrityError:
            # Two submissions with one idempotency key raced; the other one won.
            if idempotency_key is None:
                raise
            replay = self._replay(requested_by, checked)
            if replay is None:
                raise
            return replay

    def check(
        self, requested_by: str, name: object, args: object, idempotency_key: str | None
    ) -> Checked | Refused:
        """Every check that needs no database: the tool, the arguments, the key's shape.

        Shared by single and bulk submission, so both refuse exactly the same calls.
        """
        tool = self.registry.get(name)
        if tool is None:
            label = echo_name(name)
            return _rejection(requested_by, label, AuditEvent.UNKNOWN, f"unknown tool: {label}")
        problem, canonical = self._check_arguments(tool, args)
        if problem is not None and problem.startswith(TOO_LARGE):
            return Refused(
                CallResult(status="bad_request", tool=tool.name, http_status=413, error=problem)
            )
        if problem is not None:
            return _rejection(
                requested_by, tool.name, AuditEvent.INVALID, f"invalid arguments: {problem}"
            )
        assert canonical is not None
        if idempotency_key is not None and (
            not idempotency_key or len(idempotency_key) > IDEMPOTENCY_KEY_MAX
        ):
            return Refused(
                CallResult(
                    status="bad_request",
                    tool=tool.name,
                    http_status=422,
                    error=f"idempotency key must be 1-{IDEMPOTENCY_KEY_MAX} characters",
                )
            )
        return Checked(tool, canonical, sha256_hex(canonical), idempotency_key)

    def _check_arguments(self, tool: Tool, args: object) -> tuple[str | None, str | None]:
        if not isinstance(args, dict):
            return "arguments must be a JSON object", None
        if nested_deeper_than(args, self.max_nesting):
            # Before anything walks them recursively: serializing, validating, storing.
            return too_deep_message("arguments", self.max_nesting), None
        try:
            canonical = canonical_json(args)
        except (TypeError, ValueError) as exc:
            return f"arguments are not JSON: {error_message(exc)}", None
        # Measured as UTF-8, not as the ASCII-escaped stored form, so non-ASCII text is not
        # counted up to six times over. The escaped canonical form is never shorter than the
        # UTF-8 text, and the measured form adds at most one space per separator, so small
        # arguments skip the second serialization.
        if 2 * len(canonical) > self.max_args_bytes:
            size = len(json.dumps(args, ensure_ascii=False).encode("utf-8", "surrogatepass"))
            if size > self.max_args_bytes:
                return f"{TOO_LARGE}{size} bytes, over the limit of {self.max_args_bytes}", None
        return tool.argument_errors(args), canonical

    def _replay(self, requested_by: str, checked: Checked) -> CallResult | None:
        assert checked.idempotency_key is not None
        with self.store.reading() as conn:
            existing = self.store.find_by_idempotency_key(
                conn, requested_by, checked.idempotency_key
            )
        return None if existing is None else replay_of(existing, checked)

    def new_call(
        self,
        requested_by: str,
        checked: Checked,
        *,
        now: int,
        batch_id: str | None = None,
        batch_index: int | None = None,
    ) -> NewCall:
        """The rows that accept one checked call: the call, its request if gated, its audit
        entry, and (ungated) the message to publish after commit."""
        tool = checked.tool
        call_id = new_call_id()
        gated = tool.spec.gated
        status = CallStatus.PENDING if gated else CallStatus.QUEUED
        request_id = new_request_id() if gated else None
        row: dict[str, Any] = {
            "id": call_id,
            "tool": tool.name,
            "risk": tool.spec.risk,
            "args": checked.canonical,
            "args_sha256": checked.digest,
            "status": status,
            "requested_by": requested_by,
            "idempotency_key": checked.idempotency_key,
            "attempt": 0,
            "lease_until": None,
            "created_at": now,
            "updated_at": now,
            "published_at": None if gated else now,
            "started_at": None,
            "finished_at": None,
            "value": None,
            "error": None,
            "error_type": None,
            "request_id": request_id,
            "batch_id": batch_id,
            "batch_index": batch_index,
        }
        request = None
        if request_id is not None:
            # The request is bound now, to this call, these arguments, this requester.
            request = pending.issue_row(
                request_id=request_id,
                call_id=call_id,
                tool=tool.name,
                args_sha256=checked.digest,
                requested_by=requested_by,
                approvers=tool.spec.approvers,
                approvals_required=tool.spec.approvals_required,
                now=now,
                timeout_ms=int(tool.spec.approval_timeout_s * 1000),
                keyring=self.keyring,
            )
        entry = AuditEntry(
            event=AuditEvent.PENDING if gated else AuditEvent.QUEUED,
            actor=requested_by,
            tool=tool.name,
            call_id=call_id,
            request_id=request_id,
        )
        return NewCall(
            row=row,
            request=request,
            audit=entry,
            message=None if gated else message_for(tool, call_id),
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
                with self.store.transaction() as conn:
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
                    results[index] = self.submit(*_fields(item))
            together, new = [], []
        # Committed: from here on every accepted call is answered, never submitted again,
        # and what goes wrong for one call is that call's answer alone.
        unpublished = self._publish_committed(new)
        for index, slot in together:
            if isinstance(slot, NewCall):
                results[index] = self._answer_committed(
                    items[index].requested_by, slot.result, unpublished
                )
        for index, item in enumerate(items):
            if item.idempotency_key is not None:
                results[index] = self.submit(*_fields(item))
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
            error = f"unavailable: internal error: {error_message(exc)}"
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
            return unavailable(f"internal error: {error_message(exc)}", tool=result.tool)

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
        label = f"capability:{echo_name(capability)}"
        if isinstance(args, dict) and nested_deeper_than(args, self.max_nesting):
            too_deep = too_deep_message("arguments", self.max_nesting)
            return self._refuse(
                _rejection(
                    requested_by, label, AuditEvent.INVALID, f"invalid arguments: {too_deep}"
                )
            )
        usable = [
            name
            for name in ranked
            if (tool := self.registry.get(name)) is not None
            and isinstance(args, dict)
            and tool.argument_errors(args) is None
        ]
        if not usable:
            return self._refuse(
                _rejection(
                    requested_by,
                    label,
                    AuditEvent.UNKNOWN,
                    f"no tool with capability {echo_name(capability)} takes these arguments",
                )
            )
        first, rest = usable[0], usable[1:]
        chain = [name for name in rest if not self.registry.get(name).spec.gated]  # type: ignore[union-attr]
        return self.submit(requested_by, first, args, idempotency_key, chain=chain)

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
                    [
                        AuditEntry(
                            event=AuditEvent.ERROR,
                            actor=actor,
                            tool=tool,
                            call_id=call_id,
                            detail={"error": error},
                        )
                    ],
                    at=now,
                )
        return unavailable(error, tool=tool)


def _fields(item: Submission) -> tuple[str, object, object, str | None]:
    return item.requested_by, item.tool, item.args, item.idempotency_key


def replay_of(existing: CallRow, checked: Checked) -> CallResult:
    """The answer to a call whose idempotency key is already taken by ``existing``."""
    if existing.tool != checked.tool.name or existing.args_sha256 != checked.digest:
        return CallResult(
            status="conflict",
            tool=checked.tool.name,
            http_status=409,
            error="idempotency key reused with different arguments",
        )
    return existing.result()


def _rejection(actor: str, tool: str, event: AuditEvent, error: str) -> Refused:
    return Refused(
        rejected(tool, error),
        AuditEntry(event=event, actor=actor, tool=tool, detail={"error": error}),
    )


def message_for(tool: Tool, call_id: str, *, countdown: float | None = None) -> RunMessage:
    return RunMessage(
        call_id=call_id,
        tool=tool.name,
        queue=tool.queue,
        timeout_s=tool.spec.timeout_s,
        countdown=countdown,
        calls_per_message=tool.spec.max_calls_per_message,
    )
