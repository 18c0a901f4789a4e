"""``python -m bench.capacity``: what a target rate needs, from measured per-call costs.

``check`` measures a toolrouter on this machine with 1 and then 2 worker pool processes:
calls per second end to end, each process's CPU per call, Redis commands per call and (on
PostgreSQL) transactions per call, and writes them to ``bench/results/capacity.json``. It
then predicts the 2-process rate from the 1-process run and prints both.

``plan --rate R`` reads that file and says what R calls per second need: API processes,
worker pool processes and cores, and the database's and Redis's load.

The model: a call occupies a pool process for ``t_pool`` ms (its CPU and its waits on the
database and Redis), and costs each component its CPU ms. So ``n`` pool processes carry at
most ``n * 1000 / t_pool`` calls per second, and a machine of ``k`` cores at most
``k * 1000 / (CPU ms of everything on it)``; the rate is the smaller of the two.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import redis

from .params import Params
from .run import RESULTS, fresh_database
from .stats import median_rate
from .toolrouter_runs import Stack, throughput, warm_up

OUTPUT = RESULTS / "capacity.json"
POOLS = (1, 2)


def redis_commands(url: str) -> int:
    with redis.Redis.from_url(url) as client:
        return int(client.info("stats")["total_commands_processed"])


def measure(args: argparse.Namespace, pool: int, work: Path) -> dict[str, Any]:
    """End to end with ``pool`` pool processes: rate, CPU ms per call, Redis commands."""
    with fresh_database(args, args.backend, work / f"pool-{pool}") as url:
        stack = Stack(url, args.redis_url, work / f"pool-{pool}", pool)
        params = Params(throughput_calls=args.calls, throughput_runs=args.runs, concurrency=pool)
        stack.start()
        try:
            with stack.client() as agent:
                warm_up(agent, params)
            commands = redis_commands(args.redis_url)
            rates, cpu = throughput(stack, params)
            commands = redis_commands(args.redis_url) - commands
        finally:
            stack.stop()
    calls = args.calls * args.runs
    rate = median_rate(rates)
    return {
        "pool_processes": pool,
        "calls_per_s": rate,
        "runs": rates,
        "cpu_ms_per_call": cpu,
        # Every client of the Redis server counts: check on a Redis nothing else uses.
        "redis_commands_per_call": round(commands / calls, 2),
        # How long a call holds a pool process, waits included.
        "t_pool_ms": round(pool * 1000 / rate, 3),
    }


def predict(base: dict[str, Any], pool: int, cores: int) -> dict[str, float]:
    """The rate ``pool`` pool processes reach on ``cores`` cores, from one measured run."""
    by_pool = pool * 1000 / base["t_pool_ms"]
    by_cpu = cores * 1000 / sum(v for v in base["cpu_ms_per_call"].values() if not math.isnan(v))
    return {"by_pool": round(by_pool, 1), "by_cpu": round(by_cpu, 1), "rate": min(by_pool, by_cpu)}


def check(args: argparse.Namespace) -> dict[str, Any]:
    redis.Redis.from_url(args.redis_url).flushdb()
    with tempfile.TemporaryDirectory(prefix="toolrouter-capacity-") as tmp:
        runs = {str(pool): measure(args, pool, Path(tmp)) for pool in POOLS}
    cores = len(os.sched_getaffinity(0))
    predicted = predict(runs["1"], 2, cores)
    found = {
        "backend": args.backend,
        "cores": cores,
        "runs": runs,
        "predicted_2_from_1": predicted,
        "measured_2": runs["2"]["calls_per_s"],
        "error": round(predicted["rate"] / runs["2"]["calls_per_s"] - 1, 3),
    }
    for pool, run in runs.items():
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in run["cpu_ms_per_call"].items())
        print(
            f"{pool} pool process(es): {run['calls_per_s']:,.1f} calls/s, t_pool"
            f" {run['t_pool_ms']:.2f} ms, CPU ms per call: {cpu},"
            f" Redis commands per call {run['redis_commands_per_call']}"
        )
    print(
        f"model from the 1-process run, 2 processes on {cores} cores: {predicted['rate']:,.1f}"
        f" calls/s (pool bound {predicted['by_pool']:,.1f}, CPU bound {predicted['by_cpu']:,.1f});"
        f" measured {found['measured_2']:,.1f} ({found['error']:+.0%})"
    )
    return found


def plan(rate: float, measured: dict[str, Any], headroom: float) -> list[str]:
    """What ``rate`` calls per second need, each resource run at ``headroom`` of its capacity."""
    base = measured["runs"][str(max(POOLS))]
    cpu = base["cpu_ms_per_call"]

    def cores(component: str) -> float:
        return rate * cpu.get(component, 0.0) / 1000 / headroom

    lines = [
        f"for {rate:,.0f} calls/s at {headroom:.0%} of each resource"
        f" (costs measured on {measured['backend']}, {measured['cores']} cores):",
        f"  API processes (one core each): {math.ceil(cores('api'))}",
        f"  worker pool processes: {math.ceil(rate * base['t_pool_ms'] / 1000 / headroom)}",
        f"  worker cores: {cores('worker'):.1f}",
        f"  Redis: {rate * base['redis_commands_per_call']:,.0f} commands/s,"
        f" {cores('redis'):.2f} cores",
    ]
    if "database" in cpu:
        lines.append(f"  PostgreSQL: {cores('database'):.1f} cores")
    else:
        lines.append("  database: SQLite, inside the API and worker processes (one machine)")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    checking = sub.add_parser("check", help="measure at 1 and 2 pool processes")
    checking.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    checking.add_argument("--redis-url", default="redis://127.0.0.1:6379/9")
    checking.add_argument(
        "--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    checking.add_argument("--pg-database", default="toolrouter_capacity")
    checking.add_argument("--calls", type=int, default=3000)
    checking.add_argument("--runs", type=int, default=3)
    checking.add_argument("--output", type=Path, default=OUTPUT)
    planning = sub.add_parser("plan", help="what a rate needs, from a check's results")
    planning.add_argument("--rate", type=float, required=True)
    planning.add_argument("--headroom", type=float, default=0.6)
    planning.add_argument("--input", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    if args.command == "check":
        found = check(args)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
        print(f"written to {args.output}")
        return
    if not args.input.exists():
        raise SystemExit(f"no measurements at {args.input}: run `python -m bench.capacity check`")
    measured = json.loads(args.input.read_text(encoding="utf-8"))
    print("\n".join(plan(args.rate, measured, args.headroom)))


if __name__ == "__main__":
    main()
