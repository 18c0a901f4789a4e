"""The notification tasks (queue ``notifications``, served by the approval worker): fan a
request's event out to its channels, then attempt each delivery, re-queued with a growing
delay while it fails in a way that may pass; and beat's escalation sweep (``maintenance``).
The logic is ``router.notify.courier``."""

from __future__ import annotations

import logging
from typing import Any

from router.constants import DELIVER_TASK, ESCALATE_TASK, NOTIFICATIONS_QUEUE, NOTIFY_TASK
from router.notify.model import NotifyEvent, Outcome

from . import process
from .app import app

log = logging.getLogger(__name__)

# A receiver that hangs is cut off by ``notify_timeout_s``; this is the backstop.
TIME_LIMIT_S = 120


def _deliver_later(delivery_id: str, countdown: float) -> None:
    app.send_task(
        DELIVER_TASK,
        args=[delivery_id],
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
    for delivery_id in planned:
        _deliver_later(delivery_id, 0)
    return len(planned)


@app.task(name=ESCALATE_TASK, ignore_result=True, time_limit=TIME_LIMIT_S)
def escalate_requests() -> int:
    """Plan the ``escalated`` deliveries of requests undecided past their tool's
    ``escalate_after_s`` and queue them; how many. Overlapping sweeps plan each once."""
    planned = process.current().runtime.courier.escalate_due()
    for delivery_id in planned:
        _deliver_later(delivery_id, 0)
    return len(planned)


@app.task(name=DELIVER_TASK, ignore_result=True, time_limit=TIME_LIMIT_S)
def deliver(delivery_id: Any) -> str:
    """One attempt at one delivery; queued again after its backoff if it may yet succeed."""
    if not isinstance(delivery_id, str):
        return "ignored"
    attempted = process.current().runtime.courier.attempt(delivery_id)
    if attempted.outcome is Outcome.RETRIED and attempted.retry_in_s is not None:
        _deliver_later(delivery_id, attempted.retry_in_s)
    return str(attempted.outcome or "skipped")
