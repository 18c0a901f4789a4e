"""The baseline: raw Celery with a no-op task, on its own queue, with a Redis result backend.

Celery's defaults otherwise (early ack, prefetch 4), as a user of plain Celery would run it.
The worker runs as ``celery -A bench.baseline worker -Q bench.noop``; the broker URL comes
from ``BENCH_REDIS_URL`` (the bench sets it for the worker and for itself).
"""

from __future__ import annotations

import os

from celery import Celery
from kombu import Queue

QUEUE = "bench.noop"
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")

app = Celery("bench", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    result_serializer="json",
    task_queues=[Queue(QUEUE)],
    task_default_queue=QUEUE,
    result_expires=600,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="bench.noop")
def noop(i: int = 0) -> int:
    return i
