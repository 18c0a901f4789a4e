"""Worker-side Celery settings, on top of the shared ones in ``router.messaging.broker``.

One line of reason per setting; every queue is declared in ``router.constants``.
"""

from __future__ import annotations

from typing import Any

from router.constants import (
    ESCALATE_TASK,
    EXPIRE_TASK,
    MAINTENANCE_QUEUE,
    REAP_TASK,
    RECONCILE_TASK,
    RESEND_TASK,
    SIGN_AUDIT_HEAD_TASK,
)
from router.messaging.celery_app import celery_settings
from router.messaging.namespace import Namespace
from router.settings import Settings


def worker_settings(settings: Settings, redis_url: str, namespace: Namespace) -> dict[str, Any]:
    conf = celery_settings(redis_url, namespace)
    conf.update(
        {
            # Ack after the handler ran: until then a warm shutdown gives the message back
            # to Redis. (Redis keeps no unacked copy: a message lost with a killed worker is
            # published again from the database, see ``router.messaging.broker``.) Duplicates are
            # harmless because a run starts with a conditional claim in the database.
            "task_acks_late": True,
            # Each pool process has its next message at hand when a run ends, with no idle
            # round trip to Redis between; only a few, so a slow handler hoards few.
            "worker_prefetch_multiplier": settings.worker_prefetch,
            # Killed pool processes are recovered by our own reaper, not by redelivery.
            "task_reject_on_worker_lost": False,
            # Fresh pool processes now and then: handlers may leak.
            "worker_max_tasks_per_child": 10_000,
            # Task events cost a Redis publish each, made synchronously in the worker's
            # consumer loop, a large share of its time: off unless someone watches. Flower
            # switches them on (``enable_events``) while it runs, and then shows each task
            # with its call id and tool.
            "worker_send_task_events": False,
            # While they are on, they go out in timed batches (``workers.task_events``).
            "worker_consumer": "workers.task_events:BatchedEventsConsumer",
            "task_send_sent_event": True,
            "worker_hijack_root_logger": False,
            "beat_schedule": {
                "expire-requests": {
                    "task": EXPIRE_TASK,
                    "schedule": settings.expiry_interval_s,
                    "options": {"queue": MAINTENANCE_QUEUE, "expires": 30},
                },
                # On the expiry sweep's interval: escalation is as time-bound as expiry.
                "escalate-requests": {
                    "task": ESCALATE_TASK,
                    "schedule": settings.expiry_interval_s,
                    "options": {"queue": MAINTENANCE_QUEUE, "expires": 30},
                },
                "reap-lost-runs": {
                    "task": REAP_TASK,
                    "schedule": settings.reaper_interval_s,
                    "options": {"queue": MAINTENANCE_QUEUE, "expires": 30},
                },
                "reconcile-queued": {
                    "task": RECONCILE_TASK,
                    "schedule": settings.reconciler_interval_s,
                    "options": {"queue": MAINTENANCE_QUEUE, "expires": 30},
                },
                # Lost notification messages, healed as the reconciler heals lost runs.
                "resend-notifications": {
                    "task": RESEND_TASK,
                    "schedule": settings.reconciler_interval_s,
                    "options": {"queue": MAINTENANCE_QUEUE, "expires": 30},
                },
                "sign-audit-head": {
                    "task": SIGN_AUDIT_HEAD_TASK,
                    "schedule": settings.audit_head_interval_s,
                    "options": {"queue": MAINTENANCE_QUEUE, "expires": 30},
                },
            },
        }
    )
    return conf
