"""Measuring the baseline: raw Celery's no-op task on the same Redis and concurrency."""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.launcher import REPO, Launcher

from . import costs
from .params import Params
from .plain_clients import IN_FLIGHT
from .stats import cpu_ms_per_call, latency_ms, median_rate, rate

LATENCY_SAMPLES = "latency_samples_s"
# Where a backend's figures keep raw Celery's latency measured in turn with its own.
PAIRED_CELERY_LATENCY = "celery_latency_paired"
# End to end with a bounded number of tasks in flight: {"16": {"per_s", "runs"}, "64": …}.
IN_FLIGHT_KEY = "e2e_in_flight"


@contextmanager
def celery_worker(params: Params, redis_url: str, log_dir: Path) -> Iterator[Launcher]:
    """A raw Celery worker on ``bench.noop``, warmed up; always stopped afterwards."""
    os.environ["BENCH_REDIS_URL"] = redis_url  # read by bench.baseline, imported below
    from .baseline import QUEUE, noop

    env = {**os.environ, "BENCH_REDIS_URL": redis_url, "PYTHONPATH": str(REPO)}
    procs = Launcher(log_dir, env)
    argv = [sys.executable, "-m", "celery", "-A", "bench.baseline", "worker", "-Q", QUEUE]
    argv += ["-n", "bench-baseline@%h", "-P", "prefork", "-c", str(params.concurrency)]
    argv += ["-l", "WARNING", "--without-mingle", "--without-gossip"]
    procs.start("celery-baseline", argv)
    try:
        noop.delay(0).get(timeout=60)  # ready: a task went all the way round
        for i in range(params.warmup):
            noop.delay(i).get(timeout=30)
        yield procs
    finally:
        procs.stop_all()


def celery_round_trip(i: int) -> float:
    """One ``delay().get()`` of the no-op, in seconds (a worker must be up)."""
    from .baseline import noop

    started = time.perf_counter()
    noop.delay(i).get(timeout=30)
    return time.perf_counter() - started


def celery_in_flight(count: int, in_flight: int) -> float:
    """``count`` no-op tasks with at most ``in_flight`` of them unanswered: each next
    ``delay()`` waits for the ``get()`` of the oldest one (a window, as a Celery user keeps
    N tasks going from one thread). Calls per second."""
    from .baseline import noop

    pending: deque[Any] = deque()
    started = time.perf_counter()
    for i in range(count):
        if len(pending) >= in_flight:
            pending.popleft().get(timeout=60)
        pending.append(noop.delay(i))
    while pending:
        pending.popleft().get(timeout=60)
    return rate(count, time.perf_counter() - started)


def run_baseline(params: Params, redis_url: str, log_dir: Path) -> dict[str, Any]:
    """Start a Celery worker on ``bench.noop`` and measure it; always stops the worker."""
    with celery_worker(params, redis_url, log_dir) as procs:
        from .baseline import app, noop

        # End to end: every task submitted with delay(), every result collected. Redis's
        # CPU is counted with the client's and the worker's.
        read_cpu = costs.reader(procs.processes, costs.servers(redis_url, None))
        e2e_runs = []
        before = read_cpu()
        for _ in range(params.throughput_runs):
            started = time.perf_counter()
            results = [noop.delay(i) for i in range(params.throughput_calls)]
            app.ResultSet(results).join_native(timeout=600)
            e2e_runs.append(rate(params.throughput_calls, time.perf_counter() - started))
        cpu = cpu_ms_per_call(before, read_cpu(), params.throughput_calls * params.throughput_runs)

        # End to end with 16 and with 64 tasks in flight, beside the plain HTTP clients'.
        in_flight: dict[str, list[float]] = {str(n): [] for n in IN_FLIGHT}
        for _ in range(params.throughput_runs):
            for n in IN_FLIGHT:
                in_flight[str(n)].append(celery_in_flight(params.throughput_calls, n))

        # Submission: one delay() per task, nothing else timed; then let the worker drain.
        submit_runs = []
        for _ in range(params.batch_runs):
            started = time.perf_counter()
            pending = [noop.delay(i) for i in range(params.batch_calls)]
            submit_runs.append(rate(params.batch_calls, time.perf_counter() - started))
            app.ResultSet(pending).join_native(timeout=600)

        # Latency: one task at a time, delay().get().
        samples = [celery_round_trip(i) for i in range(params.latency_samples)]
        return {
            "e2e_throughput_per_s": median_rate(e2e_runs),
            "e2e_throughput_runs": e2e_runs,
            "e2e_cpu_ms_per_call": cpu,
            IN_FLIGHT_KEY: _in_flight(in_flight),
            "submit_rate_per_s": median_rate(submit_runs),
            "submit_rate_runs": submit_runs,
            "latency": latency_ms(samples),
            # For ``pooled``: the latency of several baseline runs is read from all their
            # samples, not averaged from their percentiles.
            LATENCY_SAMPLES: samples,
        }


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One baseline from several runs of it, spread over the benchmark so that a host
    that speeds up or slows down meanwhile weighs on both sides of every ratio: each
    rate is the median of every run's rates, the latency is read from all the samples,
    the CPU per call is the mean."""
    e2e = [r for run in runs for r in run["e2e_throughput_runs"]]
    in_flight = {
        n: [r for run in runs for r in run[IN_FLIGHT_KEY][n]["runs"]]
        for n in runs[0][IN_FLIGHT_KEY]
    }
    submit = [r for run in runs for r in run["submit_rate_runs"]]
    samples = [s for run in runs for s in run[LATENCY_SAMPLES]]
    processes = runs[0]["e2e_cpu_ms_per_call"]
    return {
        "e2e_throughput_per_s": median_rate(e2e),
        "e2e_throughput_runs": e2e,
        "e2e_cpu_ms_per_call": {
            name: round(sum(run["e2e_cpu_ms_per_call"][name] for run in runs) / len(runs), 2)
            for name in processes
        },
        IN_FLIGHT_KEY: _in_flight(in_flight),
        "submit_rate_per_s": median_rate(submit),
        "submit_rate_runs": submit,
        "latency": latency_ms(samples),
    }


def _in_flight(runs: dict[str, list[float]]) -> dict[str, Any]:
    return {n: {"per_s": median_rate(rates), "runs": rates} for n, rates in runs.items()}


def summary(run: dict[str, Any]) -> dict[str, Any]:
    """A baseline run as the report keeps it: without its raw latency samples."""
    return {key: value for key, value in run.items() if key != LATENCY_SAMPLES}
