"""Announcing a request's event to the notification queue, by task name, after commit.

Only the request ids travel; the delivery task reads everything else from the database.
Requests whose tool and approver roles name no channel send nothing, so a deployment
without notifications pays nothing. The publish runs on a thread of its own: a slow or
dead Redis never delays the answer to a call or a decision, and a failure is only logged
and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import metrics
from ..constants import NOTIFICATIONS_QUEUE, NOTIFY_TASK
from ..metrics import NotifyOutcome
from .model import NotifyEvent

if TYPE_CHECKING:
    from celery import Celery

    from ..tools.notify_config import Notifications
    from ..tools.registry import ToolRegistry

log = logging.getLogger(__name__)

# No channel type is known before the fan-out reads the request.
ANY_CHANNEL = "any"


@dataclass(frozen=True, slots=True)
class Announced:
    """A request as the announcer needs it."""

    request_id: str
    tool: str
    approvers: tuple[str, ...]


class Announcer:
    """Sends ``toolrouter.notify`` for requests that have channels to tell."""

    def __init__(self, app: Celery, notifications: Notifications, registry: ToolRegistry) -> None:
        self.app, self.notifications, self.registry = app, notifications, registry
        self._pool: ThreadPoolExecutor | None = None

    def channels_for(self, tool: str, approvers: Sequence[str]) -> list[str]:
        """The channels that may hear of a request: its own, and its escalation group's,
        who hear what happens to a request once it has escalated."""
        found = self.registry.get(tool)
        own = found.spec.notify if found is not None else ()
        names = self.notifications.channels_for(approvers, own)
        if found is not None and found.spec.escalate_to is not None:
            names += self.notifications.escalation_channels(found.spec.escalate_to)
        return names

    def announce(self, event: NotifyEvent, requests: Sequence[Announced]) -> None:
        """Queue the event of each request that has channels. Never raises."""
        try:
            ids = [r.request_id for r in requests if self.channels_for(r.tool, r.approvers)]
            if not ids:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="toolrouter-announce")
            self._pool.submit(self._send, event, ids)
        except Exception:
            log.exception("could not announce %s for %d requests", event, len(requests))
            metrics.notification(ANY_CHANNEL, NotifyOutcome.NOT_QUEUED)

    def _send(self, event: NotifyEvent, ids: list[str]) -> None:
        try:
            self.app.send_task(
                NOTIFY_TASK,
                args=[str(event), ids],
                queue=NOTIFICATIONS_QUEUE,
                routing_key=NOTIFICATIONS_QUEUE,
            )
        except Exception as exc:
            log.warning("notifications of %d requests not queued: %s", len(ids), exc)
            metrics.notification(ANY_CHANNEL, NotifyOutcome.NOT_QUEUED)

    def flush(self) -> None:
        """Wait for the announcements handed over so far (tests, and a process's exit)."""
        if self._pool is not None:
            self._pool.submit(lambda: None).result()
