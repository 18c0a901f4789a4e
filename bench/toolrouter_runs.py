"""Measuring toolrouter: API and workers as real processes, driven through the Python client."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from router.cli import processes
from router.client import AsyncClient, Client
from router.clock import wall_clock_ms
from router.runtime import Runtime
from router.settings import Settings
from tests.support.launcher import REPO, Launcher, free_port

from . import audit_fill, costs
from .celery_runs import PAIRED_CELERY_LATENCY, celery_round_trip, celery_worker
from .cli_start import cli_start_ms
from .params import Params
from .plain_clients import plain_clients
from .stats import cpu_ms_per_call, latency_ms, median_rate, rate

CONFIG = Path(__file__).resolve().parent / "toolrouter.yaml"
QUEUES = "tools.low,tools.medium,tools.high"


class Stack:
    """One toolrouter: the API, a worker on every tool queue, the approval worker."""

    def __init__(
        self,
        database_url: str,
        redis_url: str,
        state_dir: Path,
        concurrency: int,
        api_processes: int = 1,
    ):
        state_dir.mkdir(parents=True, exist_ok=True)
        self.database_url = database_url
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLROUTER_")}
        env.update(
            TOOLROUTER_DATABASE_URL=database_url,
            TOOLROUTER_REDIS_URL=redis_url,
            TOOLROUTER_STATE_DIR=str(state_dir),
            TOOLROUTER_CONFIG=str(CONFIG),
            TOOLROUTER_API_PORT=str(self.port),
            TOOLROUTER_API_PROCESSES=str(api_processes),
            PYTHONPATH=str(REPO),
        )
        self.settings = Settings(
            database_url=database_url,
            redis_url=redis_url,
            state_dir=state_dir,
            config=CONFIG,
            api_processes=api_processes,
        )
        self.procs = Launcher(state_dir, env)
        self.concurrency = concurrency
        self.keys: dict[str, str] = {}
        # CPU per call counts Redis's and (on PostgreSQL) the database server's too.
        self.read_cpu = costs.reader(self.procs.processes, costs.servers(redis_url, database_url))

    def start(self) -> None:
        self.keys = prepare(self.settings)
        self.procs.start("api", processes.api_argv(self.settings, port=self.port))
        for name, queues, concurrency in (
            ("worker", QUEUES, self.concurrency),
            ("approvals", "approvals,maintenance", 1),
        ):
            argv = processes.celery("worker", "-Q", queues, "-n", f"bench-{name}@%h")
            argv += ["-P", "prefork", "-c", str(concurrency), "-l", "WARNING"]
            self.procs.start(name, [*argv, "--without-mingle", "--without-gossip"])
        self.procs.wait_for_http("api", f"{self.base_url}/healthz")

    def client(self, who: str = "agent") -> Client:
        return Client(self.base_url, self.keys[who])

    def async_client(self, who: str = "agent") -> AsyncClient:
        return AsyncClient(self.base_url, self.keys[who])

    def stop(self) -> None:
        self.procs.stop_all()


def prepare(settings: Settings) -> dict[str, str]:
    """Migrate the database and make the bench's keys: the agent's and the approver's."""
    runtime = Runtime(settings)
    try:
        runtime.prepare()
        return {
            "agent": runtime.keys.create("bench-agent", ["agent"]),
            "approver": runtime.keys.create("bench-approver", ["approver"]),
        }
    finally:
        runtime.close()


def _ok(result: Any, what: str) -> None:
    if not result.ok:
        raise RuntimeError(f"{what} did not succeed: {result}")


class Served(Protocol):
    """What the throughput runs need of a deployment: a client, and a CPU reading."""

    read_cpu: Callable[[], dict[str, float]]

    def async_client(self, who: str = "agent") -> AsyncClient: ...


async def _throughput(stack: Served, count: int, in_flight: int) -> float:
    """Ungated no-op calls through the AsyncClient, ``in_flight`` at a time, each waited on."""
    gate = asyncio.Semaphore(in_flight)
    async with stack.async_client() as client:

        async def one(i: int) -> None:
            async with gate:
                _ok(await client.call("noop", {"i": i}, wait_s=120), "a throughput call")

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(count)))
        return rate(count, time.perf_counter() - started)


def throughput(
    stack: Served, params: Params, memory: dict[str, Any] | None = None
) -> tuple[list[float], dict[str, float]]:
    """One rate per run (``params.throughput_runs``), and each process's CPU per call.
    With ``memory``, each process's peak resident memory meanwhile goes into it."""

    def timed() -> list[float]:
        return [
            asyncio.run(_throughput(stack, params.throughput_calls, params.in_flight))
            for _ in range(params.throughput_runs)
        ]

    before = stack.read_cpu()
    sampling_cpu_s = 0.0
    if memory is None:
        runs = timed()
    else:
        assert isinstance(stack, Stack)
        with costs.PeakMemory(stack.procs.processes) as peak:
            runs = timed()
        # The sampling thread runs in the client's process: its CPU is not the client's.
        sampling_cpu_s = peak.cpu_s
        memory.update(load_peak=peak.mib(), load_samples=peak.samples)
    after = stack.read_cpu()
    after["client"] -= sampling_cpu_s
    calls = params.throughput_calls * params.throughput_runs
    return runs, cpu_ms_per_call(before, after, calls)


def noop_batch(count: int) -> list[dict[str, Any]]:
    """The calls of one measured batch (a test holds its body to ``json.loads``' path)."""
    return [{"tool": "noop", "args": {"i": i}} for i in range(count)]


def _batch(agent: Client, count: int) -> tuple[float, float]:
    """One batch of ``count`` no-op calls: (submission rate, rate until all finished)."""
    calls = noop_batch(count)
    started = time.perf_counter()
    receipt = agent.batch(calls)
    elapsed = time.perf_counter() - started
    if receipt.accepted != count:
        raise RuntimeError(f"batch not fully accepted: {receipt}")
    deadline = time.monotonic() + 1800
    while not agent.batch_status(receipt.batch_id).done:
        if time.monotonic() > deadline:
            raise RuntimeError("batch did not finish")
        time.sleep(0.2)
    return rate(count, elapsed), rate(count, time.perf_counter() - started)


def batch_runs(agent: Client, params: Params) -> tuple[list[float], list[float]]:
    """``params.batch_runs`` batches, each worked off before the next: each one's submission
    rate and its rate from submission to the last result."""
    submitted, drained = [], []
    for _ in range(params.batch_runs):
        submit_rate, drain_rate = _batch(agent, params.batch_calls)
        submitted.append(submit_rate)
        drained.append(drain_rate)
    return submitted, drained


def warm_up(agent: Client, params: Params) -> None:
    for i in range(params.warmup):
        _ok(agent.call("noop", {"i": i}, wait_s=60), "a warm-up call")


def paired_latency(
    agent: Client, params: Params, redis_url: str, state_dir: Path
) -> tuple[list[float], list[float]]:
    """``Client.call(wait_s=...)`` round trips, each next to one of raw Celery's
    ``delay().get()``, in seconds: (toolrouter's, Celery's).

    A latency of a few milliseconds moves with a shared machine from one minute to the
    next, so runs measured apart would compare the machine, not the code. Taken in turn,
    with both up, each pair sees the same machine, and the ratio is the code's. Which side
    goes first alternates, so neither always runs just after the other."""
    ours: list[float] = []
    celery: list[float] = []

    def our_round_trip(i: int) -> float:
        started = time.perf_counter()
        _ok(agent.call("noop", {"i": i}, wait_s=30), "a latency call")
        return time.perf_counter() - started

    with celery_worker(params, redis_url, state_dir):
        for i in range(params.latency_samples):
            if i % 2:
                celery.append(celery_round_trip(i))
                ours.append(our_round_trip(i))
            else:
                ours.append(our_round_trip(i))
                celery.append(celery_round_trip(i))
    return ours, celery


def run_toolrouter(
    params: Params, database_url: str, redis_url: str, state_dir: Path
) -> dict[str, Any]:
    """Every toolrouter figure on one database; always stops the processes."""
    stack = Stack(database_url, redis_url, state_dir, params.concurrency, params.api_processes)
    stack.start()
    try:
        with stack.client() as agent, stack.client("approver") as approver:
            warm_up(agent, params)
            # Resident memory at idle (warmed up), and its peak under the throughput runs.
            memory: dict[str, Any] = {"idle": costs.rss_mib(stack.procs.processes)}
            runs, cpu = throughput(stack, params, memory)
            figures: dict[str, Any] = {
                "e2e_throughput_per_s": median_rate(runs),
                "e2e_throughput_runs": runs,
                "e2e_cpu_ms_per_call": cpu,
                "rss_mib": {**memory, "sample_interval_s": costs.SAMPLE_INTERVAL_S},
                "plain_clients": plain_clients(
                    stack.base_url, stack.keys["agent"], params, stack.read_cpu
                ),
            }

            ours, celery = paired_latency(agent, params, redis_url, state_dir)
            figures["latency"] = latency_ms(ours)
            figures[PAIRED_CELERY_LATENCY] = latency_ms(celery)

            release = []
            for i in range(params.approval_samples):
                gated = agent.submit("stamp", {"i": i})
                assert gated.request_id is not None and gated.call_id is not None, gated
                approved_at = time.time()
                approver.approve(gated.request_id)
                done = agent.result(gated.call_id, wait_s=30)
                _ok(done, "an approved call")
                release.append(done.value["started"] - approved_at)
            figures["approval_to_start"] = latency_ms(release)
            figures["cli_start"] = cli_start_ms(
                {
                    **stack.procs.env,
                    "TOOLROUTER_KEY": stack.keys["approver"],
                    "TOOLROUTER_API_PORT": str(stack.port),
                },
                params.cli_runs,
            )

            submit_runs, drain_runs = batch_runs(agent, params)
            figures["batch_submit_per_s"] = median_rate(submit_runs)
            figures["batch_submit_runs"] = submit_runs
            figures["batch_end_to_end_per_s"] = median_rate(drain_runs)

        started = time.perf_counter()
        runtime = Runtime(stack.settings)
        try:
            log = runtime.audit
        finally:
            runtime.close()
        added = audit_fill.fill(database_url, log, params.audit_rows, at=wall_clock_ms())
        figures["audit_fill"] = {
            "rows_added": added,
            "rows_total": params.audit_rows,
            "seconds": round(time.perf_counter() - started, 1),
        }
        runs, _ = throughput(stack, params)
        figures["e2e_throughput_full_audit_per_s"] = median_rate(runs)
        figures["e2e_throughput_full_audit_runs"] = runs
        return figures
    finally:
        stack.stop()
