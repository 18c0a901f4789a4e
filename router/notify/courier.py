"""The work of the notification tasks, as plain functions of the database and the config:
fan a request's event out to its channels (one delivery row each), and make one attempt
at one delivery. The tasks in ``workers.notifications`` only call these and re-queue.

Nothing here trusts the message that asked for it: an event is fanned out only while the
request's status in the database says it happened, and an attempt is made only on a
delivery still open, claimed with a conditional update.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from .. import metrics
from ..approval import requests as pending
from ..approval.model import ApprovalRequest, RequestStatus
from ..canonical import load_for_display
from ..clock import Clock, wall_clock_ms
from ..db.rows import CallRow
from ..db.store import Store
from ..metrics import NotifyOutcome
from ..settings import Settings
from ..tools.config import ToolSpec
from ..tools.notify_config import Notifications
from ..tools.registry import ToolRegistry
from ..trust.redaction import Redactor
from . import deliveries, escalation
from .content import Notice, summarize
from .digest import FOR_PEOPLE, Digest, Planned
from .model import WAITING, Delivery, DeliveryStatus, NotifyEvent
from .senders import AttemptFailed, send

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Attempted:
    """How one attempt ended; ``retry_in_s`` when another is due."""

    outcome: NotifyOutcome | None
    retry_in_s: float | None = None


NOTHING_CLAIMED = Attempted(None)
# Why a delivery was not sent: its request no longer shows its event (then named).
PAST = "not sent: the request is no longer "
EDITED_AGAIN = "not sent: the request was edited again"
EDITED_SINCE = "not sent: the request was edited since, which its edit's notice tells"


class Courier:
    """Plans and attempts deliveries for one process."""

    def __init__(
        self,
        store: Store,
        notifications: Notifications,
        registry: ToolRegistry,
        settings: Settings,
        redactor: Redactor,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.store, self.notifications, self.registry = store, notifications, registry
        self.settings, self.redactor, self.clock = settings, redactor, clock

    def fan_out(self, event: NotifyEvent, request_ids: list[str]) -> list[Planned]:
        """Plan a delivery per channel of each request whose status shows ``event``; the
        deliveries planned now."""
        planned: list[Planned] = []
        for request_id in request_ids:
            now = self.clock()
            # Locked: a decision (or an edit) waits or comes first, never both.
            locks = event in (NotifyEvent.ESCALATED, NotifyEvent.EDITED)
            with self.store.transaction() as conn:
                request = pending.get(conn, request_id, for_update=locks)
                spec = self._spec(request.tool) if request is not None else None
                shown = request is not None and _shows(request, event, spec, now)
                # Decided before it was told: recorded as not sent, below.
                told_too_late = request is not None and event is NotifyEvent.PENDING
                if request is None or not (shown or told_too_late):
                    log.info("no %s notification for %s: not its status", event, request_id)
                    continue
                if (
                    event is NotifyEvent.ESCALATED
                    and spec is not None
                    and spec.escalate_to is not None
                ):
                    names = self.notifications.escalation_channels(spec.escalate_to)
                else:
                    own = spec.notify if spec is not None else ()
                    names = self.notifications.channels_for(request.approvers, own)
                    if spec is not None and spec.escalate_to is not None:
                        # Those told of its escalation hear what happens to it after.
                        told = escalation.recorded(conn, [request.id]).get(request.id)
                        names = list(dict.fromkeys([*names, *(told or {}).get("channels", [])]))
                channels = [
                    (name, self.notifications.channels[name].type)
                    for name in names
                    if name in self.notifications.channels
                ]
                planned_now = deliveries.plan(
                    conn,
                    request_id=request.id,
                    call_id=request.call_id,
                    tool=request.tool,
                    event=event,
                    channels=channels,
                    now=now,
                    # Each edit is told once: the one the request stands at now.
                    occurrence=request.edits if event is NotifyEvent.EDITED else 0,
                )
                if shown:
                    planned += planned_now
                    continue
                # Never told is not no channel at all: each delivery says why it was not sent.
                for delivery in planned_now:
                    deliveries.finish(
                        conn, delivery.id, DeliveryStatus.SKIPPED, now=now, error=f"{PAST}pending"
                    )
            for delivery in planned_now:  # the skipped; the planned went on above
                metrics.notification(delivery.channel_type, NotifyOutcome.SKIPPED)
        return planned

    def escalate_due(self, limit: int = 500) -> list[Planned]:
        """Plan the ``escalated`` deliveries of every request now due; those planned."""
        after_ms = {
            tool.name: int(tool.spec.escalate_after_s * 1000)
            for tool in self.registry
            if tool.spec.escalate_after_s is not None and tool.spec.escalate_to is not None
        }
        if not after_ms:
            return []
        with self.store.reading() as conn:
            due = escalation.due(conn, after_ms, now=self.clock(), limit=limit)
        return self.fan_out(NotifyEvent.ESCALATED, due)

    def resend_lost(
        self, *, lost_after_ms: int, stuck_after_ms: int, limit: int = 500
    ) -> list[Planned]:
        """The open deliveries due for ``lost_after_ms`` (their message was lost with a
        worker or a Redis restart) and those ``sending`` for ``stuck_after_ms`` (their
        attempt died with its process), to queue again; nothing else would."""
        now = self.clock()
        with self.store.transaction() as conn:
            released, failed = deliveries.release_interrupted(
                conn,
                before=now - stuck_after_ms,
                now=now,
                max_attempts=self.settings.notify_max_attempts,
            )
            lost = deliveries.take_overdue(conn, before=now - lost_after_ms, now=now, limit=limit)
        for channel_type in failed:
            metrics.notification(channel_type, NotifyOutcome.FAILED)
        if failed:
            log.warning(
                "%d notification deliveries failed for good: %s",
                len(failed),
                deliveries.INTERRUPTED,
            )
        if released or lost:
            log.warning("queued %d lost notification deliveries again", len(released) + len(lost))
        return released + lost

    def _spec(self, tool: str) -> ToolSpec | None:
        found = self.registry.get(tool)
        return found.spec if found is not None else None

    def attempt_many(self, delivery_ids: Sequence[str]) -> Attempted:
        """One attempt at the open deliveries of ``delivery_ids`` as one message: a
        ``Digest`` when more than one is claimed. Each is recorded and counted with that
        message's outcome."""
        now = self.clock()
        claimed: list[tuple[Delivery, ApprovalRequest | None, CallRow | None]] = []
        past: list[Delivery] = []
        kind: tuple[str, NotifyEvent] | None = None
        with self.store.transaction() as conn:
            for delivery_id in delivery_ids:
                delivery = deliveries.get(conn, delivery_id)
                if delivery is None:
                    continue
                # A message is one channel's, of one event (Redis is not trusted to say so).
                kind = kind or (delivery.channel, delivery.event)
                if (delivery.channel, delivery.event) != kind:
                    continue
                if deliveries.claim(conn, delivery, now=now):
                    request = pending.get(conn, delivery.request_id)
                    why = (
                        self._why_not(conn, request, delivery, now) if request is not None else None
                    )
                    if why is not None:
                        past.append(delivery)
                        # Not attempted: the claim's count goes back to the attempts made.
                        deliveries.finish(
                            conn,
                            delivery.id,
                            DeliveryStatus.SKIPPED,
                            now=now,
                            error=why,
                            attempts=delivery.attempts,
                        )
                        continue
                    claimed.append((delivery, request, self.store.get(conn, delivery.call_id)))
                    if self._one_each(delivery.channel):
                        break
        for delivery in past:
            metrics.notification(delivery.channel_type, NotifyOutcome.SKIPPED)
        if not claimed:
            return Attempted(NotifyOutcome.SKIPPED) if past else NOTHING_CLAIMED
        channel = self.notifications.channels.get(claimed[0][0].channel)
        sent: list[Delivery] = []
        notices: list[Notice] = []
        gone: list[Delivery] = []
        for delivery, request, call in claimed:
            if channel is None or request is None or call is None:
                gone.append(delivery)
            else:
                sent.append(delivery)
                notices.append(self._notice(delivery, request, call, now))
        if gone:
            self._record_all(gone, "channel or request is gone", retryable=False)
        if channel is None or not sent:
            return Attempted(NotifyOutcome.FAILED)
        public = self.settings.resolved_public_url
        message = notices[0] if len(notices) == 1 else Digest(tuple(notices), f"{public}/ui/")
        try:
            send(channel, message, timeout_s=self.settings.notify_attempt_s, now_s=now // 1000)
        except AttemptFailed as exc:
            return self._record_all(sent, exc.reason, retryable=exc.retryable)
        except Exception as exc:
            log.exception("notifications %s failed unexpectedly", ", ".join(d.id for d in sent))
            return self._record_all(sent, f"internal error ({type(exc).__name__})", retryable=True)
        with self.store.transaction() as conn:
            for delivery in sent:
                deliveries.finish(conn, delivery.id, DeliveryStatus.DELIVERED, now=self.clock())
        for delivery in sent:
            metrics.notification(delivery.channel_type, NotifyOutcome.DELIVERED)
        return Attempted(NotifyOutcome.DELIVERED)

    def _why_not(
        self, conn: Connection, request: ApprovalRequest, delivery: Delivery, now: int
    ) -> str | None:
        """Why a claimed delivery is not sent after all: its request has moved on (a retry
        after a decision would tell "approval needed" after "approved"), or a later edit
        replaced the one it tells (it would give that edit's editor and arguments)."""
        if not _shows(request, delivery.event, self._spec(request.tool), now):
            was = "pending" if delivery.event in WAITING else str(delivery.event)
            return f"{PAST}{was}"
        if delivery.event is NotifyEvent.EDITED and request.edits != delivery.occurrence:
            return EDITED_AGAIN
        if (
            delivery.event is NotifyEvent.PENDING
            and request.edits
            and deliveries.edit_told(conn, request.id, delivery.channel)
        ):
            # It would show the edited arguments as the agent's: the edit's notice tells them.
            return EDITED_SINCE
        return None

    def _one_each(self, channel_name: str) -> bool:
        """Whether ``channel_name`` takes one delivery a message: the rest of a list that a
        forged message names for a webhook are left open, not failed as a digest."""
        channel = self.notifications.channels.get(channel_name)
        return channel is not None and channel.type not in FOR_PEOPLE

    def _notice(
        self, delivery: Delivery, request: ApprovalRequest, call: CallRow, now: int
    ) -> Notice:
        return Notice(
            event=delivery.event,
            request_id=request.id,
            call_id=request.call_id,
            tool=request.tool,
            requested_by=request.requested_by,
            approvers=request.approvers,
            approvals_required=request.approvals_required,
            args_sha256=request.args_sha256,
            args_summary=summarize(load_for_display(call.args), self.redactor),
            created_at=request.created_at,
            expires_at=request.expires_at,
            link=f"{self.settings.resolved_public_url}/ui/#{request.id}",
            at=now,
            edited_by=(request.edited_by or "") if delivery.event is NotifyEvent.EDITED else "",
            delivery_id=delivery.id,
            **self._group(delivery.event, request.tool),
        )

    def _group(self, event: NotifyEvent, tool: str) -> dict[str, tuple[str, ...]]:
        spec = self._spec(tool)
        if event is not NotifyEvent.ESCALATED or spec is None or spec.escalate_to is None:
            return {}
        return {
            "escalated_roles": spec.escalate_to.roles,
            "escalated_keys": spec.escalate_to.keys,
        }

    def _record(
        self, delivery_id: str, channel_type: str, attempts: int, reason: str, retryable: bool
    ) -> Attempted:
        reason = self.redactor(reason)
        now = self.clock()
        if retryable and attempts < self.settings.notify_max_attempts:
            delay = min(
                self.settings.notify_max_backoff_s,
                self.settings.notify_backoff_s * 2 ** (attempts - 1),
            )
            status, outcome = DeliveryStatus.RETRYING, NotifyOutcome.RETRIED
            next_at: int | None = now + int(delay * 1000)
        else:
            status, outcome, next_at, delay = DeliveryStatus.FAILED, NotifyOutcome.FAILED, None, 0.0
            log.warning(
                "notification %s failed for good after %d attempts: %s",
                delivery_id,
                attempts,
                reason,
            )
        with self.store.transaction() as conn:
            deliveries.finish(
                conn, delivery_id, status, now=now, error=reason, next_attempt_at=next_at
            )
        metrics.notification(channel_type, outcome)
        return Attempted(outcome, delay if outcome is NotifyOutcome.RETRIED else None)

    def _record_all(self, sent: Sequence[Delivery], reason: str, *, retryable: bool) -> Attempted:
        """``_record`` of each delivery a message carried; retried once all are due again."""
        recorded = [
            self._record(d.id, d.channel_type, d.attempts + 1, reason, retryable) for d in sent
        ]
        delays = [a.retry_in_s for a in recorded if a.retry_in_s is not None]
        return (
            Attempted(NotifyOutcome.RETRIED, max(delays))
            if delays
            else Attempted(NotifyOutcome.FAILED)
        )


def _shows(request: ApprovalRequest, event: NotifyEvent, spec: ToolSpec | None, now: int) -> bool:
    """Whether the request's stored status is what ``event`` says happened; an escalation
    also needs the request unexpired and past its tool's ``escalate_after_s``."""
    if event is NotifyEvent.PENDING:
        return request.status == RequestStatus.PENDING
    if event is NotifyEvent.EDITED:
        return (
            request.status == RequestStatus.PENDING
            and request.edited_by is not None
            and request.expires_at > now
        )
    if event is NotifyEvent.ESCALATED:
        after_s = spec.escalate_after_s if spec is not None else None
        return (
            request.status == RequestStatus.PENDING
            and request.expires_at > now
            and after_s is not None
            and request.created_at + int(after_s * 1000) <= now
        )
    return request.status == RequestStatus(str(event))
