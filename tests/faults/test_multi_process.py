"""Several processes on one PostgreSQL database (SPEC §2, §5, §15).

Three API processes, two workers on the tool queues and the approval worker share one
database and one Redis. Each gated call is requested through one API; three approvers race
to approve it, each through a different API; the call runs once (counted by its ledger),
and its result reads the same through the third API.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from router.cli import processes
from router.runtime import Runtime

from ..support import services
from ..support.faults import ledger_runs
from ..support.launcher import free_port, wait_for_http, wait_for_log
from ..support.stack import Stack, stack_env, worker_argv

# A Redis db of its own (the suite's dbs are 11-15); flushed before and after.
REDIS_DB = 10
TOOL_QUEUES = "tools.low,tools.medium,tools.high"
ROUNDS = 8
APPROVERS = ("approver", "approver2", "approver3")
KEYS = {
    "agent": ["agent"],
    "operator": ["operator"],
    **{name: ["approver"] for name in APPROVERS},
}


@dataclass
class Cluster:
    stack: Stack
    apis: list[str] = field(default_factory=list)

    def client(self, api: int, key: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.apis[api % len(self.apis)],
            headers={"Authorization": f"Bearer {self.stack.keys[key]}"},
            timeout=60,
        )


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    state_dir = tmp_path_factory.mktemp("multi")
    databases = services.database_for("postgresql", state_dir, request)
    redis_url = f"{redis_base}/{REDIS_DB}"
    services.flush(redis_url)
    stack = Stack(
        env=stack_env(database_url=next(databases), redis_url=redis_url, state_dir=state_dir),
        state_dir=state_dir,
    )
    runtime = Runtime(stack.settings)
    runtime.prepare()
    for name, roles in KEYS.items():
        stack.keys[name] = runtime.keys.create(name, roles)
    runtime.close()
    the_cluster = Cluster(stack)
    try:
        workers = {
            "worker1": worker_argv("worker1", TOOL_QUEUES, concurrency=2),
            "worker2": worker_argv("worker2", TOOL_QUEUES, concurrency=2),
            "approvals": worker_argv("approvals", "approvals,maintenance", concurrency=1),
        }
        for name, argv in workers.items():
            stack.start(name, argv)
        for index in range(3):
            port = free_port()
            stack.start(f"api{index}", processes.api_argv(stack.settings, port=port))
            the_cluster.apis.append(f"http://127.0.0.1:{port}")
        for index, url in enumerate(the_cluster.apis):
            name = f"api{index}"
            wait_for_http(f"{url}/healthz", stack.processes[name], stack.log(name))
        for name in workers:
            wait_for_log(state_dir / f"{name}.log", "ready.", stack.processes[name])
        yield the_cluster
    finally:
        stack.stop_all()
        services.flush(redis_url)
        databases.close()


@pytest.mark.postgres
def test_request_issued_through_one_api_and_approved_through_another_runs_once(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = cluster.stack.state_dir / f"ledger-{uuid.uuid4().hex[:8]}.txt"
    results: dict[str, dict[str, object]] = {}
    decisions: list[tuple[int, int, str]] = []  # (round, status code, approver)
    barrier = threading.Barrier(len(APPROVERS))

    def approve(round_: int, approver: int, request_id: str) -> tuple[int, int, str]:
        name = APPROVERS[approver]
        # Approver n decides through API (round + 1 + n): all three APIs, a different one
        # from the requester's each time but one.
        with cluster.client(round_ + 1 + approver, name) as http:
            barrier.wait(timeout=30)
            response = http.post(f"/v1/approvals/{request_id}/approve", json={"reason": "ok"})
        body = response.json()
        if response.status_code == 200:
            assert body["status"] == "approved" and body["released"] is True, body
        else:
            assert (response.status_code, body) == (
                404,
                {"ok": False, "error": f"unknown request: {request_id}"},
            ), body
        return round_, response.status_code, name

    with ThreadPoolExecutor(max_workers=len(APPROVERS)) as pool:
        for round_ in range(ROUNDS):
            with cluster.client(round_, "agent") as http:
                submitted = http.post(
                    "/v1/calls",
                    json={"tool": "gated_ledger", "args": {"path": str(ledger), "round": round_}},
                ).json()
            assert submitted["status"] == "pending", submitted
            request_id, call_id = submitted["request_id"], submitted["call_id"]
            decisions += pool.map(
                lambda n, r=round_, q=request_id: approve(r, n, q), range(len(APPROVERS))
            )
            with cluster.client(round_ + 2, "agent") as http:
                result = http.get(f"/v1/calls/{call_id}", params={"wait_s": 30}).json()
            with cluster.client(round_ + 2, "operator") as http:
                assert http.get(f"/v1/calls/{call_id}").json() == result
            results[call_id] = result

    runs = ledger_runs(Path(ledger))
    released = [d for d in decisions if d[1] == 200]
    refused = [d for d in decisions if d[1] == 404]
    doubled = [c for c, n in runs.items() if n > 1]
    lost = [c for c, r in results.items() if r.get("status") != "succeeded" or c not in runs]
    with capsys.disabled():
        print(
            f"\n[postgresql] 3 APIs, 2 workers, approval worker: requests={ROUNDS}"
            f" approvals_sent={len(decisions)} released={len(released)}"
            f" refused={len(refused)} runs={sum(runs.values())} lost={len(lost)}"
            f" doubled={len(doubled)}"
        )
    assert len(released) == ROUNDS
    assert sorted(r for r, _, _ in released) == list(range(ROUNDS))
    assert len(refused) == ROUNDS * (len(APPROVERS) - 1)
    assert lost == [] and doubled == []
    assert sorted(runs) == sorted(results)
    for call_id, result in results.items():
        assert result["ok"] is True and result["call_id"] == call_id
