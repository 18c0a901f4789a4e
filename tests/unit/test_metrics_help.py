"""What ``/metrics`` says of each metric: its help names every label value it can take."""

from __future__ import annotations

from prometheus_client import REGISTRY, generate_latest

from router import metrics
from router.metrics import NotifyOutcome


def test_the_help_of_notification_attempts_names_every_outcome() -> None:
    metrics.show_zeros([])
    helps = [
        line
        for line in generate_latest(REGISTRY).decode().splitlines()
        if line.startswith("# HELP toolrouter_notifications_total ")
    ]
    assert len(helps) == 1
    listed = helps[0].rpartition("(")[2].rstrip(")").split(", ")
    assert listed == list(NotifyOutcome)
