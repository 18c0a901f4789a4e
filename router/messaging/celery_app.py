"""Redis as transport: where it is, and how Celery talks to it.

Every process (API, workers, approval worker, beat, Flower) builds its Celery app from
these settings, so they agree on queues, serialisation and the deployment's namespace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery import Celery
from kombu import Exchange, Queue

from ..constants import ALL_QUEUES
from ..settings import Settings
from .namespace import Namespace
from .redis_clients import broker_settings, with_master
from .redis_transport import SENTINEL_TRANSPORT, TRANSPORT

LOCAL_REDIS_URL = "redis://127.0.0.1:6379/0"
PRIVATE_REDIS_FILE = "redis.url"
# The hard time limit of a run is its tool's ``timeout_s`` (the soft limit) plus this.
HARD_LIMIT_GRACE_S = 10.0


def private_redis_url_file(settings: Settings) -> Path:
    """Where `toolrouter up` writes the URL of the private Redis it started."""
    return settings.state_dir / PRIVATE_REDIS_FILE


def resolve_redis_url(settings: Settings) -> str:
    """The configured URL (a Sentinel one with its primary's name); else the private Redis
    of a running `toolrouter up`; else localhost."""
    if settings.redis_url:
        return with_master(settings.redis_url, settings.redis_sentinel_master)
    marker = private_redis_url_file(settings)
    if marker.exists():
        return marker.read_text(encoding="utf-8").strip()
    return LOCAL_REDIS_URL


def celery_settings(redis_url: str, namespace: Namespace) -> dict[str, Any]:
    """Settings shared by every process that publishes or consumes (one reason per line)."""
    broker_url, sentinel_options = broker_settings(redis_url)
    return {
        "broker_url": broker_url,
        # kombu's Redis transport, minus a new redis-py client for every publish.
        "broker_transport": SENTINEL_TRANSPORT if sentinel_options else TRANSPORT,
        # Results live in the database; Celery's result backend would be a second truth.
        "result_backend": None,
        "task_ignore_result": True,
        # JSON only: no pickle on the wire.
        "task_serializer": "json",
        "accept_content": ["json"],
        "event_serializer": "json",
        # Every queue is declared; publishing to an undeclared one is an error, not a new queue.
        "task_queues": [Queue(name, Exchange(name), routing_key=name) for name in ALL_QUEUES],
        "task_create_missing_queues": False,
        "task_default_queue": "tools.low",
        # A publish to a dead Redis fails fast so the API can answer 503 instead of hanging.
        "broker_connection_timeout": 2.0,
        "broker_connection_retry_on_startup": True,
        "task_publish_retry": True,
        "task_publish_retry_policy": {
            "max_retries": 2,
            "interval_start": 0.1,
            "interval_step": 0.2,
            "interval_max": 0.5,
        },
        "broker_transport_options": {
            # Every key and channel kombu uses (queues, fanout for remote control and
            # events) starts with the deployment's namespace: deployments sharing a Redis
            # never take each other's messages. Flower reads queue lengths with it too.
            "global_keyprefix": namespace.prefix,
            # No acknowledgement bookkeeping in Redis: a message only wakes a worker, the
            # database row is the truth, and a message lost with its worker is healed from
            # there (a queued call is published again after ``requeue_after_s``, a running
            # one recovered when its lease runs out). kombu's emulation of acks costs every
            # message two more synchronous round trips in the worker's consumer loop, and
            # can only redeliver after its visibility timeout, which would also have to
            # outlast every tool's time limit.
            "ack_emulation": False,
            "socket_timeout": 5.0,
            "socket_connect_timeout": 2.0,
            # Sentinel: the primary's name, and the sentinels asked with the same patience.
            **sentinel_options,
            **({"sentinel_kwargs": {"socket_timeout": 2.0}} if sentinel_options else {}),
        },
    }


def make_celery(redis_url: str, namespace: Namespace, name: str = "toolrouter") -> Celery:
    app = Celery(name)
    app.conf.update(celery_settings(redis_url, namespace))
    return app
