"""End to end through the plain HTTP clients agents already use: ``httpx`` and ``aiohttp``.

Each call is a submit-and-wait, ``POST /v1/calls`` with ``wait_s`` and the agent's key as a
Bearer token, its JSON answer read and checked, at 16 and at 64 calls in flight. Each run
opens one ``httpx.AsyncClient`` or one ``aiohttp.ClientSession`` (the timing starts once it
is open, so connecting is timed) with the library's own connection limits, as an agent
that does not tune them has: httpx keeps 20 connections alive of at most 100, aiohttp
keeps up to 100. Raising httpx's keep-alive to the calls in flight makes it slower at 64:
its pool checks every pooled connection on each request (see the benchmarks page).

The runs of the four (client, in flight) pairs are taken in turn, run by run, so a machine
that slows down meanwhile weighs on all of them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import httpx

from .params import Params
from .stats import cpu_ms_per_call, median_rate, rate

IN_FLIGHT = (16, 64)
WAIT_S = 120
LIMITS = {
    "httpx": "httpx's defaults: 100 connections, 20 kept alive",
    "aiohttp": "aiohttp's defaults: 100 connections, all kept alive",
}

Run = Callable[[str, str, int, int], Coroutine[Any, Any, float]]


def _body(i: int) -> dict[str, Any]:
    return {"tool": "noop", "args": {"i": i}, "wait_s": WAIT_S}


def _check(status: int, answer: Any) -> None:
    if status != 200 or not isinstance(answer, dict) or not answer.get("ok"):
        raise RuntimeError(f"a plain-client call did not succeed: HTTP {status} {answer!r}")


async def httpx_run(base_url: str, key: str, count: int, in_flight: int) -> float:
    """``count`` calls through one ``httpx.AsyncClient``, ``in_flight`` at a time: calls/s."""
    headers = {"Authorization": f"Bearer {key}"}
    gate = asyncio.Semaphore(in_flight)
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=WAIT_S + 30) as client:

        async def one(i: int) -> None:
            async with gate:
                response = await client.post("/v1/calls", json=_body(i))
                _check(response.status_code, response.json())

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(count)))
        return rate(count, time.perf_counter() - started)


async def aiohttp_run(base_url: str, key: str, count: int, in_flight: int) -> float:
    """``count`` calls through one ``aiohttp.ClientSession``, ``in_flight`` at a time."""
    headers = {"Authorization": f"Bearer {key}"}
    gate = asyncio.Semaphore(in_flight)
    timeout = aiohttp.ClientTimeout(total=WAIT_S + 30)
    async with aiohttp.ClientSession(
        base_url=base_url, headers=headers, timeout=timeout
    ) as session:

        async def one(i: int) -> None:
            async with gate, session.post("/v1/calls", json=_body(i)) as response:
                _check(response.status, await response.json())

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(count)))
        return rate(count, time.perf_counter() - started)


CLIENTS: dict[str, Run] = {"httpx": httpx_run, "aiohttp": aiohttp_run}


def plain_clients(
    base_url: str, key: str, params: Params, read_cpu: Callable[[], dict[str, float]]
) -> dict[str, Any]:
    """Per client and calls in flight: the median rate of ``params.throughput_runs`` runs,
    each run's rate, and each process's CPU per call over those runs."""
    pairs = [(client, n) for client in CLIENTS for n in IN_FLIGHT]
    runs: dict[tuple[str, int], list[float]] = {pair: [] for pair in pairs}
    used: dict[tuple[str, int], dict[str, float]] = {pair: {} for pair in pairs}
    for _ in range(params.throughput_runs):
        for client, n in pairs:
            before = read_cpu()
            runs[client, n].append(
                asyncio.run(CLIENTS[client](base_url, key, params.throughput_calls, n))
            )
            after = read_cpu()
            for name in after:
                if name in before:
                    spent = after[name] - before[name]
                    used[client, n][name] = used[client, n].get(name, 0.0) + spent
    calls = params.throughput_calls * params.throughput_runs
    found: dict[str, Any] = {"limits": LIMITS}
    for client, n in pairs:
        found.setdefault(client, {})[str(n)] = {
            "per_s": median_rate(runs[client, n]),
            "runs": runs[client, n],
            "cpu_ms_per_call": cpu_ms_per_call(
                dict.fromkeys(used[client, n], 0.0), used[client, n], calls
            ),
        }
    return found
