"""Prometheus metrics gathered across every process (prometheus-client multiprocess mode).

The workers, the approval worker and the notification worker write samples to files under
the metrics directory; the API's ``/metrics`` merges them and adds what is read at scrape
time (queue depths, pending requests). Recording a metric never breaks a call: every hook
swallows its errors.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

from .files import private_dir
from .settings import Settings

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
WAIT_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 86400)


class Untrusted(StrEnum):
    """What a message from Redis that failed its tag (or its check) was."""

    COMPLETION = "completion"
    CACHED_RESULT = "cached_result"
    KEY_ACK = "key_ack"
    DECISION = "decision"
    DECISION_REPLY = "decision_reply"
    RUN_MESSAGE = "run_message"  # named no call, or another tool than its call's


class Tampered(StrEnum):
    """What a database row whose tag did not verify was."""

    CALL = "call"
    APPROVAL_REQUEST = "approval_request"
    APPROVAL_DECISION = "approval_decision"
    API_KEY = "api_key"
    UI_SESSION = "ui_session"


class NotifyOutcome(StrEnum):
    """How one notification attempt (or the hand-over to the queue) ended."""

    DELIVERED = "delivered"
    RETRIED = "retried"
    FAILED = "failed"
    SKIPPED = "skipped"
    NOT_QUEUED = "not_queued"


def metrics_dir(settings: Settings) -> Path:
    return (settings.state_dir / "metrics").resolve()


def enable(settings: Settings) -> None:
    """Point prometheus-client at the shared directory; before any metric is created."""
    path = metrics_dir(settings)
    private_dir(path.parent)
    private_dir(path)
    # prometheus-client reads this variable to choose its multiprocess value class. Set, not
    # defaulted: a value inherited from the caller's environment would send this process's
    # samples where this deployment's /metrics never reads.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    # It chooses once, when first imported, and Celery's command line imports it before
    # our code runs: choose again now, before any metric of ours exists.
    import sys

    values = sys.modules.get("prometheus_client.values")
    if values is not None:
        values.ValueClass = values.get_value_class()  # type: ignore[attr-defined]


@cache
def _instruments() -> dict[str, Any]:
    from prometheus_client import Counter, Histogram

    return {
        "calls": Counter(
            "toolrouter_calls_total", "Calls finished, by tool and outcome", ["tool", "outcome"]
        ),
        "latency": Histogram(
            "toolrouter_call_duration_seconds",
            "Handler run time, claim to outcome",
            ["tool"],
            buckets=LATENCY_BUCKETS,
        ),
        "cost": Counter(
            "toolrouter_cost_total", "Summed cost_per_call of calls that ran", ["tool"]
        ),
        "untrusted": Counter(
            "toolrouter_untrusted_messages_total",
            "Messages from Redis that no toolrouter process made (bad or missing tag); "
            "each changed nothing",
            ["kind"],
        ),
        "tampered": Counter(
            "toolrouter_tampered_records_total",
            "Database rows whose tag does not verify (changed outside toolrouter); refused",
            ["kind"],
        ),
        "notifications": Counter(
            "toolrouter_notifications_total",
            "Notification attempts to approvers, by channel type and outcome "
            f"({', '.join(NotifyOutcome)})",
            ["channel_type", "outcome"],
        ),
        "approval_wait": Histogram(
            "toolrouter_approval_wait_seconds",
            "From a request's issue to its decision",
            ["tool", "decision"],
            buckets=WAIT_BUCKETS,
        ),
    }


def call_finished(tool: str, outcome: str, duration_s: float | None, cost: float) -> None:
    try:
        instruments = _instruments()
        instruments["calls"].labels(tool, outcome).inc()
        if duration_s is not None:
            instruments["latency"].labels(tool).observe(max(0.0, duration_s))
        if cost:
            instruments["cost"].labels(tool).inc(cost)
    except Exception:
        log.debug("metric not recorded", exc_info=True)


def show_zeros(notifications: Iterable[tuple[str, str]]) -> None:
    """Expose the counters to alert on at 0 from the start, every label they can take:
    a series that first appears at 1 shows no increase, and a panel of none shows no data.
    ``notifications``: the (channel type, outcome) pairs there can be."""
    try:
        instruments = _instruments()
        for message in Untrusted:
            instruments["untrusted"].labels(message).inc(0)
        for row in Tampered:
            instruments["tampered"].labels(row).inc(0)
        for channel_type, outcome in notifications:
            instruments["notifications"].labels(channel_type, outcome).inc(0)
    except Exception:
        log.debug("metrics not set up", exc_info=True)


def untrusted(kind: Untrusted) -> None:
    """A message from Redis failed its tag: counted, and logged by the caller."""
    try:
        _instruments()["untrusted"].labels(kind).inc()
    except Exception:
        log.debug("metric not recorded", exc_info=True)


def tampered(kind: Tampered) -> None:
    """A database row failed its tag: counted, and logged by the caller."""
    try:
        _instruments()["tampered"].labels(kind).inc()
    except Exception:
        log.debug("metric not recorded", exc_info=True)


def decided(tool: str, decision: str, waited_s: float) -> None:
    try:
        _instruments()["approval_wait"].labels(tool, decision).observe(max(0.0, waited_s))
    except Exception:
        log.debug("metric not recorded", exc_info=True)


def notification(channel_type: str, outcome: str) -> None:
    """One notification attempt ended (or could not be queued): never breaks the caller."""
    try:
        _instruments()["notifications"].labels(channel_type, outcome).inc()
    except Exception:
        log.debug("metric not recorded", exc_info=True)
