"""A wait for a call's outcome that ends while PostgreSQL is away (every connection
refused, every backend terminated). The call was accepted, or the decision applied, before
the outage: the answer says so, as the call stands, never an error that has the caller
submit the call, or decide the request, a second time."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client

from router.status import CallStatus

from ..support.pg_outage import PgFaultStack, logged, newest_hold, pg_outage_stack
from ..support.waiting import wait_for, wait_until_finished

# A Redis db of its own (the suite's dbs are 11-15); flushed before and after.
REDIS_DB = 10


@pytest.fixture(scope="module")
def pg_fault_stack(
    request: pytest.FixtureRequest, redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PgFaultStack]:
    with pg_outage_stack(request, f"{redis_base}/{REDIS_DB}", tmp_path_factory) as fault:
        fault.stack.start_worker(name="approvals", queues="approvals", concurrency=1)
        fault.stack.keys["approver"] = fault.runtime.keys.create("approver", ["approver"])
        yield fault


def outage_as_the_wait_ends(fault: PgFaultStack, answered: Callable[[], bool]) -> str:
    """Once the newest ``hold`` call runs, PostgreSQL is away until its waiter is answered
    or the API has failed to flush the call to disk (its wait ended in the outage: the call
    is not read back, nor known on disk); the call's id."""
    runtime, stack = fault.runtime, fault.stack
    wait_for(lambda: (newest_hold(runtime) or ("", ""))[1] == "running", 60, "a hold running")
    call_id = (newest_hold(runtime) or ("", ""))[0]
    fault.outage(True)
    try:
        flushing = f"could not flush the accepted call {call_id} to disk"
        wait_for(lambda: answered() or logged(stack, "api", flushing), 60, "the wait's end")
    finally:
        fault.outage(False)
    return call_id


@pytest.mark.postgres
def test_a_waited_call_taken_before_an_outage_is_answered_as_taken(
    pg_fault_stack: PgFaultStack, tmp_path: Path
) -> None:
    """Accepted, then the database gone before its outcome could be read: the answer is
    the call as accepted (200), not a 503 that has its caller submit it again."""
    stack, runtime = pg_fault_stack.stack, pg_fault_stack.runtime
    release = tmp_path / "release"
    body = {"tool": "hold", "args": {"until": str(release)}, "wait_s": 5}
    answers: list[httpx.Response] = []
    with stack.client(timeout=120) as http:
        waiting = threading.Thread(
            target=lambda: answers.append(http.post("/v1/calls", json=body)), daemon=True
        )
        waiting.start()
        call_id = outage_as_the_wait_ends(pg_fault_stack, lambda: bool(answers))
        waiting.join(60)
    release.touch()
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    assert answer.json()["call_id"] == call_id
    # Queued as accepted, or running if the wait ended before the outage (a slow host).
    assert answer.json()["status"] in {"queued", "running"}
    row = wait_until_finished(runtime, [call_id], timeout=60)[call_id]
    assert row.status == CallStatus.SUCCEEDED, row


@pytest.mark.postgres
def test_a_waited_mcp_call_taken_before_an_outage_is_answered_as_taken(
    pg_fault_stack: PgFaultStack, tmp_path: Path
) -> None:
    """The same over MCP: the call as accepted, with its id, not an error result without
    one, which would have the agent call the tool again."""
    stack, runtime = pg_fault_stack.stack, pg_fault_stack.runtime
    release = tmp_path / "release"
    results: list[types.CallToolResult] = []

    async def call() -> None:
        headers = {"Authorization": f"Bearer {stack.keys['agent']}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=120) as http,
            Client(streamable_http_client(f"{stack.base_url}/mcp", http_client=http)) as client,
        ):
            results.append(await client.call_tool("hold", {"until": str(release)}))

    waiting = threading.Thread(target=anyio.run, args=(call,), daemon=True)
    waiting.start()
    call_id = outage_as_the_wait_ends(pg_fault_stack, lambda: bool(results))
    waiting.join(60)
    release.touch()
    (result,) = results
    assert not result.is_error, result
    answer = result.structured_content or {}
    assert answer.get("call_id") == call_id, result
    assert answer.get("status") in {"queued", "running"}, result
    row = wait_until_finished(runtime, [call_id], timeout=60)[call_id]
    assert row.status == CallStatus.SUCCEEDED, row


@pytest.mark.postgres
def test_an_approval_whose_wait_ends_in_an_outage_is_answered_as_applied(
    pg_fault_stack: PgFaultStack, tmp_path: Path
) -> None:
    """A decision the approver was told had failed is never applied later: so one applied
    is not answered 503 because the call could not be read when the wait ended."""
    stack, runtime = pg_fault_stack.stack, pg_fault_stack.runtime
    release = tmp_path / "release"
    with stack.client() as agent:
        submitted = agent.post(
            "/v1/calls", json={"tool": "gated_hold", "args": {"until": str(release)}}
        ).json()
    call_id, request_id = submitted["call_id"], submitted["request_id"]
    answers: list[httpx.Response] = []
    with stack.client("approver", timeout=120) as http:
        approving = threading.Thread(
            target=lambda: answers.append(
                http.post(f"/v1/approvals/{request_id}/approve", json={"wait_s": 20})
            ),
            daemon=True,
        )
        approving.start()

        def released() -> bool:
            return newest_hold(runtime, "gated_hold") in {(call_id, "queued"), (call_id, "running")}

        # Released: the decision is applied and its wait begun, with all of wait_s to go.
        wait_for(released, 60, "the call released")
        pg_fault_stack.outage(True)
        try:
            wait_for(lambda: answers, 60, "the approval's answer")
        finally:
            pg_fault_stack.outage(False)
        approving.join(60)
    release.touch()
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    assert answer.json()["released"] is True and answer.json()["call_id"] == call_id
    row = wait_until_finished(runtime, [call_id], timeout=60)[call_id]
    assert row.status == CallStatus.SUCCEEDED, row
