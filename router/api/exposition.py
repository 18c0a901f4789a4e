"""``/metrics``: every process's samples merged, plus what is read at scrape time."""

from __future__ import annotations

import logging
from typing import Any

from ..messaging.redis_clients import redis_client
from ..metrics import metrics_dir

log = logging.getLogger(__name__)


class LiveCollector:
    """What is read at scrape time rather than counted: queue depths, pending requests."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        from ..approval import requests as pending
        from ..constants import ALL_QUEUES

        depth = GaugeMetricFamily(
            "toolrouter_queue_depth", "Messages waiting per queue", labels=["queue"]
        )
        try:
            client = redis_client(
                self.runtime.redis_url, socket_timeout=2, socket_connect_timeout=2
            )
            for queue, count in self.runtime.namespace.queue_depths(client, ALL_QUEUES).items():
                if count is not None:  # a key that is not a list: no depth to tell
                    depth.add_metric([queue], float(count))
            client.close()
        except Exception:
            log.debug("queue depths not read", exc_info=True)
        yield depth
        waiting = GaugeMetricFamily(
            "toolrouter_pending_requests", "Approval requests waiting for a decision"
        )
        try:
            with self.runtime.store.reading() as conn:
                waiting.add_metric([], float(pending.count_pending(conn, now=self.runtime.clock())))
        except Exception:
            log.debug("pending requests not counted", exc_info=True)
        yield waiting


def exposition(runtime: Any) -> tuple[bytes, str]:
    """The merged text exposition of every process's metrics plus the live ones."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics_dir(runtime.settings)))
    registry.register(LiveCollector(runtime))
    return generate_latest(registry), CONTENT_TYPE_LATEST
