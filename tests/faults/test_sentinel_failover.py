"""Redis behind Sentinel: the primary killed with SIGKILL under load, a replica promoted.

A real group on loopback (a primary, a replica, three sentinels: ``tests.support.sentinel``)
and a toolrouter given only the sentinels' addresses and the primary's name. Calls of three
kinds keep coming (not idempotent, idempotent, gated and then approved) while the primary
dies. Every call the API accepted finishes, none that is not idempotent runs twice, the
API answers 503 and never 500 while no primary answers, and it takes calls again by itself.
Replication is asynchronous, so messages the replica had not received are lost with the
primary: the reconciler publishes them again from the database.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from router.runtime import Runtime
from router.status import CallStatus

from ..support import services
from ..support.faults import FAST_RECOVERY, ledger_runs
from ..support.sentinel import MASTER, SentinelGroup, redis_server
from ..support.stack import Stack, stack_env, start_with_recovery
from ..support.waiting import wait_for, wait_until_finished

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
# Calls accepted before the kill, and after the API takes calls again.
BEFORE = 24
AFTER = 12
KINDS = ("ledger", "ledger_idempotent", "gated_ledger")


@dataclass
class Load:
    """What the agent was told, call by call, and when."""

    accepted: dict[str, str] = field(default_factory=dict)  # call id -> tool
    pending: list[tuple[str, str]] = field(default_factory=list)  # (call id, request id)
    # (when, HTTP status, error, tool): every answer the agents and the approver had.
    statuses: list[tuple[float, int, str, str]] = field(default_factory=list)


@pytest.fixture(scope="module", params=BACKENDS)
def sentinel_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Stack, Runtime, SentinelGroup]]:
    if redis_server() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is missing; CI must run the Sentinel failover")
        pytest.skip("redis-server is not installed")
    state_dir = tmp_path_factory.mktemp(f"sentinel-{request.param}")
    group = SentinelGroup(state_dir / "redis")
    group.start()
    databases = services.database_for(request.param, state_dir, request)
    env = stack_env(
        database_url=next(databases),
        redis_url=group.url,
        state_dir=state_dir,
        TOOLROUTER_REDIS_SENTINEL_MASTER=MASTER,
        # Messages the replica never received are published again from the database.
        **FAST_RECOVERY,
    )
    stack = Stack(env=env, state_dir=state_dir)
    runtime = Runtime(stack.settings)
    runtime.prepare()
    stack.keys["agent"] = runtime.keys.create("agent", ["agent"])
    stack.keys["approver"] = runtime.keys.create("approver", ["approver"])
    try:
        start_with_recovery(stack)
        stack.start_worker(name="approvals", queues="approvals", concurrency=1)
        yield stack, runtime, group
    finally:
        stack.stop_all()
        runtime.close()
        group.stop()
        databases.close()


def submit(http: httpx.Client, load: Load, tool: str, ledger: Path) -> int:
    response = http.post("/v1/calls", json={"tool": tool, "args": {"path": str(ledger)}})
    body = response.json()
    load.statuses.append((time.monotonic(), response.status_code, body.get("error") or "", tool))
    if response.status_code == 200:
        load.accepted[body["call_id"]] = tool
        if body["status"] == CallStatus.PENDING:
            load.pending.append((body["call_id"], body["request_id"]))
    return response.status_code


def approve_all(stack: Stack, load: Load) -> None:
    """Approve every pending call, again after a 503 (no primary yet) until it takes."""
    with stack.client("approver", timeout=30) as http:
        for _, request_id in load.pending:

            def approved(request_id: str = request_id) -> bool:
                answer = http.post(f"/v1/approvals/{request_id}/approve", json={})
                error = answer.json().get("error") or ""
                load.statuses.append((time.monotonic(), answer.status_code, error, "approve"))
                return answer.status_code == 200

            wait_for(approved, 60, f"approval of {request_id}")


def published_after(load: Load, since: float) -> list[float]:
    """When ungated calls (published to Redis at once) were accepted after ``since``."""
    return [
        at
        for at, code, _, tool in load.statuses
        if at > since and code == 200 and tool in ("ledger", "ledger_idempotent")
    ]


def test_primary_killed_under_load_loses_nothing_and_runs_nothing_twice(
    sentinel_stack: tuple[Stack, Runtime, SentinelGroup], capsys: pytest.CaptureFixture[str]
) -> None:
    stack, runtime, group = sentinel_stack
    ledger = stack.state_dir / f"ledger-{uuid.uuid4().hex[:8]}.txt"
    load = Load()
    old_primary = group.primary_port()
    stop = threading.Event()
    with stack.client(timeout=60) as http:
        for i in range(BEFORE):
            assert submit(http, load, KINDS[i % len(KINDS)], ledger) == 200
        wait_for(lambda: ledger_runs(ledger), 30, "a first run")

        # Calls keep coming from a second agent while the primary dies.
        def keep_submitting() -> None:
            with stack.client(timeout=60) as agent:
                i = 0
                while not stop.is_set():
                    submit(agent, load, KINDS[i % len(KINDS)], ledger)
                    i += 1

        agent = threading.Thread(target=keep_submitting, daemon=True)
        agent.start()
        wait_for(lambda: len(load.accepted) > BEFORE + 3, 30, "calls from the second agent")
        killed_at = group.kill_primary()
        wait_for(lambda: group.primary_port() not in (None, old_primary), 60, "a new primary")
        promoted_at = time.monotonic()

        def taking_calls_again() -> bool:
            return bool(published_after(load, promoted_at))

        wait_for(taking_calls_again, 60, "the API taking calls after the failover")
        stop.set()
        agent.join(timeout=60)
        for i in range(AFTER):
            tool = KINDS[i % len(KINDS)]
            wait_for(lambda tool=tool: submit(http, load, tool, ledger) == 200, 30, "a call")
    approve_all(stack, load)
    rows = wait_until_finished(runtime, list(load.accepted), timeout=120)

    runs = ledger_runs(ledger)
    lost = [c for c in load.accepted if rows[c] is None or rows[c].status != CallStatus.SUCCEEDED]
    doubled = [
        c for c, tool in load.accepted.items() if tool != "ledger_idempotent" and runs.get(c, 0) > 1
    ]
    unrun = [c for c in load.accepted if not runs.get(c)]
    codes = sorted({code for _, code, _, _ in load.statuses})
    refused = [(at, error) for at, code, error, _ in load.statuses if code == 503]
    # The window in which the API refused: from the kill to its last 503.
    refusing = max((at for at, _ in refused), default=killed_at) - killed_at
    with capsys.disabled():
        print(
            f"\n[{runtime.engine.dialect.name}] sentinel failover: accepted={len(load.accepted)}"
            f" gated={len(load.pending)} refused_503={len(refused)} lost={len(lost)}"
            f" doubled={len(doubled)} new_primary_after={promoted_at - killed_at:.2f}s"
            f" last_503_after={refusing:.2f}s statuses={codes}"
        )
    assert set(codes) <= {200, 503}, codes
    assert all(error.startswith("unavailable") for _, error in refused), refused[:3]
    assert lost == [], {c: rows[c].status if rows[c] else None for c in lost}
    assert unrun == []
    assert doubled == [], {c: runs[c] for c in doubled}
