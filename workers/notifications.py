"""The notification tasks (queue ``notifications``, served by the notification worker): fan
a request's event out to its channels, then attempt each delivery, re-queued with a growing
delay while it fails in a way that may pass; and beat's sweeps (``maintenance``): escalation,
and deliveries whose message was lost. The logic is ``router.notify.courier``."""

from __future__ import annotations

import logging
from typing import Any

from router.constants import (
    DELIVER_TASK,
    ESCALATE_TASK,
    NOTIFICATIONS_QUEUE,
    NOTIFY_TASK,
    RESEND_TASK,
)
from router.metrics import NotifyOutcome
from router.notify.digest import PER_MESSAGE, grouped
from router.notify.model import NotifyEvent

from . import process
from .app import app

log = logging.getLogger(__name__)

# A receiver that hangs is cut off by ``notify_timeout_s``; this is the backstop.
TIME_LIMIT_S = 120


def _deliver_later(delivery_ids: list[str], countdown: float) -> None:
    """Queue one message of ``delivery_ids`` (``router.notify.digest``)."""
    app.send_task(
        DELIVER_TASK,
        args=[delivery_ids[0] if len(delivery_ids) == 1 else delivery_ids],
        queue=NOTIFICATIONS_QUEUE,
        routing_key=NOTIFICATIONS_QUEUE,
        countdown=countdown or None,
    )


@app.task(name=NOTIFY_TASK, ignore_result=True, time_limit=TIME_LIMIT_S)
def notify(event: Any, request_ids: Any) -> int:
    """Plan the deliveries of ``event`` for each request and queue them; how many."""
    try:
        what = NotifyEvent(event)
    except ValueError:
        log.warning("ignored a notification of an unknown event")
        return 0
    if not isinstance(request_ids, list) or not all(isinstance(i, str) for i in request_ids):
        log.warning("ignored a notification without request ids")
        return 0
    planned = process.current().runtime.courier.fan_out(what, request_ids)
    for message in grouped(planned):
        _deliver_later(message, 0)
    return len(planned)


@app.task(name=ESCALATE_TASK, ignore_result=True, time_limit=TIME_LIMIT_S)
def escalate_requests() -> int:
    """Plan the ``escalated`` deliveries of requests undecided past their tool's
    ``escalate_after_s`` and queue them; how many. Overlapping sweeps plan each once."""
    planned = process.current().runtime.courier.escalate_due()
    for message in grouped(planned):
        _deliver_later(message, 0)
    return len(planned)


@app.task(name=RESEND_TASK, ignore_result=True, time_limit=TIME_LIMIT_S)
def resend_lost() -> int:
    """Queue again the deliveries whose message was lost, and those whose attempt outlived
    its time limit (its process died); how many."""
    courier = process.current().runtime.courier
    settings = courier.settings
    resent = courier.resend_lost(
        lost_after_ms=int(settings.requeue_after_s * 1000),
        stuck_after_ms=int((TIME_LIMIT_S + settings.lease_grace_s) * 1000),
    )
    for message in grouped(resent):
        _deliver_later(message, 0)
    return len(resent)


@app.task(name=DELIVER_TASK, ignore_result=True, time_limit=TIME_LIMIT_S)
def deliver(delivery_ids: Any) -> str:
    """One attempt at one message: a delivery, or a digest's deliveries (a list of ids);
    queued again after its backoff if it may yet succeed."""
    ids = [delivery_ids] if isinstance(delivery_ids, str) else delivery_ids
    if not (
        isinstance(ids, list)
        and 0 < len(ids) <= PER_MESSAGE
        and all(isinstance(i, str) for i in ids)
    ):
        log.warning("ignored a delivery message that names no deliveries")
        return "ignored"
    attempted = process.current().runtime.courier.attempt_many(ids)
    if attempted.outcome is NotifyOutcome.RETRIED and attempted.retry_in_s is not None:
        _deliver_later(ids, attempted.retry_in_s)
    return str(attempted.outcome or "skipped")
