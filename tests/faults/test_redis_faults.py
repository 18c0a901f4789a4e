"""Redis killed with ``kill -9`` and restarted empty while calls are queued (SPEC §2, §6, §15).

Redis is transport, the database the record: every call the API accepted still finishes,
none runs twice, and the workers, beat and the API find the new Redis by themselves.

Each backend gets its own toolrouter on a private ``redis-server`` (no persistence, so a
restart loses every queued and unacked message) on a fixed port, so it can come back on
the same address: API, a worker on the tool queues, the maintenance worker and beat.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
import redis
from sqlalchemy import select

from router.db.schema import calls
from router.runtime import Runtime
from router.status import CallStatus

from ..support import services
from ..support.faults import FAST_RECOVERY, PrivateRedis, ledger_runs
from ..support.stack import Stack, stack_env, start_with_recovery
from ..support.waiting import wait_for, wait_until_finished

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]

BEFORE_KILL = 24  # ledger calls accepted before Redis dies; most of them still queued in it
DURING_OUTAGE = 2  # submissions while Redis is down: refused with 503, never run
AFTER_RESTART = 8  # calls accepted once the empty Redis is back
RUN_S = 0.3  # each ledger run sleeps this long, so a backlog builds up in the queue


@dataclass
class RedisFaultStack:
    stack: Stack
    runtime: Runtime
    redis: PrivateRedis

    def worker_pids(self) -> dict[str, int]:
        return {name: self.stack.processes[name].pid for name in ("tools", "maintenance", "beat")}


@pytest.fixture(scope="module", params=BACKENDS)
def redis_fault_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisFaultStack]:
    backend = request.param
    state_dir = tmp_path_factory.mktemp(f"redis-faults-{backend}")
    private = PrivateRedis(state_dir / "redis", extra=("--maxmemory-policy", "noeviction"))
    private.start()
    databases = services.database_for(backend, state_dir, request)
    env = stack_env(
        database_url=next(databases),
        redis_url=private.url,
        state_dir=state_dir,
        # The reconciler is what heals a Redis that lost its queues: run it often.
        **FAST_RECOVERY,
    )
    stack = Stack(env=env, state_dir=state_dir)
    runtime = Runtime(stack.settings)
    runtime.prepare()
    stack.keys["agent"] = runtime.keys.create("agent", ["agent"])
    try:
        start_with_recovery(stack)
        yield RedisFaultStack(stack, runtime, private)
    finally:
        stack.stop_all()
        runtime.close()
        private.stop()
        databases.close()


def submit(http: httpx.Client, ledger: Path) -> httpx.Response:
    return http.post(
        "/v1/calls", json={"tool": "ledger", "args": {"path": str(ledger), "sleep": RUN_S}}
    )


def accepted_id(response: httpx.Response) -> str:
    body = response.json()
    assert response.status_code == 200 and body["status"] == "queued", body
    return str(body["call_id"])


def test_redis_killed_and_restarted_empty_loses_no_accepted_call_and_runs_none_twice(
    redis_fault_stack: RedisFaultStack, capsys: pytest.CaptureFixture[str]
) -> None:
    stack, runtime, private = (
        redis_fault_stack.stack,
        redis_fault_stack.runtime,
        redis_fault_stack.redis,
    )
    ledger = stack.state_dir / f"ledger-{uuid.uuid4().hex[:8]}.txt"
    pids = redis_fault_stack.worker_pids()
    broker = redis.Redis.from_url(private.url)
    try:
        with stack.client(timeout=60) as http:
            accepted = [accepted_id(submit(http, ledger)) for _ in range(BEFORE_KILL)]
            # Some calls have run, and a backlog waits in Redis: the kill loses that backlog
            # and the messages of the runs in progress (delivered, not yet acked).
            wait_for(lambda: ledger_runs(ledger), 30, "a first run")
            waiting = int(broker.llen(runtime.namespace.prefix + "tools.low"))
            assert waiting >= 5, f"only {waiting} messages queued; the kill would prove little"
            broker.close()
            logs = {name: len(stack.log(name)) for name in ("tools", "maintenance")}
            private.kill()

            # While Redis is down the API refuses calls with 503 instead of storing them for a
            # run nobody was promised.
            refused = []
            for _ in range(DURING_OUTAGE):
                response = submit(http, ledger)
                assert response.status_code == 503, response.text
                body = response.json()
                assert body["ok"] is False and body["error"].startswith("unavailable: broker"), body
                refused.append(body)

            # Both workers have noticed (they are retrying), so they must find Redis again.
            for name, offset in logs.items():
                wait_for(
                    lambda name=name, offset=offset: (
                        "Connection to broker lost" in stack.log(name)[offset:]
                    ),
                    30,
                    f"{name} noticing the lost broker",
                )
            private.start()  # same port, empty: no queue, no unacked message survived
            assert broker.llen(runtime.namespace.prefix + "tools.low") == 0
            after = [accepted_id(submit(http, ledger)) for _ in range(AFTER_RESTART)]
        accepted += after
        rows = wait_until_finished(runtime, accepted, timeout=90)
    finally:
        broker.close()

    runs = ledger_runs(ledger)
    lost = [
        c
        for c in accepted
        if (row := rows[c]) is None or row.status != CallStatus.SUCCEEDED or not runs.get(c)
    ]
    doubled = [c for c in accepted if runs.get(c, 0) > 1]
    # A refused call was stored, then failed on the spot: it never runs behind the caller's back.
    with runtime.store.reading() as conn:
        refused_rows = conn.execute(
            select(calls.c.id, calls.c.status).where(calls.c.error_type == "Unavailable")
        ).all()
    strangers = sorted(set(runs) - set(accepted))
    with capsys.disabled():
        print(
            f"\n[{runtime.engine.dialect.name}] redis kill -9 + empty restart:"
            f" queued_at_kill={waiting} accepted={len(accepted)} refused={len(refused)}"
            f" finished={sum(1 for c in accepted if c not in lost)} lost={len(lost)}"
            f" doubled={len(doubled)}"
        )

    details = {c: (rows[c].status if rows[c] else None, runs.get(c, 0)) for c in lost + doubled}
    assert lost == [], details
    assert doubled == [], details
    assert strangers == []
    assert len(refused_rows) == DURING_OUTAGE
    assert {row.status for row in refused_rows} == {CallStatus.FAILED}
    # Nobody restarted anything: the same worker, maintenance worker and beat processes
    # reconnected by themselves and ran the calls accepted after the restart.
    assert redis_fault_stack.worker_pids() == pids
    for pid in pids.values():
        assert psutil.Process(pid).is_running()
