"""``python -m bench``: raw Celery and toolrouter (SQLite, PostgreSQL) in one run, one table.

Everything runs on this machine, against one Redis database (db 9 by default; never the
test-suite's 10-15) and a dedicated PostgreSQL database created and dropped by the run.
Figures go to the terminal and, as JSON, to ``bench/results/latest.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import create_engine, text

from router.db.engine import make_engine
from router.db.migrate import upgrade

from .celery_runs import pooled, run_baseline, summary
from .params import FULL, SMOKE, Params
from .report import table
from .targets import judge
from .toolrouter_runs import run_toolrouter
from .up_runs import run_up

RESULTS = Path(__file__).resolve().parent / "results"
TEST_DBS = range(10, 16)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a tiny run, under a minute")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/9")
    parser.add_argument(
        "--pg-url",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="an admin connection; the run creates and drops its own database next to it",
    )
    parser.add_argument("--pg-database", default="toolrouter_bench")
    parser.add_argument(
        "--backends", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql"
    )
    parser.add_argument("--audit-rows", type=int, default=None, help="scale the audit table down")
    parser.add_argument(
        "--api-processes", type=int, default=None, help="API processes on its port (1)"
    )
    parser.add_argument(
        "--up",
        action="store_true",
        help="also measure `toolrouter up` as a user starts it (Flower included)",
    )
    parser.add_argument(
        "--output", type=Path, default=None, help="a JSON file; default: bench/results/latest.json"
    )
    return parser.parse_args(argv)


def _check_redis(url: str) -> None:
    db = int(url.rsplit("/", 1)[1]) if url.rsplit("/", 1)[1].isdigit() else 0
    if db in TEST_DBS:
        raise SystemExit(f"refusing Redis db {db}: dbs 10-15 belong to the test-suite")
    redis.Redis.from_url(url).flushdb()


def quiet_disk() -> None:
    """Write out what earlier parts of the run left dirty in the page cache.

    The SQLite part's million-row fill leaves a great deal of it, and a commit that waits
    for its log to reach the disk (PostgreSQL's) waits behind all of it. Each part is
    measured on a disk with nothing else to write."""
    os.sync()


def _admin(url: str, statement: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(statement))
    engine.dispose()


def _machine() -> dict[str, Any]:
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def load() -> dict[str, Any]:
    """How busy the machine was: the run shares it with whatever else is running."""
    pressure: dict[str, float] = {}
    path = Path("/proc/pressure/cpu")
    if path.exists():
        first = path.read_text().splitlines()[0].split()[1:]
        pressure = {k: float(v) for k, v in (item.split("=") for item in first) if k != "total"}
    return {
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cpu_pressure_some": pressure,
        "steal_s": _steal_s(),
    }


def _steal_s() -> float | None:
    """CPU time the hypervisor gave to other guests since boot, in seconds: on a shared
    virtual machine the difference between two readings shows a run that was starved."""
    stat = Path("/proc/stat")
    if not stat.exists():
        return None
    fields = stat.read_text().splitlines()[0].split()
    return round(int(fields[8]) / os.sysconf("SC_CLK_TCK"), 1) if len(fields) > 8 else None


@contextmanager
def fresh_database(args: argparse.Namespace, backend: str, state: Path) -> Iterator[str]:
    """An empty database for one part: SQLite in ``state``, or PostgreSQL's bench
    database created, migrated, and dropped afterwards."""
    if backend == "sqlite":
        state.mkdir()
        yield f"sqlite:///{state / 'bench.db'}"
        return
    database = args.pg_database
    _admin(args.pg_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    _admin(args.pg_url, f"CREATE DATABASE {database}")
    url = args.pg_url.rsplit("/", 1)[0] + "/" + database
    try:
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        yield url
    finally:
        _admin(args.pg_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    params: Params = SMOKE if args.smoke else FULL
    if args.audit_rows is not None:
        params = Params(**{**params.to_dict(), "audit_rows": args.audit_rows})
    if args.api_processes is not None:
        params = Params(**{**params.to_dict(), "api_processes": args.api_processes})
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": _machine(),
        "smoke": bool(args.smoke),
        "params": params.to_dict(),
        "toolrouter": {},
        "load": {"start": load()},
    }
    with tempfile.TemporaryDirectory(prefix="toolrouter-bench-") as tmp:
        work = Path(tmp)
        # The baseline runs before each backend and once more at the end, and each backend
        # is compared with the runs just before and after it: the host this runs on is
        # shared, and its speed drifts over the length of a full run.
        baselines: list[dict[str, Any]] = []

        def baseline(when: str) -> None:
            quiet_disk()
            _check_redis(args.redis_url)
            print(f"raw Celery ({when}) …", flush=True)
            logs = work / f"celery-{len(baselines)}"
            logs.mkdir()
            baselines.append(run_baseline(params, args.redis_url, logs))

        for backend in backends:
            baseline(f"before {backend}")
            quiet_disk()
            _check_redis(args.redis_url)
            print(f"toolrouter on {backend} …", flush=True)
            report["load"][f"before {backend}"] = load()
            with fresh_database(args, backend, work / backend) as url:
                report["toolrouter"][backend] = run_toolrouter(
                    params, url, args.redis_url, work / backend
                )
            if args.up:
                quiet_disk()
                _check_redis(args.redis_url)
                print(f"toolrouter up on {backend} …", flush=True)
                with fresh_database(args, backend, work / f"up-{backend}") as url:
                    report.setdefault("up", {})[backend] = run_up(
                        params, url, args.redis_url, work / f"up-{backend}"
                    )
        baseline("at the end")
        redis.Redis.from_url(args.redis_url).flushdb()
    report["baseline"] = pooled(baselines)
    # Each backend against the baseline runs just before and just after it.
    report["baseline_for"] = {
        backend: pooled(baselines[i : i + 2]) for i, backend in enumerate(backends)
    }
    report["baseline_runs"] = [summary(run) for run in baselines]
    report["load"]["end"] = load()
    report["targets"] = judge(report)
    return report


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    report = run(args)
    output = args.output or RESULTS / ("smoke.json" if args.smoke else "latest.json")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table(report))
    print(f"\nwritten to {output}")
