"""This release's targets, and a run's figures judged against them.

Each target is a figure of one deployment (the bench's own processes, or ``toolrouter up``
as a user starts it) on one database, most of them a ratio to the raw Celery runs around
it. ``python -m bench.medians`` judges the median of several runs the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .celery_runs import IN_FLIGHT_KEY, PAIRED_CELERY_LATENCY

Figures = dict[str, Any]


class Deployment(StrEnum):
    BENCH = "bench"  # API, one worker on every tool queue, the approval worker
    UP = "up"  # `toolrouter up`, Flower watching


@dataclass(frozen=True)
class Target:
    name: str
    # A figure from the deployment's figures and the raw Celery runs around it.
    value: Callable[[Figures, Figures], float]
    at_least: bool
    # The bound on each database; a database not named is not judged.
    bounds: dict[str, float]
    # Judged on ``toolrouter up`` too.
    of_up: bool = False

    @property
    def op(self) -> str:
        return ">=" if self.at_least else "<="

    def met(self, value: float, backend: str) -> bool:
        bound = self.bounds[backend]
        return value >= bound if self.at_least else value <= bound


BOTH = ("sqlite", "postgresql")


def _both(bound: float) -> dict[str, float]:
    return dict.fromkeys(BOTH, bound)


def _plain(client: str) -> Callable[[Figures, Figures], float]:
    def ratio(tr: Figures, base: Figures) -> float:
        value = float(tr["plain_clients"][client]["64"]["per_s"])
        return value / float(base[IN_FLIGHT_KEY]["64"]["per_s"])

    return ratio


TARGETS = (
    Target(
        "end to end, Python client, x raw Celery",
        lambda tr, base: tr["e2e_throughput_per_s"] / base["e2e_throughput_per_s"],
        True,
        {"sqlite": 2.0, "postgresql": 1.5},
        of_up=True,
    ),
    Target(
        "batch of 10,000, x delay() rate",
        lambda tr, base: tr["batch_submit_per_s"] / base["submit_rate_per_s"],
        True,
        _both(15),
        of_up=True,
    ),
    Target(
        "wait_s latency p50, x delay().get() in pairs",
        lambda tr, _: tr["latency"]["p50_ms"] / tr[PAIRED_CELERY_LATENCY]["p50_ms"],
        False,
        {"sqlite": 1.3, "postgresql": 1.5},
        of_up=True,
    ),
    Target(
        "httpx, 64 in flight, x raw Celery",
        _plain("httpx"),
        True,
        {"sqlite": 1.0},
        of_up=True,
    ),
    Target(
        "aiohttp, 64 in flight, x raw Celery",
        _plain("aiohttp"),
        True,
        {"sqlite": 1.0},
        of_up=True,
    ),
    Target(
        "approval to start p50, ms",
        lambda tr, _: tr["approval_to_start"]["p50_ms"],
        False,
        _both(50),
    ),
    Target(
        "approval to start p99, ms",
        lambda tr, _: tr["approval_to_start"]["p99_ms"],
        False,
        _both(250),
    ),
    Target(
        "1,000,000 audit rows, x empty table",
        lambda tr, _: tr["e2e_throughput_full_audit_per_s"] / tr["e2e_throughput_per_s"],
        True,
        _both(0.8),
    ),
    Target(
        "toolrouter --help, median start, ms",
        lambda tr, _: tr["cli_start"]["help"]["median_ms"],
        False,
        _both(500),
    ),
    Target(
        "toolrouter approvals list, median start, ms",
        lambda tr, _: tr["cli_start"]["approvals_list"]["median_ms"],
        False,
        _both(500),
    ),
)


def baseline_for(report: dict[str, Any], backend: str) -> dict[str, Any]:
    """The baseline a backend is compared with: the Celery runs around it, and for the
    latency the ``delay().get()`` round trips taken in turn with the backend's own."""
    base = dict(report.get("baseline_for", {}).get(backend) or report["baseline"])
    paired = report["toolrouter"].get(backend, {}).get(PAIRED_CELERY_LATENCY)
    if paired is not None:
        base["latency"] = paired
    return base


def judge(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One verdict per target, deployment and database the run measured."""
    deployments = [(Deployment.BENCH, report["toolrouter"]), (Deployment.UP, report.get("up", {}))]
    verdicts = []
    for deployment, measured in deployments:
        for backend, tr in measured.items():
            base = baseline_for(report, backend)
            for target in TARGETS:
                if backend not in target.bounds:
                    continue
                if deployment is Deployment.UP and not target.of_up:
                    continue
                value = target.value(tr, base)
                verdicts.append(
                    {
                        "deployment": deployment.value,
                        "backend": backend,
                        "target": target.name,
                        "value": round(value, 3),
                        "bound": target.bounds[backend],
                        "met": target.met(value, backend),
                    }
                )
    return verdicts


def target_named(name: str) -> Target:
    return next(target for target in TARGETS if target.name == name)
