"""Percentiles and rates."""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Mapping, Sequence

import psutil


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), nearest rank."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_ms(samples: Sequence[float]) -> dict[str, float]:
    """p50 and p99 of samples in seconds, in milliseconds."""
    return {
        "p50_ms": round(percentile(samples, 50) * 1000, 2),
        "p99_ms": round(percentile(samples, 99) * 1000, 2),
        "samples": len(samples),
    }


def rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else math.inf


def median_rate(rates: Sequence[float]) -> float:
    """The median of several runs' rates (the middle one of three)."""
    ordered = sorted(rates)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return round((ordered[middle - 1] + ordered[middle]) / 2, 1)


def cpu_ms_per_call(
    before: dict[str, float], after: dict[str, float], calls: int
) -> dict[str, float]:
    """CPU milliseconds per call of each process between two ``cpu_seconds`` readings.

    A pool process replaced in between (``max_tasks_per_child``) is counted through its
    parent once reaped; one that exited and is not yet reaped is missed."""
    return {
        name: round((after[name] - before[name]) / calls * 1000, 2)
        for name in after
        if name in before
    }


def cpu_seconds(processes: Mapping[str, subprocess.Popen[bytes]]) -> dict[str, float]:
    """CPU time used so far by each named process and its children (a worker's pool)."""
    used: dict[str, float] = {"client": time.process_time()}  # this process: the client
    for name, child in processes.items():
        try:
            root = psutil.Process(child.pid)
            # Pool processes that exited and were reaped left their time in the root's
            # children_* fields; the live ones are counted one by one.
            times = root.cpu_times()
            reaped = times.children_user + times.children_system
            live = [root, *root.children(recursive=True)]
            used[name] = reaped + sum(sum(p.cpu_times()[:2]) for p in live)
        except psutil.Error:
            used[name] = float("nan")
    return used
