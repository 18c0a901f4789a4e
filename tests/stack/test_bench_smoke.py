"""The benchmark's smoke run (``python -m bench --smoke``): every figure is produced, on
the real processes, and written as JSON. A smoke of a benchmark, not a timed test: it
asserts that each measurement ran, never how fast."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import costs
from bench.medians import medians
from bench.targets import TARGETS

from ..support import services
from ..support.launcher import REPO

# The bench's own Redis db: never one of the test-suite's 10-15.
BENCH_REDIS_DB = 9


def postgres_answers() -> bool:
    try:
        services.postgres_or_skip()
    except pytest.skip.Exception:
        return False
    return True


@pytest.mark.timeout(600)
def test_bench_smoke_measures_celery_and_toolrouter_and_writes_json(
    redis_base: str, tmp_path: Path
) -> None:
    backends = ["sqlite", "postgresql"] if postgres_answers() else ["sqlite"]
    output = tmp_path / "smoke.json"
    redis_url = f"{redis_base}/{BENCH_REDIS_DB}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLROUTER_")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--smoke",
            "--redis-url",
            redis_url,
            "--pg-url",
            services.PG_ADMIN_URL,
            "--pg-database",
            f"toolrouter_bench_smoke_{os.getpid()}",
            "--backends",
            ",".join(backends),
            "--up",
            "--output",
            str(output),
        ],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "raw Celery" in result.stdout
    report = json.loads(output.read_text(encoding="utf-8"))
    assert report["smoke"] is True
    baseline = report["baseline"]
    for figure in (
        baseline["e2e_throughput_per_s"],
        baseline["submit_rate_per_s"],
        baseline["latency"]["p50_ms"],
    ):
        assert math.isfinite(figure) and figure > 0
    # The baseline ran before each backend and at the end; the table's figures pool the runs.
    runs = report["baseline_runs"]
    assert len(runs) == len(backends) + 1
    assert sorted(baseline["e2e_throughput_runs"]) == sorted(
        rate for run in runs for rate in run["e2e_throughput_runs"]
    )
    assert baseline["latency"]["samples"] == sum(run["latency"]["samples"] for run in runs)
    assert "latency_samples_s" not in json.dumps(report)
    assert "raw Celery run by run" in result.stdout
    assert "each toolrouter call alternated with a raw Celery delay().get()" in result.stdout
    # Each backend is judged against the runs just before and after it.
    for i, backend in enumerate(backends):
        around = report["baseline_for"][backend]
        assert sorted(around["e2e_throughput_runs"]) == sorted(
            rate for run in runs[i : i + 2] for rate in run["e2e_throughput_runs"]
        )
        e2e = verdict(report, backend, "end to end, Python client, x raw Celery")
        expected = (
            report["toolrouter"][backend]["e2e_throughput_per_s"] / around["e2e_throughput_per_s"]
        )
        assert e2e["value"] == round(expected, 3)
        # The latency is judged against Celery's round trips taken in turn with its own.
        figures = report["toolrouter"][backend]
        paired = figures["celery_latency_paired"]
        assert (
            paired["samples"]
            == figures["latency"]["samples"]
            == report["params"]["latency_samples"]
        )
        latency = verdict(report, backend, "wait_s latency p50, x delay().get() in pairs")
        assert latency["value"] == round(figures["latency"]["p50_ms"] / paired["p50_ms"], 3)
    assert sorted(report["toolrouter"]) == sorted(backends)
    for figures in report["toolrouter"].values():
        for key in (
            "e2e_throughput_per_s",
            "batch_submit_per_s",
            "batch_end_to_end_per_s",
            "e2e_throughput_full_audit_per_s",
        ):
            assert math.isfinite(figures[key]) and figures[key] > 0, key
        for key in ("latency", "approval_to_start"):
            assert figures[key]["samples"] > 0
            assert 0 < figures[key]["p50_ms"] <= figures[key]["p99_ms"]
        assert figures["audit_fill"]["rows_total"] == report["params"]["audit_rows"]
        for command in ("help", "approvals_list"):
            assert figures["cli_start"][command]["median_ms"] > 0
        # Plain httpx and aiohttp clients at 16 and 64 in flight, each with its CPU per call.
        plain = figures["plain_clients"]
        assert set(plain["limits"]) == {"httpx", "aiohttp"}
        for client in ("httpx", "aiohttp"):
            for n in ("16", "64"):
                found = plain[client][n]
                assert math.isfinite(found["per_s"]) and found["per_s"] > 0, (client, n)
                assert len(found["runs"]) == report["params"]["throughput_runs"]
                assert set(found["cpu_ms_per_call"]) == set(figures["e2e_cpu_ms_per_call"])
        # Resident memory of each process at idle and its peak under load, in MiB.
        rss = figures["rss_mib"]
        for when in ("idle", "load_peak"):
            assert sorted(rss[when]) == ["api", "approvals", "worker"], when
            assert all(mib > 0 for mib in rss[when].values()), when
        assert rss["load_samples"] > 0
    # CPU per call includes Redis's, and on PostgreSQL the database server's, whenever
    # that server is a process on this machine the bench can see.
    for backend in backends:
        cpu = report["toolrouter"][backend]["e2e_cpu_ms_per_call"]
        database_url = services.PG_ADMIN_URL if backend == "postgresql" else None
        seen = set(costs.servers(redis_url, database_url))
        assert set(cpu) == {"client", "api", "worker", "approvals", *seen}, cpu
        assert all(math.isfinite(ms) and ms >= 0 for ms in cpu.values()), cpu
    assert ("redis" in baseline["e2e_cpu_ms_per_call"]) == bool(costs.servers(redis_url, None))
    # Raw Celery end to end with 16 and with 64 in flight, pooled like the other rates.
    for n in ("16", "64"):
        pooled = baseline["e2e_in_flight"][n]
        assert math.isfinite(pooled["per_s"]) and pooled["per_s"] > 0
        assert sorted(pooled["runs"]) == sorted(
            rate for run in runs for rate in run["e2e_in_flight"][n]["runs"]
        )
    for heading in ("end to end, submit-and-wait", "CPU ms per call", "resident memory (MiB)"):
        assert heading in result.stdout, heading
    # `toolrouter up` as a user starts it, Flower watching: the same figures against it.
    assert sorted(report["up"]) == sorted(backends)
    for up in report["up"].values():
        for key in ("e2e_throughput_per_s", "batch_submit_per_s"):
            assert math.isfinite(up[key]) and up[key] > 0, key
        assert 0 < up["latency"]["p50_ms"] <= up["latency"]["p99_ms"]
        assert up["celery_latency_paired"]["samples"] == up["latency"]["samples"]
        for client in ("httpx", "aiohttp"):
            for n in ("16", "64"):
                assert up["plain_clients"][client][n]["per_s"] > 0, (client, n)
        assert {"api", "worker", "flower", "beat"} <= set(up["e2e_cpu_ms_per_call"])
    assert "toolrouter up, Flower watching" in result.stdout
    # Every target on each database it has a bound for, of the bench's deployment and of
    # `toolrouter up` (the figures `up` is measured on).
    judged = {(t["deployment"], t["backend"], t["target"]) for t in report["targets"]}
    expected = {
        (deployment, backend, target.name)
        for target in TARGETS
        for backend in backends
        if backend in target.bounds
        for deployment in (["bench", "up"] if target.of_up else ["bench"])
    }
    assert judged == expected and len(report["targets"]) == len(expected)
    assert all(math.isfinite(t["value"]) for t in report["targets"])
    for line in ("bench sqlite", "up postgresql", "httpx, 64 in flight, x raw Celery"):
        assert line in result.stdout, line
    # The median of several runs: here the same run twice, so the run's own figures.
    twice = subprocess.run(
        [sys.executable, "-m", "bench.medians", str(output), str(output)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert twice.returncode == 0, twice.stderr
    rows = medians([report, report])
    assert len(rows) == len(expected)
    for row in rows:
        (value,) = set(row["runs"])
        assert row["median"] == value and len(row["runs"]) == 2
        judged_once = verdict(report, row["backend"], row["target"], row["deployment"])
        assert row["met"] == judged_once["met"]
    assert "smoke runs, too small to judge anything by" in twice.stdout


def verdict(
    report: dict[str, Any], backend: str, target: str, deployment: str = "bench"
) -> dict[str, Any]:
    return next(
        t
        for t in report["targets"]
        if (t["deployment"], t["backend"], t["target"]) == (deployment, backend, target)
    )


@pytest.mark.timeout(600)
def test_capacity_check_measures_both_pools_and_plan_reads_it(
    redis_base: str, tmp_path: Path
) -> None:
    output = tmp_path / "capacity.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLROUTER_")}
    command = [sys.executable, "-m", "bench.capacity"]
    small = ["--calls", "200", "--runs", "1", "--output", str(output)]
    checked = subprocess.run(
        [*command, "check", "--redis-url", f"{redis_base}/{BENCH_REDIS_DB}", *small],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    found = json.loads(output.read_text(encoding="utf-8"))
    for pool in ("1", "2"):
        run = found["runs"][pool]
        assert run["calls_per_s"] > 0 and run["t_pool_ms"] > 0
        assert {"api", "worker", "client"} <= set(run["cpu_ms_per_call"])
        assert run["redis_commands_per_call"] > 0
    assert (
        found["predicted_2_from_1"]["rate"] > 0 and "model from the 1-process run" in checked.stdout
    )
    planned = subprocess.run(
        [*command, "plan", "--rate", "5000", "--input", str(output)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert planned.returncode == 0, planned.stderr
    assert "API processes" in planned.stdout and "worker pool processes" in planned.stdout
