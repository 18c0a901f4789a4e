"""Route latency, p50 and p99, three ways: in process, ``ToolIndex``'s methods (the ranking
alone) and ``routing.route`` (what the API's ranker runs, the ranking and the registry
around it); and over HTTP (``POST /v1/route`` against a real API process started on a
generated config, what an agent waits).

Requests go one at a time. The strategies take turns request by request, so each sees the
same machine; the samples are taken in rounds, and each figure is the median of the
rounds' (a shared machine's speed moves from one minute to the next)."""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from router.cli import processes
from router.runtime import Runtime
from router.settings import Settings
from router.tools.registry import ToolRegistry
from router.tools.routing import Strategy, route
from router.tools.selection.index import ToolIndex
from tests.support.launcher import REPO, Launcher

from ..stats import percentile
from .dataset import Request, write_config

STRATEGIES = ("lexical", "semantic", "hybrid")
# What POST /v1/route answers when a request names no limit.
LIMIT = 10
PORT = 8741
REDIS_URL = "redis://127.0.0.1:6379/7"
STATE = Path("/tmp/bench_ts/state")

Timed = Callable[[str, str], None]


def measure(
    call: Timed, requests: Sequence[Request], *, warmup: int, rounds: int
) -> dict[str, dict[str, Any]]:
    """``call(strategy, task)`` timed for every strategy on each request, after ``warmup``
    untimed requests; ``requests`` split into ``rounds`` rounds."""
    for request in requests[:warmup]:
        for strategy in STRATEGIES:
            call(strategy, request.text)
    timed = list(requests[warmup:])
    per_round = max(1, len(timed) // rounds)
    samples: dict[str, list[list[float]]] = {s: [] for s in STRATEGIES}
    for start in range(0, per_round * rounds, per_round):
        taken: dict[str, list[float]] = {s: [] for s in STRATEGIES}
        for i, request in enumerate(timed[start : start + per_round]):
            # A different strategy leads on each request, so none always runs cold.
            order = STRATEGIES[i % 3 :] + STRATEGIES[: i % 3]
            for strategy in order:
                began = time.perf_counter()
                call(strategy, request.text)
                taken[strategy].append((time.perf_counter() - began) * 1000)
        for strategy in STRATEGIES:
            samples[strategy].append(taken[strategy])
    return {s: _figures(samples[s]) for s in STRATEGIES}


def _figures(rounds: list[list[float]]) -> dict[str, Any]:
    p50s = [percentile(r, 50) for r in rounds if r]
    p99s = [percentile(r, 99) for r in rounds if r]
    return {
        "p50_ms": round(statistics.median(p50s), 3),
        "p99_ms": round(statistics.median(p99s), 3),
        "rounds_p50_ms": [round(x, 3) for x in p50s],
        "rounds_p99_ms": [round(x, 3) for x in p99s],
        "samples": sum(len(r) for r in rounds),
    }


def in_process(
    index: ToolIndex, requests: Sequence[Request], *, warmup: int, rounds: int
) -> dict[str, dict[str, Any]]:
    """The ranking alone: ``ToolIndex``'s method for each strategy."""
    methods = {"lexical": index.lexical, "semantic": index.semantic, "hybrid": index.hybrid}

    def call(strategy: str, task: str) -> None:
        methods[strategy](task, limit=LIMIT)

    return measure(call, requests, warmup=warmup, rounds=rounds)


def via_route(
    registry: ToolRegistry,
    index: ToolIndex,
    requests: Sequence[Request],
    *,
    warmup: int,
    rounds: int,
) -> dict[str, dict[str, Any]]:
    """``routing.route`` with the index built: what the API's ranker runs per request."""

    def call(strategy: str, task: str) -> None:
        route(registry, task=task, strategy=Strategy(strategy), index=index, limit=LIMIT)

    return measure(call, requests, warmup=warmup, rounds=rounds)


def over_http(
    tools: Sequence[dict[str, Any]], requests: Sequence[Request], *, warmup: int, rounds: int
) -> dict[str, Any]:
    """The same, through a real API process serving a config of ``tools``."""
    with api(tools) as (base_url, key, started_s):
        auth = {"Authorization": f"Bearer {key}"}
        http = httpx.Client(base_url=base_url, headers=auth)

        def call(strategy: str, task: str) -> None:
            response = http.post(
                "/v1/route", json={"task": task, "strategy": strategy, "limit": LIMIT}
            )
            body = response.json()
            if response.status_code != 200 or body.get("strategy") != strategy:
                raise RuntimeError(f"POST /v1/route: {response.status_code} {body}")

        try:
            figures: dict[str, Any] = measure(call, requests, warmup=warmup, rounds=rounds)
        finally:
            http.close()
    figures["api_ready_s"] = round(started_s, 1)
    return figures


@contextmanager
def api(tools: Sequence[dict[str, Any]]) -> Iterator[tuple[str, str, float]]:
    """A real API on ``PORT``, SQLite in its own state folder and Redis db 7, serving a
    config of ``tools``: (its URL, an agent key, seconds until it answered)."""
    if _listening(PORT):
        raise RuntimeError(f"port {PORT} is taken: stop what listens there first")
    state_dir = STATE / f"tools_{len(tools)}"
    shutil.rmtree(state_dir, ignore_errors=True)
    config = write_config(tools, state_dir / "tools.yaml")
    database_url = f"sqlite:///{state_dir / 'toolrouter.db'}"
    # Key material outside the state folder, as toolrouter wants it, and outside $HOME.
    secrets_dir = STATE / "secrets"
    settings = Settings(
        database_url=database_url,
        redis_url=REDIS_URL,
        state_dir=state_dir,
        config=config,
        secrets_dir=secrets_dir,
    )
    runtime = Runtime(settings)
    try:
        runtime.prepare()
        key = runtime.keys.create("bench-route", ["agent"])
    finally:
        runtime.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLROUTER_")}
    env.update(
        TOOLROUTER_DATABASE_URL=database_url,
        TOOLROUTER_REDIS_URL=REDIS_URL,
        TOOLROUTER_STATE_DIR=str(state_dir),
        TOOLROUTER_CONFIG=str(config),
        TOOLROUTER_SECRETS_DIR=str(secrets_dir),
        TOOLROUTER_API_PORT=str(PORT),
        PYTHONPATH=str(REPO),
    )
    launcher = Launcher(state_dir, env)
    began = time.perf_counter()
    launcher.start("api", processes.api_argv(settings, host="127.0.0.1", port=PORT))
    try:
        base_url = f"http://127.0.0.1:{PORT}"
        launcher.wait_for_http("api", f"{base_url}/healthz", timeout=300)
        yield base_url, key, time.perf_counter() - began
    finally:
        launcher.stop_all()


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
